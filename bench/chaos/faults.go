package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// row is one check after a fault.
type row struct {
	at               time.Time
	fault, target    string
	took, settled    time.Duration
	ok               bool
	detail           string
	lost, dup        int
	rssMiB, routines float64
}

// inject runs one fault to its end (the node back up, Redis answering).
func (s *chaos) inject(ctx context.Context, fault string, n *node) error {
	s.logf("fault: %s %s", fault, targetName(fault, n))
	s.t.openWindow(time.Now())
	defer func() { s.t.closeWindow(time.Now()) }()
	switch fault {
	case "kill":
		n.setUp(false)
		n.signal(syscall.SIGKILL)
		if !n.waitExit(10 * time.Second) {
			return fmt.Errorf("node %d did not die", n.i)
		}
		sleepCtx(ctx, time.Second)
		return s.restart(ctx, n)
	case "stop":
		n.setUp(false)
		n.signal(syscall.SIGSTOP)
		sleepCtx(ctx, time.Duration(s.o.nodeTimeout+3)*time.Second) // the survivors reap it
		n.signal(syscall.SIGCONT)
		return n.waitUp(ctx, 30*time.Second)
	case "term":
		// Joins in flight: a burst of presence subscribes to n, then SIGTERM at once.
		for i := range 20 {
			go s.burstJoin(ctx, n, fmt.Sprintf("burst-%d-%d", time.Now().Unix(), i))
		}
		sleepCtx(ctx, 50*time.Millisecond)
		n.setUp(false)
		n.signal(syscall.SIGTERM)
		if !n.waitExit(time.Duration(30+s.o.drainDelay+s.o.drainPeriod) * time.Second) {
			n.signal(syscall.SIGKILL)
			n.waitExit(5 * time.Second)
			return fmt.Errorf("node %d did not stop within 30 s of SIGTERM", n.i)
		}
		return s.restart(ctx, n)
	case "redis":
		return s.restartRedis(ctx)
	case "failover":
		return s.failover(ctx)
	case "master-kill":
		return s.masterKill(ctx)
	case "reshard":
		return s.reshard(ctx)
	case "cluster-failover":
		return s.clusterFailover(ctx)
	}
	return fmt.Errorf("unknown fault %q", fault)
}

func (s *chaos) restart(ctx context.Context, n *node) error {
	if err := n.start(s.o.bin); err != nil {
		return err
	}
	return n.waitUp(ctx, 30*time.Second)
}

// burstJoin joins room 0 on n as user and holds it until the connection ends.
func (s *chaos) burstJoin(ctx context.Context, n *node, user string) {
	room := "presence-room-0"
	s.t.gate.RLock()
	c, err := dialNode(ctx, n)
	if err == nil {
		if err = c.subscribe(room, user); err != nil {
			c.WS.Close()
		}
	}
	if err != nil {
		s.t.gate.RUnlock()
		return
	}
	s.t.add(room, user)
	done := make(chan struct{})
	s.t.watch(c, nil, func() { s.t.remove(room, user); close(done) })
	s.t.gate.RUnlock()
	select {
	case <-done:
	case <-ctx.Done():
		c.WS.Close()
	}
}

// restartRedis stops the standalone server (its data goes: it runs without persistence, so
// the nodes must rebuild what Redis held) and starts it again on the same port.
func (s *chaos) restartRedis(ctx context.Context) error {
	u, err := url.Parse(s.redis["REDIS_URL"])
	if err != nil {
		return err
	}
	port := u.Port()
	pidb, err := os.ReadFile(s.redisDir + "/standalone.pid")
	if err != nil {
		return err
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(pidb)))
	_ = syscall.Kill(pid, syscall.SIGTERM)
	for i := 0; i < 100 && syscall.Kill(pid, 0) == nil; i++ {
		sleepCtx(ctx, 100*time.Millisecond)
	}
	s.t.wiped(time.Now())
	sleepCtx(ctx, 2*time.Second) // an outage the nodes notice
	cmd := exec.Command("redis-server", "--bind", "127.0.0.1", "--port", port, "--save", "", "--appendonly", "no",
		"--daemonize", "yes", "--dir", s.redisDir, "--pidfile", s.redisDir+"/standalone.pid", "--logfile", s.redisDir+"/standalone.log")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("redis restart: %v %s", err, out)
	}
	for i := 0; i < 100; i++ {
		if exec.Command("redis-cli", "-p", port, "ping").Run() == nil {
			break
		}
		sleepCtx(ctx, 100*time.Millisecond)
	}
	for _, n := range s.cl.nodes {
		if err := n.waitUp(ctx, 30*time.Second); err != nil {
			return err
		}
	}
	return nil
}

// failover asks Sentinel to fail the master over and waits until it names a new one.
func (s *chaos) failover(ctx context.Context) error {
	addrs := strings.Split(s.redis["SENTINEL_ADDRS"], ",")
	_, port, _ := strings.Cut(addrs[0], ":")
	master := func() string {
		out, _ := exec.Command("redis-cli", "-p", port, "sentinel", "get-master-addr-by-name", "mymaster").Output()
		return strings.TrimSpace(string(out))
	}
	before := master()
	if out, err := exec.Command("redis-cli", "-p", port, "sentinel", "failover", "mymaster").CombinedOutput(); err != nil {
		return fmt.Errorf("sentinel failover: %v %s", err, out)
	}
	for i := 0; i < 300 && master() == before; i++ {
		sleepCtx(ctx, 100*time.Millisecond)
	}
	if master() == before {
		return fmt.Errorf("sentinel did not fail over")
	}
	sleepCtx(ctx, 2*time.Second)
	for _, n := range s.cl.nodes {
		if err := n.waitUp(ctx, 30*time.Second); err != nil {
			return err
		}
	}
	return nil
}

// check freezes the churn and polls until every node's HTTP API and every observer agree
// with the truth, for at most node_timeout + 5 s.
func (s *chaos) check(ctx context.Context, fault, target string, took time.Duration) {
	// Observers of a restarted node resubscribe under the gate: let them first.
	for i := 0; i < 100 && !s.observersAlive(); i++ {
		sleepCtx(ctx, 100*time.Millisecond)
	}
	s.t.gate.Lock()
	began := time.Now()
	limit := time.Duration(s.o.nodeTimeout+5) * time.Second
	var detail string
	ok := false
	for time.Since(began) < limit && ctx.Err() == nil {
		if detail = s.compare(ctx); detail == "" {
			ok = true
			break
		}
		sleepCtx(ctx, 250*time.Millisecond)
	}
	settled := time.Since(began)
	s.t.gate.Unlock()
	r := row{at: time.Now(), fault: fault, target: target, took: took, settled: settled, ok: ok, detail: detail}
	for _, f := range s.fans {
		s.account(f, time.Now())
		f.mu.Lock()
		r.lost += f.lost
		r.dup += f.dup
		f.mu.Unlock()
	}
	for _, n := range s.cl.nodes {
		if m, err := n.scrape(); err == nil {
			r.rssMiB = max(r.rssMiB, m.rss/(1<<20))
			r.routines = max(r.routines, m.goroutines)
		}
	}
	s.rows = append(s.rows, r)
	verdict := "ok"
	if !ok {
		verdict = "FAILED: " + detail
	}
	s.logf("check after %s (%s): %s in %s; lost %d, duplicated %d; RSS max %.1f MiB, goroutines max %.0f",
		fault, target, verdict, settled.Round(10*time.Millisecond), r.lost, r.dup, r.rssMiB, r.routines)
}

func (s *chaos) observersAlive() bool {
	for _, ob := range s.observers {
		if _, alive := ob.snapshot(); !alive {
			return false
		}
	}
	return true
}

// compare returns "" when the cluster agrees with the truth, else the first difference.
func (s *chaos) compare(ctx context.Context) string {
	for r := range s.o.rooms {
		room := "presence-room-" + strconv.Itoa(r)
		want := s.t.usersOf(room)
		for _, n := range s.cl.nodes {
			got, err := users(ctx, n, room)
			if err != nil {
				return fmt.Sprintf("node %d users of %s: %v", n.i, room, err)
			}
			if d := diff(want, got); d != "" {
				return fmt.Sprintf("node %d users of %s: %s", n.i, room, d)
			}
		}
		for _, ob := range s.observers {
			if ob.room != room {
				continue
			}
			got, alive := ob.snapshot()
			if !alive {
				return fmt.Sprintf("observer %s not subscribed", ob.user)
			}
			if d := diff(want, got); d != "" {
				return fmt.Sprintf("observer %s of %s: %s", ob.user, room, d)
			}
		}
	}
	for k := 0; k < s.o.fanChannels; k++ {
		ch := "fan-" + strconv.Itoa(k)
		s.t.mu.Lock()
		want := s.t.fanSubs[ch]
		s.t.mu.Unlock()
		for _, n := range s.cl.nodes {
			got, err := subscriptionCount(ctx, n, ch)
			if err != nil {
				return fmt.Sprintf("node %d count of %s: %v", n.i, ch, err)
			}
			if got != want {
				return fmt.Sprintf("node %d count of %s: %d, clients hold %d", n.i, ch, got, want)
			}
		}
	}
	return ""
}

func diff(want, got map[string]bool) string {
	var missing, extra []string
	for u := range want {
		if !got[u] {
			missing = append(missing, u)
		}
	}
	for u := range got {
		if !want[u] {
			extra = append(extra, u)
		}
	}
	if len(missing) == 0 && len(extra) == 0 {
		return ""
	}
	sort.Strings(missing)
	sort.Strings(extra)
	return fmt.Sprintf("missing %v, extra (ghosts) %v", head(missing), head(extra))
}

func head(s []string) []string {
	if len(s) > 5 {
		return append(s[:5:5], fmt.Sprintf("... %d in all", len(s)))
	}
	return s
}

// finish waits for the webhook outbox to drain and prints the table and the verdict.
func (s *chaos) finish(ctx context.Context) bool {
	expected := 0
	var missing []join
	s.t.mu.Lock()
	joins := append([]join(nil), s.t.joins...)
	s.t.mu.Unlock()
	var want []join
	for _, j := range joins {
		// A join just before a node died may never have reached the outbox: outages widened.
		if !s.t.inOutage(j.at, 5*time.Second, 3*time.Second) {
			want = append(want, j)
		}
	}
	expected = len(want)
	deadline := time.Now().Add(2*time.Minute + 2*s.o.hang)
	for {
		missing = missing[:0]
		for _, j := range want {
			if !s.rcv.has(j.channel, j.user) {
				missing = append(missing, j)
			}
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
		sleepCtx(ctx, time.Second)
	}
	var dropped float64
	for _, n := range s.cl.nodes {
		_, _ = n.scrape()
		dropped += n.droppedTotal()
	}
	ok := true
	fmt.Fprintln(s.log, "\n| # | time | fault | target | fault took | check | settled in | lost (cum.) | dup (cum.) | RSS max (MiB) | goroutines max |")
	fmt.Fprintln(s.log, "|---|---|---|---|---|---|---|---|---|---|---|")
	for i, r := range s.rows {
		v := "ok"
		if !r.ok {
			v, ok = "**failed**", false
		}
		fmt.Fprintf(s.log, "| %d | %s | %s | %s | %s | %s | %s | %d | %d | %.1f | %.0f |\n", i, r.at.Format("15:04:05"), r.fault, r.target,
			r.took.Round(100*time.Millisecond), v, r.settled.Round(10*time.Millisecond), r.lost, r.dup, r.rssMiB, r.routines)
	}
	last := s.rows[len(s.rows)-1]
	if last.lost > 0 {
		ok = false
	}
	ref := s.rows[min(len(s.rows)-1, max(1, len(s.rows)/3))]
	flat := last.rssMiB <= ref.rssMiB*1.5+16 && last.routines <= ref.routines*1.5+100
	if !flat {
		ok = false
	}
	hooksOK := float64(len(missing)) <= dropped
	if !hooksOK {
		ok = false
	}
	fmt.Fprintf(s.log, "\njoins %d (errors %d), publishes %d (errors %d), client events %d\n", s.stats.joins.Load(), s.stats.joinErrors.Load(),
		s.stats.pubs.Load(), s.stats.pubErrors.Load(), s.stats.clientEvents.Load())
	fmt.Fprintf(s.log, "bridge calls: %d ok, %d failed, %d excused (an outage or the page's own reload), %d to a page whose manifest a Redis wipe took\n", s.bridge.ok.Load(), s.bridge.failed.Load(), s.bridge.excused.Load(), s.bridge.wiped.Load())
	if s.bridge.failed.Load() > 0 {
		ok = false
	}
	fmt.Fprintf(s.log, "webhooks: %d member_added expected outside outages, %d missing, %d counted dropped by the nodes; receiver: %d POSTs, %d answered 500, %d hung\n",
		expected, len(missing), int(dropped), s.rcv.posts.Load(), s.rcv.failed.Load(), s.rcv.hung.Load())
	for i, j := range missing {
		if i == 5 {
			break
		}
		fmt.Fprintf(s.log, "  missing webhook: %s %s joined %s\n", j.channel, j.user, j.at.Format("15:04:05.000"))
	}
	fmt.Fprintf(s.log, "RSS max %.1f -> %.1f MiB, goroutines max %.0f -> %.0f (row %d -> last): flat=%v\n", ref.rssMiB, last.rssMiB, ref.routines, last.routines,
		min(len(s.rows)-1, max(1, len(s.rows)/3)), flat)
	if s.o.recovery {
		v := s.recoveryVerdict()
		fmt.Fprintf(s.log, "recovery: %v\n", v)
		if !v.ok() {
			ok = false
		}
	}
	if ok {
		fmt.Fprintln(s.log, "verdict: PASS")
	} else {
		fmt.Fprintln(s.log, "verdict: FAIL")
	}
	return ok
}
