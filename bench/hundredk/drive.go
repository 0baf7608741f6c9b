package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/reverbgo/reverbgo/bench/internal/benchkit"
	"github.com/reverbgo/reverbgo/internal/pusherclient"
)

var benchApp = pusherclient.App{ID: "hk", Key: "hk-key", Secret: "hk-secret"}

type workerProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser

	mu      sync.Mutex
	ready   chan struct{}
	readyN  int64
	status  int64
	errors  int64
	reconn  int64
	flushed map[string][]int64
	got     chan string
}

type nodeProc struct {
	addr   string
	cmd    *exec.Cmd
	exited chan struct{} // closed once the process has ended (its one Wait)
}

func drive(args []string) (int, error) {
	fs := newFlags("hundredk")
	bin := fs.String("bin", "bin/reverbgo", "reverbgo binary")
	root := fs.String("root", ".", "repository root (scripts/redis-topologies.sh)")
	nodes := fs.Int("nodes", 6, "reverbgo nodes")
	// 15,500: each of the five survivors then holds 18,600, under the cap a node keeps at a
	// 20,000-file limit (server.max_connections: 0 keeps 1,000 for Redis and the HTTP API:
	// 19,000), so every socket of the killed node has a place. 16,500 (99,000) put 19,800 on
	// each survivor: one reached its 20,000 files, its accept failed with EMFILE and its HTTP
	// API stopped answering.
	per := fs.Int("per-node", 15500, "sockets per node (one worker process each)")
	marks := fs.Int("marks", 3, "broadcasts before the kill")
	wait := fs.Duration("wait", 5*time.Second, "how long a broadcast may take to reach every socket")
	out := fs.String("out", "", "folder for configs and logs (default a new temporary one)")
	stop := fs.String("stop", "kill", "how node 0 goes: kill (SIGKILL) or term (SIGTERM: its drain, server.drain_delay and server.drain_period)")
	drainDelay := fs.Int("drain-delay", -1, "server.drain_delay of every node (s; -1 = the default)")
	drainPeriod := fs.Int("drain-period", -1, "server.drain_period of every node (s; -1 = the default)")
	if fs.Parse(args) != nil || (*stop != "kill" && *stop != "term") {
		return 2, nil
	}
	drain := ""
	if *drainDelay >= 0 {
		drain += ", drain_delay: " + strconv.Itoa(*drainDelay)
	}
	if *drainPeriod >= 0 {
		drain += ", drain_period: " + strconv.Itoa(*drainPeriod)
	}
	if *out == "" {
		d, err := os.MkdirTemp("", "reverbgo-hundredk-")
		if err != nil {
			return 1, err
		}
		*out = d
	}
	logf := func(format string, a ...any) { fmt.Printf(time.Now().Format("15:04:05 ")+format+"\n", a...) }
	logf("hundredk: %d nodes × %d sockets; logs in %s", *nodes, *per, *out)
	rdir := filepath.Join(*out, "redis")
	env, err := exec.Command(filepath.Join(*root, "scripts/redis-topologies.sh"), "start", "standalone", rdir).Output()
	if err != nil {
		return 1, fmt.Errorf("redis: %v", err)
	}
	defer exec.Command(filepath.Join(*root, "scripts/redis-topologies.sh"), "stop", rdir).Run()
	redisURL := ""
	for _, l := range strings.Split(string(env), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "REDIS_URL="); ok {
			redisURL = v
		}
	}
	var ns []*nodeProc
	defer func() {
		for _, n := range ns {
			_ = n.cmd.Process.Kill()
			<-n.exited
		}
	}()
	for i := range *nodes {
		n, err := startNode(*bin, *out, i, redisURL, drain)
		if err != nil {
			return 1, err
		}
		ns = append(ns, n)
	}
	var addrs []string
	for i, n := range ns {
		if err := waitUp(n.addr, 20*time.Second); err != nil {
			return 1, err
		}
		select {
		case <-n.exited: // it answered /up, or another process on its port did
			return 1, fmt.Errorf("node %d exited (see node%d.log)", i, i)
		default:
		}
		addrs = append(addrs, n.addr)
	}
	self, _ := os.Executable()
	var ws []*workerProc
	defer func() {
		for _, w := range ws {
			_ = w.stdin.Close()
			_ = w.cmd.Process.Kill()
			_ = w.cmd.Wait()
		}
	}()
	t0 := time.Now()
	for i := range *nodes {
		w, err := startWorker(self, *out, i, *per, addrs)
		if err != nil {
			return 1, err
		}
		ws = append(ws, w)
	}
	var total, dialErrors int64
	for _, w := range ws {
		select {
		case <-w.ready:
		case <-time.After(10 * time.Minute):
			return 1, fmt.Errorf("workers not ready after 10 minutes")
		}
		w.mu.Lock()
		total += w.readyN
		dialErrors += w.errors
		w.mu.Unlock()
	}
	logf("connected and subscribed: %d sockets in %s (%d dial or subscribe errors, retried)", total, time.Since(t0).Round(time.Millisecond), dialErrors)
	var rss []float64
	for _, n := range ns {
		rss = append(rss, benchkit.RSSMiB(n.cmd.Process.Pid))
	}
	logf("RSS per node (MiB): %v", rss)
	summary := map[string]any{"sockets": total, "connect_s": time.Since(t0).Seconds(), "rss_mib": rss}
	var bcasts []map[string]any
	for k := 1; k <= *marks; k++ {
		r, err := broadcast(ws, addrs[1], "m"+strconv.Itoa(k), *wait)
		if err != nil {
			return 1, err
		}
		logf("broadcast %d: %d of %d delivered, last after %.1f ms, p50 %.1f ms, p99 %.1f ms", k, r["delivered"], total, r["last_ms"], r["p50_ms"], r["p99_ms"])
		bcasts = append(bcasts, r)
	}
	summary["broadcasts"] = bcasts
	// The kill: node 0's sockets reconnect to the others.
	var before []int64
	for _, n := range ns[1:] {
		before = append(before, cpuTicks(n.cmd.Process.Pid))
	}
	errs0, rec0 := sums(ws)
	killed := time.Now()
	if *stop == "term" {
		d, err := drainRun(ws, ns[0], addrs[1], total, logf)
		if err != nil {
			return 1, err
		}
		summary["drain"] = d
	} else {
		_ = ns[0].cmd.Process.Signal(syscall.SIGKILL)
	}
	<-ns[0].exited
	var back time.Duration
	for *stop == "kill" && subscribed(ws) == total && time.Since(killed) < 10*time.Second {
		time.Sleep(5 * time.Millisecond) // the workers report what they hold every 100 ms
	}
	progress := time.Now()
	for {
		if subscribed(ws) == total {
			back = time.Since(killed)
			break
		}
		if time.Since(killed) > 3*time.Minute {
			break
		}
		if time.Since(progress) >= 5*time.Second {
			progress = time.Now()
			e, r := sums(ws)
			logf("  %s after the kill: %d of %d subscribed, %d reconnects, %d failed attempts",
				time.Since(killed).Round(time.Second), subscribed(ws), total, r-rec0, e-errs0)
		}
		time.Sleep(20 * time.Millisecond)
	}
	var cpu []float64
	for i, n := range ns[1:] {
		cpu = append(cpu, float64(cpuTicks(n.cmd.Process.Pid)-before[i])/benchkit.ClockTicks)
	}
	errs1, rec1 := sums(ws)
	ns = ns[1:] // killed: nothing to stop
	if back == 0 {
		logf("after SIG%s of node 0: only %d of %d subscribed after 3 minutes", strings.ToUpper(*stop), subscribed(ws), total)
		return 1, nil
	}
	logf("after SIG%s of node 0: every socket subscribed again in %s (%d reconnects, %d failed attempts); survivors' CPU over it (s): %v",
		strings.ToUpper(*stop), back.Round(time.Millisecond), rec1-rec0, errs1-errs0, cpu)
	summary["kill"] = map[string]any{"resubscribed_s": back.Seconds(), "reconnects": rec1 - rec0, "failed_attempts": errs1 - errs0, "survivor_cpu_s": cpu}
	r, err := broadcast(ws, addrs[1], "after", *wait)
	if err != nil {
		return 1, err
	}
	logf("broadcast after the kill: %d of %d delivered, last after %.1f ms, p99 %.1f ms", r["delivered"], total, r["last_ms"], r["p99_ms"])
	summary["after_kill"] = r
	b, _ := json.Marshal(summary)
	fmt.Println(string(b))
	if r["delivered"].(int) != int(total) {
		return 1, nil
	}
	return 0, nil
}

func startNode(bin, out string, i int, redisURL, drain string) (*nodeProc, error) {
	// A free port below the ephemeral range (32768 and up here), so neither this run's
	// 93,000 client sockets nor another test's ":0" listener takes it between this check and
	// the node's own listen (a node once lost its port so, and another process answered).
	var addr string
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(20000+rand.IntN(12000)))
		if err == nil {
			addr = l.Addr().String()
			l.Close()
			break
		}
	}
	if addr == "" {
		return nil, fmt.Errorf("no free port for node %d", i)
	}
	host, port, _ := net.SplitHostPort(addr)
	cfg := fmt.Sprintf(`server: {host: %s, port: %s, shutdown_timeout: 30%s}
scaling: {enabled: true, redis_url: "%s", channel: hundredk}
apps:
  - {app_id: %s, key: %s, secret: %s, activity_timeout: 120}
`, host, port, drain, redisURL, app.ID, app.Key, app.Secret)
	path := filepath.Join(out, "node"+strconv.Itoa(i)+".yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	logFile, err := os.Create(filepath.Join(out, "node"+strconv.Itoa(i)+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "start", "--config", path, "--log-level", "warn")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	n := &nodeProc{addr: addr, cmd: cmd, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(n.exited) }()
	return n, nil
}

func waitUp(addr string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if r, err := http.Get("http://" + addr + "/up"); err == nil {
			r.Body.Close()
			if r.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("node %s not up", addr)
}

func startWorker(self, out string, i, n int, addrs []string) (*workerProc, error) {
	cmd := exec.Command(self, "worker", "--addrs", strings.Join(addrs, ","), "--home", strconv.Itoa(i), "--n", strconv.Itoa(n))
	stderr, err := os.Create(filepath.Join(out, "worker"+strconv.Itoa(i)+".log"))
	if err != nil {
		return nil, err
	}
	cmd.Stderr = stderr
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	w := &workerProc{cmd: cmd, stdin: stdin, ready: make(chan struct{}), flushed: map[string][]int64{}, got: make(chan string, 16)}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		for sc.Scan() {
			var m struct {
				Ready  *int64  `json:"ready"`
				Status *int64  `json:"status"`
				Errors int64   `json:"errors"`
				Reconn int64   `json:"reconnects"`
				Mark   string  `json:"mark"`
				Lat    []int64 `json:"lat_us"`
			}
			if json.Unmarshal(sc.Bytes(), &m) != nil {
				continue
			}
			w.mu.Lock()
			switch {
			case m.Ready != nil:
				w.readyN, w.status, w.errors = *m.Ready, *m.Ready, m.Errors
				close(w.ready)
			case m.Status != nil:
				w.status, w.errors, w.reconn = *m.Status, m.Errors, m.Reconn
			case m.Mark != "":
				w.flushed[m.Mark] = m.Lat
				w.got <- m.Mark
			}
			w.mu.Unlock()
		}
	}()
	return w, nil
}

// broadcast publishes one mark to every socket through addr, waits, and gathers the
// latencies every worker saw.
func broadcast(ws []*workerProc, addr, id string, wait time.Duration) (map[string]any, error) {
	body, _ := json.Marshal(map[string]any{"name": "mark", "channel": "all", "data": id + ":" + strconv.FormatInt(time.Now().UnixNano(), 10)})
	code, b, err := pusherclient.API(context.Background(), &http.Client{Timeout: 30 * time.Second}, addr, app, http.MethodPost, "/apps/"+app.ID+"/events", nil, body)
	if err != nil || code != http.StatusOK {
		return nil, fmt.Errorf("publish: %d %s %v", code, b, err)
	}
	time.Sleep(wait)
	var lat []int64
	for _, w := range ws {
		if _, err := fmt.Fprintf(w.stdin, "flush %s\n", id); err != nil {
			return nil, err
		}
		select {
		case <-w.got:
		case <-time.After(30 * time.Second):
			return nil, fmt.Errorf("a worker did not report mark %s", id)
		}
		w.mu.Lock()
		lat = append(lat, w.flushed[id]...)
		delete(w.flushed, id)
		w.mu.Unlock()
	}
	slices.Sort(lat)
	r := map[string]any{"delivered": len(lat)}
	if len(lat) > 0 {
		pct := func(p int) float64 { return float64(lat[(len(lat)-1)*p/100]) / 1000 }
		r["p50_ms"], r["p99_ms"], r["last_ms"] = pct(50), pct(99), float64(lat[len(lat)-1])/1000
	} else {
		r["p50_ms"], r["p99_ms"], r["last_ms"] = 0.0, 0.0, 0.0
	}
	return r, nil
}

func subscribed(ws []*workerProc) int64 {
	var n int64
	for _, w := range ws {
		w.mu.Lock()
		n += w.status
		w.mu.Unlock()
	}
	return n
}

func sums(ws []*workerProc) (errs, reconn int64) {
	for _, w := range ws {
		w.mu.Lock()
		errs += w.errors
		reconn += w.reconn
		w.mu.Unlock()
	}
	return
}

func cpuTicks(pid int) int64 {
	t, _ := benchkit.CPUTicks(pid)
	return t
}
