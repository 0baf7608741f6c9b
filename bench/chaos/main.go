// Command chaos is the cluster chaos soak (bench/chaos.sh; not in CI): three reverbgo nodes
// on one Redis (standalone or Sentinel) under churn, presence joins and leaves, fan-out and
// client events and Toolmark bridge calls, with member webhooks to a receiver that sometimes fails and sometimes
// hangs. Every --fault-every a fault: SIGKILL a node and restart it, SIGSTOP one for longer
// than node_timeout, SIGTERM one with joins in flight, restart Redis (standalone) or fail the
// Sentinel master over. After each fault settles it freezes the churn and checks, within
// node_timeout + 5 s: the HTTP API's users and counts equal what the clients hold, every
// node's observer members equal them too (no ghost, no missed member_added/removed), nothing
// lost to subscribers that stayed connected outside the outage windows; at the end every
// member_added webhook delivered or counted dropped, and RSS and goroutines flat. Loopback
// only; everything it starts is stopped on exit.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"
)

type options struct {
	bin, root, out  string
	topology        string
	duration, every time.Duration
	nodeTimeout     int
	rooms, joiners  int
	fanChannels     int
	fanSubs, pairs  int
	pages           int
	hang            time.Duration
	// The rolling-restart run (rolling.go).
	rolling                 bool
	recovery                bool
	clients, channels, rate int
	// server.drain_delay and server.drain_period of the nodes (s); 0 = the node closes at once.
	drainDelay, drainPeriod int
}

type stats struct {
	joins, joinErrors, pubs, pubErrors, clientEvents atomic.Int64
}

type chaos struct {
	o         options
	cl        *cluster
	t         *truth
	pub       *publisher
	rcv       *receiver
	redis     redisEnv
	redisDir  string
	observers []*observer
	fans      []*fanSub
	stats     stats
	bridge    bridgeStats
	log       io.Writer
	rows      []row
	pubQuiet  atomic.Bool // --recovery: publishing stopped before the end, so every event is judged
}

func (s *chaos) logf(format string, args ...any) {
	fmt.Fprintf(s.log, time.Now().Format("15:04:05 ")+format+"\n", args...)
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func main() { os.Exit(run(os.Args[1:], os.Stdout)) }

// envInt is the integer in the environment variable name, 0 when unset or not a number.
func envInt(name string) int {
	n, _ := strconv.Atoi(os.Getenv(name))
	return n
}

func run(args []string, out io.Writer) int {
	var o options
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	fs.StringVar(&o.bin, "bin", "bin/reverbgo", "reverbgo binary")
	fs.StringVar(&o.root, "root", ".", "repository root (for scripts/redis-topologies.sh)")
	fs.StringVar(&o.out, "out", "", "folder for configs and node logs (default a new temporary one)")
	fs.StringVar(&o.topology, "topology", "standalone", "standalone | sentinel | cluster (3 masters with a replica each)")
	fs.DurationVar(&o.duration, "duration", 30*time.Minute, "how long to run")
	fs.DurationVar(&o.every, "fault-every", 2*time.Minute, "time between faults")
	fs.IntVar(&o.nodeTimeout, "node-timeout", 5, "scaling.node_timeout of the nodes (s)")
	fs.IntVar(&o.rooms, "rooms", 5, "presence channels")
	fs.IntVar(&o.joiners, "joiners", 60, "presence joiners (each joins, holds 3-18 s, leaves, again)")
	fs.IntVar(&o.fanChannels, "fan-channels", 3, "fan-out channels (one HTTP API publish each per 200 ms)")
	fs.IntVar(&o.fanSubs, "fan-subs", 30, "fan-out subscribers")
	fs.IntVar(&o.pairs, "pairs", 6, "client-event pairs (sender and receiver on their own connections)")
	fs.IntVar(&o.pages, "pages", 4, "Toolmark pages (reloading every 15-40 s), each with an agent calling once a second")
	fs.DurationVar(&o.hang, "hang", 15*time.Second, "how long a hanging webhook receiver holds a POST")
	fs.BoolVar(&o.rolling, "rolling", false, "instead of the soak: a rolling restart of the three nodes under load (bench/rolling.sh)")
	fs.BoolVar(&o.recovery, "recovery", false, "nodes keep history (apps[].recovery) and clients resume; the soak judges every fan-out event of the run")
	fs.IntVar(&o.clients, "clients", 1000, "rolling: subscribers")
	fs.IntVar(&o.channels, "channels", 100, "rolling: private channels the subscribers spread over")
	fs.IntVar(&o.rate, "rate", 500, "rolling: events/s published through the HTTP API")
	fs.IntVar(&o.drainDelay, "drain-delay", envInt("DRAIN_DELAY"), "server.drain_delay of the nodes, s (default $DRAIN_DELAY, else 0)")
	fs.IntVar(&o.drainPeriod, "drain-period", envInt("DRAIN_PERIOD"), "server.drain_period of the nodes, s (default $DRAIN_PERIOD, else 0)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if o.out == "" {
		d, err := os.MkdirTemp("", "reverbgo-chaos-")
		if err != nil {
			fmt.Fprintln(out, err)
			return 1
		}
		o.out = d
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	s := &chaos{o: o, t: newTruth(), pub: &publisher{pubs: map[string][]pub{}}, log: out}
	runner := s.run
	if o.rolling {
		runner = s.rolling
	}
	ok, err := runner(ctx)
	if err != nil {
		fmt.Fprintln(out, "chaos:", err)
		return 1
	}
	if !ok {
		return 1
	}
	return 0
}

func (s *chaos) run(parent context.Context) (bool, error) {
	o := s.o
	s.logf("chaos: %s topology, %s, a fault every %s; logs in %s", o.topology, o.duration, o.every, o.out)
	cleanup, err := s.startCluster(parent)
	if err != nil {
		return false, err
	}
	defer cleanup()
	ctx, stop := context.WithCancel(parent)
	defer stop()
	s.startLoad(ctx)
	if !sleepCtx(ctx, 20*time.Second) { // warm up
		return false, ctx.Err()
	}
	s.check(ctx, "start", "-", 0)
	faults := faultsFor(o.topology)
	end := time.Now().Add(o.duration)
	for k := 0; time.Now().Before(end) && ctx.Err() == nil; k++ {
		if !sleepCtx(ctx, o.every) {
			break
		}
		fault, target := faults[k%len(faults)], s.cl.nodes[k%3]
		began := time.Now()
		if err := s.inject(ctx, fault, target); err != nil {
			s.logf("fault %s: %v", fault, err)
		}
		s.check(ctx, fault, targetName(fault, target), time.Since(began))
	}
	if o.recovery { // the last events are judged too: delivered before the subscribers close
		s.pubQuiet.Store(true)
		sleepCtx(ctx, 5*time.Second)
	}
	stop()
	return s.finish(parent), nil
}

func targetName(fault string, n *node) string {
	if redisFault(fault) {
		return "redis"
	}
	return "node " + strconv.Itoa(n.i)
}

func (s *chaos) startLoad(ctx context.Context) {
	o := s.o
	for g := range o.joiners {
		go s.joiner(ctx, g)
	}
	for _, n := range s.cl.nodes {
		for r := range o.rooms {
			ob := &observer{room: "presence-room-" + strconv.Itoa(r), user: fmt.Sprintf("obs-%d-%d", n.i, r)}
			s.observers = append(s.observers, ob)
			go s.runObserver(ctx, ob, n)
		}
	}
	for i := range o.fanSubs {
		f := &fanSub{channel: "fan-" + strconv.Itoa(i%o.fanChannels), event: "seq"}
		if o.recovery {
			f.rec = newResumer()
		}
		s.fans = append(s.fans, f)
		go s.runFanSub(ctx, f)
	}
	for i := range o.pairs {
		ch := "private-ce-" + strconv.Itoa(i)
		f := &fanSub{channel: ch, event: "client-seq"}
		s.fans = append(s.fans, f)
		go s.runFanSub(ctx, f)
		go s.sender(ctx, ch, 200*time.Millisecond)
	}
	for i := range o.pages {
		p := &page{conv: "conv-" + strconv.Itoa(i), cid: "chaos-client-" + strconv.Itoa(i)}
		go s.runPage(ctx, p)
		go s.agent(ctx, p)
	}
	go s.publish(ctx, 200*time.Millisecond)
}
