// Command soak runs one reverbgo node under a mixed load for a long time and checks that it
// stays healthy: connect/disconnect churn, fan-out through the HTTP API, client events,
// presence joins and leaves, Toolmark bridge calls, and a few abusive clients (slow bodies,
// slowloris heads, invalid WebSocket frames). Every --interval it prints the server's RSS,
// its goroutines (/metrics on --debug-addr) and the traffic so far; at the end, after the
// load stops and drains, it checks:
//
//   - RSS stays within --rss-tolerance (10 %) of its value at the end of the first interval;
//   - nothing is lost: every triggered event reached every subscriber, every client event its
//     receiver, every bridge call its result, and presence ends with the observer alone;
//   - no goroutine growth: idle after the run as idle before it (+ --goroutine-slack), and the
//     last interval's count within 10 % of the first's.
//
// It starts the binary itself on free loopback ports (never another address):
//
//	go build -o bin/reverbgo ./cmd/reverbgo && go run ./bench/soak --bin bin/reverbgo --duration 10m
//
// bench/soak.sh does exactly that. Exit status: 0 pass, 1 could not run, 2 ran and failed.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// soak is one run: the server under test and the counters of the load.
type soak struct {
	addr, debugAddr    string
	appID, key, secret string
	http               *http.Client
	c                  counters
	out                io.Writer
	samples            sync.Map // message prefix → seen, so a repeated problem prints once
	longMu             sync.Mutex
	long               []*sock // long-lived sockets, closed at the end
}

// sample prints a problem the first time its kind (first 40 characters) is seen.
func (s *soak) sample(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	k := msg
	if len(k) > 40 {
		k = k[:40]
	}
	if _, seen := s.samples.LoadOrStore(k, true); !seen {
		fmt.Fprintf(s.out, "  ! %s\n", msg)
	}
}

type options struct {
	bin, dir                          string
	duration, interval                time.Duration
	subs, pairs, churners, joiners    int
	pages, slowBodies, loris, invalid int
	fanRate, ceRate                   float64
	rssTolerance                      float64
	goroutineSlack                    int
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout))
}

func run(args []string, out io.Writer) int {
	var o options
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.StringVar(&o.bin, "bin", "bin/reverbgo", "reverbgo binary to start")
	fs.StringVar(&o.dir, "dir", "", "directory for the config and server log (default: a new temp dir)")
	fs.DurationVar(&o.duration, "duration", 10*time.Minute, "how long the load runs")
	fs.DurationVar(&o.interval, "interval", time.Minute, "how often a line of figures is printed")
	fs.IntVar(&o.subs, "subs", 100, "fan-out subscribers (long-lived)")
	fs.Float64Var(&o.fanRate, "fan-rate", 20, "fan-out triggers per second through the HTTP API")
	fs.IntVar(&o.pairs, "pairs", 10, "client-event sender/receiver pairs")
	fs.Float64Var(&o.ceRate, "ce-rate", 5, "client events per second per sender (default limit is 10)")
	fs.IntVar(&o.churners, "churners", 4, "connect/subscribe/disconnect loops")
	fs.IntVar(&o.joiners, "joiners", 10, "presence join/leave loops")
	fs.IntVar(&o.pages, "pages", 2, "Toolmark pages, each with an agent calling it in a loop")
	fs.IntVar(&o.slowBodies, "slow-bodies", 6, "clients trickling bodies: a signed trigger under max_request_size, and unauthenticated 1 MiB to the bridge and to the HTTP API, in turn")
	fs.IntVar(&o.loris, "slowloris", 4, "clients trickling a request head")
	fs.IntVar(&o.invalid, "invalid-frames", 2, "clients sending invalid WebSocket frames in a loop")
	fs.Float64Var(&o.rssTolerance, "rss-tolerance", 0.10, "allowed RSS drift after the first interval")
	fs.IntVar(&o.goroutineSlack, "goroutine-slack", 10, "goroutines idle-after may exceed idle-before")
	if err := fs.Parse(args); err != nil {
		return 1
	}
	if o.duration < o.interval {
		o.interval = o.duration
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv, err := startServer(ctx, o)
	if err != nil {
		fmt.Fprintln(out, "soak:", err)
		return 1
	}
	defer srv.stop()
	s := &soak{addr: srv.addr, debugAddr: srv.debugAddr, appID: "soak", key: "soak-key", secret: "soak-secret", out: out,
		http: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
	fmt.Fprintf(out, "soak: reverbgo pid %d on %s (metrics %s), log %s; %v, a line every %v\n",
		srv.cmd.Process.Pid, srv.addr, srv.debugAddr, srv.log, o.duration, o.interval)
	ok, err := s.run(ctx, o, srv)
	if err != nil {
		fmt.Fprintln(out, "soak:", err)
		return 1
	}
	if !ok {
		return 2
	}
	return 0
}

// server is the reverbgo process under test.
type server struct {
	cmd             *exec.Cmd
	addr, debugAddr string
	log             string
	done            chan struct{}
}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func startServer(ctx context.Context, o options) (*server, error) {
	dir := o.dir
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "reverbgo-soak-"); err != nil {
			return nil, err
		}
	}
	addr, err := freePort()
	if err != nil {
		return nil, err
	}
	debugAddr, err := freePort()
	if err != nil {
		return nil, err
	}
	_, port, _ := net.SplitHostPort(addr)
	cfg := fmt.Sprintf(`server: {host: 127.0.0.1, port: %s}
apps:
  - app_id: soak
    key: soak-key
    secret: soak-secret
    max_presence_members: 1000
    toolmark: {enabled: true}
`, port)
	cfgPath := filepath.Join(dir, "soak.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, "server.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(o.bin, "start", "--config", cfgPath, "--debug-addr", debugAddr)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	srv := &server{cmd: cmd, addr: addr, debugAddr: debugAddr, log: logPath, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); logf.Close(); close(srv.done) }()
	for end := time.Now().Add(15 * time.Second); ; {
		resp, err := http.Get("http://" + addr + "/up")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return srv, nil
			}
		}
		select {
		case <-srv.done:
			return nil, fmt.Errorf("reverbgo exited at start; see %s", logPath)
		case <-ctx.Done():
			srv.stop()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(end) {
			srv.stop()
			return nil, errors.New("reverbgo did not answer /up within 15 s")
		}
	}
}

func (srv *server) stop() {
	select {
	case <-srv.done:
		return
	default:
	}
	_ = srv.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-srv.done:
	case <-time.After(15 * time.Second):
		_ = srv.cmd.Process.Kill()
		<-srv.done
	}
}

// metric reads one sample (a line "name value") from the server's /metrics.
func (s *soak) metric(name string) (float64, error) {
	resp, err := http.Get("http://" + s.debugAddr + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			var v float64
			_, err := fmt.Sscanf(rest, "%g", &v)
			return v, err
		}
	}
	return 0, fmt.Errorf("no %s in /metrics", name)
}

// rss is the server's resident set from /proc (the process is ours), else from /metrics.
func (s *soak) rss(pid int) float64 {
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				var kb float64
				if _, err := fmt.Sscanf(strings.TrimSpace(rest), "%g", &kb); err == nil {
					return kb * 1024
				}
			}
		}
	}
	v, _ := s.metric("process_resident_memory_bytes")
	return v
}
