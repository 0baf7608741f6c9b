package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// node is one reverbgo process of the cluster, restarted in place (same port) after a fault.
type node struct {
	i       int
	addr    string
	cfgPath string
	logPath string

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{}
	up      bool // running and not paused: load and checks may use it
	starts  int
	webhook metricsSnapshot // the last scrape of the current process
	dropped float64         // dropped webhook events of earlier processes of this node
}

type metricsSnapshot struct {
	rss, goroutines, dropped, received float64
}

// startCluster starts the topology's Redis, the webhook receiver and the three nodes, and
// waits until every node is up; cleanup kills the nodes and stops Redis.
func (s *chaos) startCluster(ctx context.Context) (cleanup func(), err error) {
	o := s.o
	s.redisDir = filepath.Join(o.out, "redis")
	env, err := startRedis(o.root, scriptTopology(o.topology), s.redisDir)
	if err != nil {
		return nil, err
	}
	s.redis = env
	s.cl = &cluster{}
	cleanup = func() {
		for _, n := range s.cl.nodes {
			n.signal(syscall.SIGCONT)
			n.signal(syscall.SIGKILL)
			n.waitExit(5 * time.Second)
		}
		stopRedis(o.root, s.redisDir)
	}
	defer func() {
		if err != nil {
			cleanup()
		}
	}()
	if s.rcv, err = startReceiver(o.hang); err != nil {
		return nil, err
	}
	for i := range 3 {
		n := &node{i: i, addr: freeAddr(), cfgPath: filepath.Join(o.out, "node"+strconv.Itoa(i)+".yaml"),
			logPath: filepath.Join(o.out, "node"+strconv.Itoa(i)+".log")}
		if err = o.writeConfig(n, env, s.rcv.url()); err != nil {
			return nil, err
		}
		if err = n.start(o.bin); err != nil {
			return nil, err
		}
		s.cl.nodes = append(s.cl.nodes, n)
	}
	for _, n := range s.cl.nodes {
		if err = n.waitUp(ctx, 15*time.Second); err != nil {
			return nil, err
		}
	}
	return cleanup, nil
}

// redisEnv is what scripts/redis-topologies.sh printed for the chosen topology.
type redisEnv map[string]string

func startRedis(root, topology, dir string) (redisEnv, error) {
	out, err := exec.Command(filepath.Join(root, "scripts/redis-topologies.sh"), "start", topology, dir).Output()
	if err != nil {
		return nil, fmt.Errorf("redis %s: %v", topology, err)
	}
	env := redisEnv{}
	for _, l := range strings.Split(string(out), "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(l), "="); ok {
			env[k] = v
		}
	}
	return env, nil
}

func stopRedis(root, dir string) {
	_ = exec.Command(filepath.Join(root, "scripts/redis-topologies.sh"), "stop", dir).Run()
}

func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// writeConfig writes node i's YAML: one app with presence, client events, the bridge and
// member webhooks to the receiver; scaling over the topology's Redis.
func (o *options) writeConfig(n *node, env redisEnv, hook string) error {
	host, port, _ := net.SplitHostPort(n.addr)
	var scaling string
	switch o.topology {
	case "sentinel":
		scaling = fmt.Sprintf("redis_sentinel: {master_name: %s, addrs: [%s]}", env["SENTINEL_MASTER"], env["SENTINEL_ADDRS"])
	case "cluster":
		scaling = fmt.Sprintf("redis_cluster: {addrs: [%s]}", env["CLUSTER_ADDRS"])
	default:
		scaling = "redis_url: " + env["REDIS_URL"]
	}
	cfg := fmt.Sprintf(`server: {host: %s, port: %s, shutdown_timeout: 5, drain_delay: %d, drain_period: %d}
metrics: {enabled: true}
scaling: {enabled: true, %s, channel: chaos, node_timeout: %d}
apps:
  - app_id: chaos
    key: chaos-key
    secret: chaos-secret
    accept_client_events_from: members
    client_event_rate_limit: 0
    max_presence_members: 10000
    activity_timeout: 30
    toolmark: {enabled: true}
    recovery: {enabled: %v, history_size: 1000}
    webhooks:
      - url: %s
        event_types: [member_added]
`, host, port, o.drainDelay, o.drainPeriod, scaling, o.nodeTimeout, o.recovery, hook)
	return os.WriteFile(n.cfgPath, []byte(cfg), 0o600)
}

func (n *node) start(bin string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	logf, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, "start", "--config", n.cfgPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	n.cmd, n.exited = cmd, make(chan struct{})
	n.starts++
	go func(c *exec.Cmd, done chan struct{}) { _ = c.Wait(); logf.Close(); close(done) }(cmd, n.exited)
	return nil
}

// waitUp polls /up until it answers 200.
func (n *node) waitUp(ctx context.Context, d time.Duration) error {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if resp, err := http.Get("http://" + n.addr + "/up"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				n.setUp(true)
				return nil
			}
		}
		if !sleepCtx(ctx, 100*time.Millisecond) {
			return ctx.Err()
		}
	}
	return fmt.Errorf("node %d not up within %s (log %s)", n.i, d, n.logPath)
}

func (n *node) setUp(v bool) { n.mu.Lock(); n.up = v; n.mu.Unlock() }
func (n *node) isUp() bool   { n.mu.Lock(); defer n.mu.Unlock(); return n.up }

func (n *node) signal(sig syscall.Signal) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd != nil && n.cmd.Process != nil {
		_ = n.cmd.Process.Signal(sig)
	}
}

// stopped waits for the process to exit (after a kill or a term).
func (n *node) waitExit(d time.Duration) bool {
	n.mu.Lock()
	ch := n.exited
	n.mu.Unlock()
	select {
	case <-ch:
		n.mu.Lock()
		n.dropped += n.webhook.dropped
		n.webhook = metricsSnapshot{}
		n.mu.Unlock()
		return true
	case <-time.After(d):
		return false
	}
}

// scrape reads the node's process and webhook metrics.
func (n *node) scrape() (metricsSnapshot, error) {
	c := http.Client{Timeout: 3 * time.Second}
	resp, err := c.Get("http://" + n.addr + "/metrics")
	if err != nil {
		return metricsSnapshot{}, err
	}
	defer resp.Body.Close()
	var m metricsSnapshot
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 8<<20))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		name, val, ok := metricLine(l)
		if !ok {
			continue
		}
		switch {
		case name == "process_resident_memory_bytes":
			m.rss = val
		case name == "go_goroutines":
			m.goroutines = val
		case strings.HasPrefix(name, "reverbgo_webhook_deliveries_total") && strings.Contains(name, `result="dropped"`):
			m.dropped += val
		case strings.HasPrefix(name, "reverbgo_cluster_messages_received_total"):
			m.received += val
		}
	}
	n.mu.Lock()
	n.webhook = m
	n.mu.Unlock()
	return m, sc.Err()
}

func metricLine(l string) (string, float64, bool) {
	if l == "" || l[0] == '#' {
		return "", 0, false
	}
	i := strings.LastIndexByte(l, ' ')
	if i < 0 {
		return "", 0, false
	}
	v, err := strconv.ParseFloat(l[i+1:], 64)
	return l[:i], v, err == nil
}

// droppedTotal is the node's dropped webhook events over all its processes so far.
func (n *node) droppedTotal() float64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.dropped + n.webhook.dropped
}
