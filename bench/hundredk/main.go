// Command hundredk is the 100,000-connection run of issue 25 (bench/hundredk.sh; not in
// CI): --nodes reverbgo nodes on one standalone Redis, one worker process per node holding
// --per-node sockets (these machines cap a process at 20,000 open files), every socket
// subscribed to one channel. It reports each node's RSS, then --marks broadcasts to that
// channel (time to the last delivery, p50/p99 over every delivery), then SIGKILLs node 0
// and reports how long its sockets took to be subscribed again on the others, with their
// errors and the survivors' CPU over that window, and a last broadcast that must reach
// every socket. --stop term SIGTERMs node 0 instead (its drain: --drain-delay and
// --drain-period set server.drain_delay and server.drain_period of every node) and reports
// the survivors' peak reconnects per second and the p99 of a broadcast published every
// second during the drain. Loopback only; everything it starts is stopped on exit.
package main

import (
	"flag"
	"fmt"
	"os"
)

var app = benchApp

func newFlags(name string) *flag.FlagSet { return flag.NewFlagSet(name, flag.ContinueOnError) }

func main() {
	if len(os.Args) > 1 && os.Args[1] == "worker" {
		os.Exit(runWorker(os.Args[2:]))
	}
	code, err := drive(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "hundredk:", err)
	}
	os.Exit(code)
}
