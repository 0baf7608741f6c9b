//go:build unix

// Command bridgebench measures Toolmark call round trips through reverbgo's embedded bridge.
//
// It plays both sides on one machine: N pages (one Pusher socket each, subscribed to its own
// private-toolmark.{user}.{conversation} channel, with a one-tool manifest) that answer every
// call event by POSTing the result to /toolmark/bridge/{conversation}, and an agent that keeps
// M signed POST /apps/{id}/toolmark/calls in flight (closed loop, round-robin over the
// conversations), or with --agent mcp M tools/call requests over the server's MCP endpoint
// (one Streamable HTTP session per conversation). With --think the page holds each call for a simulated tool time first, so
// that many calls are in flight at a moderate rate. Every call is correlated by id between
// the two sides (one clock), which splits the round trip into dispatch (agent POST → call
// event read), page time (event → result POST) and return (result POST → agent answer).
// Readable lines first, then one JSON summary as the last line. docs/bridge-bench.md has
// the method, the figures and run.sh, which pins server and tool to one core each.
//
//	bridgebench --port 16421 --app-id bench --key bench-key --secret bench-secret \
//	    --pages 1000 --inflight 1000 --calls 30000 [--think 1s --think-jitter 0.5] --pid $SERVER_PID
//
// Exit status: 0 ok, 1 could not run, 2 ran but some calls failed.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"
	"time"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// loopback reports whether host is a loopback name or address: the tool refuses to load
// anything else.
func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bridgebench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c Config
	fs.StringVar(&c.Host, "host", "127.0.0.1", "server host (loopback only)")
	fs.IntVar(&c.Port, "port", 8080, "server port")
	fs.StringVar(&c.Path, "path", "", "server.path prefix, e.g. /ws")
	fs.StringVar(&c.AppID, "app-id", "bench", "app id")
	fs.StringVar(&c.Key, "key", "bench-key", "app key")
	fs.StringVar(&c.Secret, "secret", "bench-secret", "app secret")
	fs.StringVar(&c.User, "user", "bench-u", "user id in the channel name")
	fs.IntVar(&c.Pages, "pages", 1000, "page sockets (= conversations)")
	fs.IntVar(&c.Inflight, "inflight", 1000, "agent calls in flight in total")
	fs.IntVar(&c.Calls, "calls", 50000, "measured calls")
	fs.IntVar(&c.Warmup, "warmup", -1, "calls before the measured window (-1 = 2 × --inflight)")
	fs.DurationVar(&c.Think, "think", 0, "simulated tool time: the page waits this long after the call event before POSTing the result")
	fs.Float64Var(&c.ThinkJitter, "think-jitter", 0, "spread --think uniformly by ± this fraction (e.g. 0.5), so that calls do not move in waves")
	fs.DurationVar(&c.CallTimeout, "call-timeout", 0, "timeout_ms sent with every call (0 = think × (1 + jitter) + 10s)")
	fs.DurationVar(&c.Timeout, "timeout", 5*time.Minute, "hard limit of the whole run")
	fs.IntVar(&c.PID, "pid", 0, "server PID: CPU time from /proc/PID/stat")
	fs.IntVar(&c.DialConcurrency, "dial-concurrency", 64, "page sockets set up at once")
	fs.StringVar(&c.H2C, "h2c", "", `HTTP/2 cleartext (prior knowledge): "agent" for the agent's calls, "all" for the pages' POSTs too; "" = HTTP/1.1`)
	fs.StringVar(&c.Agent, "agent", agentCalls, `the agent's surface: "calls" (POST /apps/{id}/toolmark/calls) or "mcp" (tools/call at {path}/toolmark/mcp, one session per conversation; needs toolmark.mcp.enabled and server.public_url)`)
	fs.StringVar(&c.MCPResource, "mcp-resource", "", "aud of the MCP tokens: the server's {public_url}{path}/toolmark/mcp (\"\" = http://{host}:{port}{path}/toolmark/mcp)")
	quiet := fs.Bool("quiet", false, "no per-second progress lines")
	cpuProfile := fs.String("cpuprofile", "", "write this tool's own CPU profile to the file (client-side costs)")
	dump := fs.String("dump", "", "write one CSV line per measured, correlated call to the file (times in µs since start)")
	if err := fs.Parse(args); err != nil {
		return 1
	}
	if !loopback(c.Host) {
		fmt.Fprintf(stderr, "bridgebench: refusing non-loopback host %q\n", c.Host)
		return 1
	}
	if c.Warmup < 0 {
		c.Warmup = 2 * c.Inflight
	}
	if !*quiet {
		c.Progress = stderr
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	fmt.Fprintf(stdout, "bridgebench: %d pages, %d calls in flight, %d calls (+%d warmup), think %v ±%.0f%%, server %s:%d, h2c %q, agent %s\n",
		c.Pages, c.Inflight, c.Calls, c.Warmup, c.Think, 100*c.ThinkJitter, c.Host, c.Port, c.H2C, c.Agent)
	perConv := (c.Inflight + c.Pages - 1) / c.Pages
	fmt.Fprintf(stdout, "limits (bridge defaults): results <= %d/s (pages × %d/s per socket, burst %d), calls <= %d/s (pages × %d/s per conversation), %d in flight per conversation (max %d)\n",
		c.Pages*defPageRate, defPageRate, defPageBurst, c.Pages*defCallRate, defCallRate, perConv, defMaxInFlight)
	if perConv > defMaxInFlight {
		fmt.Fprintf(stderr, "bridgebench: warning: %d calls in flight per conversation is over the bridge's limit of %d: expect 429s\n", perConv, defMaxInFlight)
	}
	if c.Agent == agentMCP && c.Pages > defMaxMCPSessions {
		fmt.Fprintf(stderr, "bridgebench: warning: %d MCP sessions (one per page) is over the server's default of %d per node: the oldest are closed and their calls fail\n", c.Pages, defMaxMCPSessions)
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintln(stderr, "bridgebench:", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(stderr, "bridgebench:", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	if *dump != "" {
		f, err := os.Create(*dump)
		if err != nil {
			fmt.Fprintln(stderr, "bridgebench:", err)
			return 1
		}
		defer f.Close()
		bw := bufio.NewWriter(f)
		defer bw.Flush()
		c.Dump = bw
	}
	res, err := Run(ctx, c)
	if err != nil {
		fmt.Fprintln(stderr, "bridgebench:", err)
		return 1
	}
	report(stdout, res)
	b, _ := json.Marshal(res)
	fmt.Fprintln(stdout, string(b))
	if res.Errors > 0 || res.OK == 0 {
		return 2
	}
	return 0
}

func report(w io.Writer, r *Result) {
	fmt.Fprintf(w, "setup: %d pages in %.2fs\n", r.Pages, r.SetupS)
	fmt.Fprintf(w, "calls: %d measured, %d ok, %d errors in %.2fs = %.0f calls/s\n",
		r.Calls, r.OK, r.Errors, r.DurationS, r.CallsPerS)
	fmt.Fprintf(w, "round trip (agent):      %s\n", r.RoundTrip)
	fmt.Fprintf(w, "overhead (rt - page):    %s\n", r.Overhead)
	fmt.Fprintf(w, "  dispatch (call->event): %s\n", r.Dispatch)
	fmt.Fprintf(w, "  return (POST->answer):  %s\n", r.Return)
	fmt.Fprintf(w, "  page POST:              %s\n", r.PagePost)
	fmt.Fprintf(w, "  page think:             %s\n", r.PageThink)
	fmt.Fprintf(w, "  rt - think - page POST: %s\n", r.RTMinusPage)
	fmt.Fprintf(w, "correlated by call id: %d of %d ok calls\n", r.Correlated, r.OK)
	if r.ServerCPUS >= 0 {
		fmt.Fprintf(w, "server CPU: %.2fs (%.2f cores) = %.1f µs/call; client CPU %.2fs = %.1f µs/call; other %.2fs\n",
			r.ServerCPUS, r.ServerCPUUtil, r.ServerCPUUsPerCall, r.ClientCPUS, r.ClientCPUUsPerCall, r.OtherCPUS)
	} else {
		fmt.Fprintf(w, "server CPU: unknown (no --pid); client CPU %.2fs = %.1f µs/call\n", r.ClientCPUS, r.ClientCPUUsPerCall)
	}
	if len(r.ErrorKinds) > 0 || len(r.PageErrorKinds) > 0 || r.Cancels > 0 {
		fmt.Fprintf(w, "errors (warmup included): agent %v, page %v, cancels %d\n", r.ErrorKinds, r.PageErrorKinds, r.Cancels)
		for _, s := range r.ErrorSamples {
			fmt.Fprintln(w, "  e.g.", s)
		}
	}
}
