package pusher

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/reverbgo/reverbgo/channels"
	"github.com/reverbgo/reverbgo/config"
	"github.com/reverbgo/reverbgo/internal/cluster"
	"github.com/reverbgo/reverbgo/internal/testenv"
	"github.com/reverbgo/reverbgo/internal/testutil"
)

// startRedis runs a redis-server of the test's own on a free 127.0.0.1 port (the test
// stops and continues the process, so it cannot share REVERBGO_TEST_REDIS_URL's).
func startRedis(t *testing.T) (addr string, proc *exec.Cmd) {
	t.Helper()
	bin := testenv.RedisServer(t) // skips, or fails under CI, without one
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	addr = "127.0.0.1:" + strconv.Itoa(port)
	probe := redis.NewClient(&redis.Options{Addr: addr})
	defer probe.Close()
	testutil.WaitFor(t, "redis-server up", func() bool { return probe.Ping(context.Background()).Err() == nil })
	return addr, cmd
}

// p99 of the samples (the largest of fewer than 100).
func p99(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*99/100)]
}

// A Redis that stops answering (SIGSTOP: no RST, just silence) for 10 s under 1,000 live
// sockets: pings, public subscribes and local fan-out of client events keep answering with
// p99 under 50 ms, presence joins fail with pusher:error (or wait) without stalling anyone
// else, and everything works again after SIGCONT.
func TestRedisStallDoesNotStallPollers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 1,000 sockets and stalls Redis for 10 s")
	}
	addr, proc := startRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil)) // the outage's warnings are expected
	broker, err := cluster.NewRedisBroker(ctx, rdb, cluster.RedisBrokerOptions{Channel: "stall:" + uuid.NewString(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = broker.Close() })
	presence := cluster.NewRedisPresence(rdb, cluster.RedisPresenceOptions{Prefix: "stall:" + uuid.NewString() + ":", NodeID: broker.NodeID(), Logger: quiet})
	t.Cleanup(func() { _ = presence.Close() })
	occ := cluster.NewRedisOccupancy(presence, "private-toolmark.", quiet)
	t.Cleanup(occ.Close)
	reg := channels.NewRegistry(channels.Options{Broker: broker, Presence: presence, Occupancy: occ})
	broker.Start(reg.DeliverLocal)
	ts := newServer(t, withOptions(func(o *Options) { o.Registry = reg }),
		withApp(func(a *config.App) { a.ClientEventRateLimit = intPtr(0) })) // the probe sends more than 10/s

	const sockets = 1000
	clients := make([]*client, sockets)
	var wg sync.WaitGroup
	var mu sync.Mutex
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < sockets; i += 8 {
				c, err := dial(t, ts.wsURL(ts.app.Key, "protocol=7"), nil)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				clients[i] = c
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	for _, c := range clients {
		ev := c.WaitEvent("pusher:connection_established", "")
		var d struct {
			SocketID string `json:"socket_id"`
		}
		ev.DataInto(t, &d)
		c.SocketID = d.SocketID
	}
	testutil.WaitFor(t, "every socket registered", func() bool { return ts.s.ConnectionCount(testAppID) == sockets })
	// A room for client events: one sender, 50 receivers; everyone on a public channel.
	sender, receivers := clients[0], clients[1:51]
	for _, c := range clients[:51] {
		ts.subscribePrivate(c, "private-room")
	}
	// A presence member before the stall, to prove Redis presence works here at all.
	ts.subscribePresence(clients[999], "presence-before", `{"user_id":"before"}`)

	measure := func(label string, rounds int) (pings, subs, fanout latencyProbe) {
		pings.name, subs.name, fanout.name = "ping", "public subscribe", "client event fan-out"
		for r := range rounds {
			// pings and subscribes from 20 sockets spread over the node
			for k := range 20 {
				c := clients[100+(r*20+k)%800]
				start := time.Now()
				c.Send(map[string]any{"event": "pusher:ping", "data": map[string]any{}})
				c.WaitEvent("pusher:pong", "")
				pings.samples = append(pings.samples, time.Since(start))
				ch := fmt.Sprintf("pub-%s-%d-%d", label, r, k)
				start = time.Now()
				c.Subscribe(ch)
				subs.samples = append(subs.samples, time.Since(start))
			}
			start := time.Now()
			tag := fmt.Sprintf("%s-%d", label, r)
			sender.Send(map[string]any{"event": "client-tick", "channel": "private-room", "data": tag})
			for _, rc := range receivers {
				for {
					ev := rc.WaitEvent("client-tick", "private-room")
					if ev.DataString(t) == tag {
						break
					}
				}
				fanout.samples = append(fanout.samples, time.Since(start))
			}
		}
		return
	}

	// During the stall, presence joins from other sockets: each must fail with a
	// pusher:error or succeed, never block the probes below.
	if err := proc.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stalled := time.Now()
	presenceDone := make(chan string, 10)
	for k := range 10 {
		c := clients[900+k]
		go func() {
			ch := fmt.Sprintf("presence-stall-%d", k)
			cd := fmt.Sprintf(`{"user_id":"u%d"}`, k)
			c.SubscribeMsg(ch, presenceAuth(ts.app.Key, ts.app.Secret, c.SocketID, ch, cd), cd)
			deadline := time.Now().Add(15 * time.Second)
			for time.Now().Before(deadline) {
				ev, ok := c.TryNext(time.Until(deadline))
				if !ok {
					break
				}
				if ev.Event == "pusher:error" || (ev.Event == "pusher_internal:subscription_succeeded" && ev.Channel == ch) {
					presenceDone <- ev.Event
					return
				}
			}
			presenceDone <- "no answer"
		}()
	}
	// A channel of the cluster socket index (toolmark's) writes the index before it answers:
	// during the stall that write waits for its deadline on the socket's task goroutine.
	indexed := make(chan string, 1)
	go func() {
		c := clients[950]
		ch := "private-toolmark.stall"
		c.SubscribeMsg(ch, privateAuth(ts.app.Key, ts.app.Secret, c.SocketID, ch), "")
		for {
			ev, ok := c.TryNext(15 * time.Second)
			if !ok {
				indexed <- "no answer"
				return
			}
			if ev.Channel == ch || ev.Event == "pusher:error" {
				indexed <- ev.Event
				return
			}
		}
	}()
	var during []latencyProbe
	for time.Since(stalled) < 10*time.Second {
		p, s, f := measure("stall", 2)
		during = mergeProbes(during, p, s, f)
		time.Sleep(5 * time.Millisecond) // a steady load, not a spin on a shared machine
	}
	if err := proc.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	for _, p := range during {
		t.Logf("while Redis was stopped: %s p99 %v over %d samples", p.name, p99(p.samples), len(p.samples))
		if got := p99(p.samples); got > 50*time.Millisecond {
			t.Errorf("%s p99 %v while Redis was stopped, want under 50ms", p.name, got)
		}
	}
	answers := map[string]int{}
	for range 10 {
		answers[<-presenceDone]++
	}
	if got := <-indexed; got != "pusher_internal:subscription_succeeded" {
		t.Errorf("indexed channel subscribe during the stall: %s", got)
	}
	t.Logf("presence joins during the stall: %v", answers)
	if answers["no answer"] > 0 {
		t.Errorf("presence joins left without an answer: %v", answers)
	}

	// After SIGCONT: presence works again, and so does everything else.
	testutil.WaitFor(t, "presence join after the stall", func() bool {
		c := clients[998]
		ch := "presence-after-" + uuid.NewString()[:8]
		cd := `{"user_id":"after"}`
		c.SubscribeMsg(ch, presenceAuth(ts.app.Key, ts.app.Secret, c.SocketID, ch, cd), cd)
		for {
			ev, ok := c.TryNext(3 * time.Second)
			if !ok || ev.Event == "pusher:error" {
				return false
			}
			if ev.Event == "pusher_internal:subscription_succeeded" && ev.Channel == ch {
				return strings.Contains(string(ev.Raw), `after`)
			}
		}
	})

	p, s, f := measure("after", 2)
	for _, pr := range []latencyProbe{p, s, f} {
		t.Logf("after SIGCONT: %s p99 %v", pr.name, p99(pr.samples))
	}
}

// latencyProbe is one kind of request and how long each took.
type latencyProbe struct {
	name    string
	samples []time.Duration
}

func mergeProbes(into []latencyProbe, ps ...latencyProbe) []latencyProbe {
	if into == nil {
		return ps
	}
	for i := range into {
		into[i].samples = append(into[i].samples, ps[i].samples...)
	}
	return into
}
