package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/reverbgo/reverbgo/config"
	"github.com/reverbgo/reverbgo/internal/pusherclient"
	"github.com/reverbgo/reverbgo/internal/testutil"
)

// servedNode is one serveWith on a free port, driven by the test's signal channels.
type servedNode struct {
	base string
	stop chan os.Signal
	hup  chan os.Signal
	done chan struct{} // closed when serveWith returned, with err
	err  error
	reg  *prometheus.Registry
}

// wait waits up to d for serveWith to return and answers its error.
func (d *servedNode) wait(t *testing.T, within time.Duration) error {
	t.Helper()
	select {
	case <-d.done:
		return d.err
	case <-time.After(within):
		t.Fatalf("serve did not return within %v", within)
		return nil
	}
}

func startDrainNode(t *testing.T, delay, period int) *servedNode {
	t.Helper()
	host, port, _ := net.SplitHostPort(testutil.FreeAddr(t))
	cfg := &config.Config{
		Server: config.Server{Host: host, DrainDelay: &delay, DrainPeriod: &period, ShutdownTimeoutSeconds: 5},
		Apps:   []config.App{{ID: "d", Key: "d-key", Secret: "d-secret"}},
	}
	cfg.Server.Port, _ = strconv.Atoi(port)
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return startServing(t, cfg, nil, io.Discard)
}

// startServing runs serveWith(cfg) until the test ends; load is what SIGHUP (d.hup) reads.
func startServing(t *testing.T, cfg *config.Config, load func() (*config.Config, error), logs io.Writer) *servedNode {
	t.Helper()
	d := &servedNode{base: "http://" + net.JoinHostPort(cfg.Server.Host, strconv.Itoa(cfg.Server.Port)), stop: make(chan os.Signal, 2),
		hup: make(chan os.Signal, 1), done: make(chan struct{}), reg: newMetricsRegistry()}
	up := make(chan struct{})
	logger := slog.New(slog.NewJSONHandler(logs, nil))
	go func() {
		defer close(d.done)
		d.err = serveWith(cfg, logger, d.reg, lifecycle{stop: d.stop, hup: d.hup, load: load, listening: func(net.Addr) { close(up) }})
	}()
	select {
	case <-up:
	case <-d.done:
		t.Fatalf("serve: %v", d.err)
	case <-time.After(10 * time.Second):
		t.Fatal("node did not start listening")
	}
	t.Cleanup(func() {
		select {
		case d.stop <- syscall.SIGTERM:
		default:
		}
		select {
		case d.stop <- syscall.SIGTERM:
		default:
		}
		select {
		case <-d.done:
		case <-time.After(30 * time.Second):
			t.Error("node did not stop")
		}
	})
	return d
}

// up answers /up's status and health, or status 0 when the request fails (refused).
func (d *servedNode) up() (int, string) {
	hc := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := hc.Get(d.base + "/up")
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	var body struct{ Health string }
	_ = json.NewDecoder(resp.Body).Decode(&body)
	return resp.StatusCode, body.Health
}

func (d *servedNode) gauge(t *testing.T, name string) float64 {
	t.Helper()
	mfs, err := d.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no %s", name)
	return 0
}

// drainClient is a Pusher client that records its events and when it was told 4200.
type drainClient struct {
	*pusherclient.Listener
	mu     sync.Mutex
	events []string
	told   time.Time // pusher:error 4200
}

func (c *drainClient) got(event string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.events {
		if e == event {
			return true
		}
	}
	return false
}

func (c *drainClient) toldAt() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.told
}

func dialDrain(t *testing.T, d *servedNode, channel string) *drainClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c := &drainClient{}
	pc, err := pusherclient.DialListener(ctx, d.base, "d-key", pusherclient.Options{}, func(ev pusherclient.Frame) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if ev.Event == "pusher:error" && strings.Contains(ev.Str(), "4200") && c.told.IsZero() {
			c.told = time.Now()
		}
		c.events = append(c.events, ev.Event)
	})
	if err != nil {
		t.Fatal(err)
	}
	c.Listener = pc
	t.Cleanup(func() { _ = pc.Close() })
	if err := pc.Subscribe(ctx, pusherclient.App{Key: "d-key", Secret: "d-secret"}, channel, ""); err != nil {
		t.Fatal(err)
	}
	return c
}

func closeCode(err error) int {
	var ce *websocket.CloseError
	if errors.As(err, &ce) {
		return ce.Code
	}
	return 0
}

// TestDrainSequence: from the stop signal on /up answers 503 draining and reverbgo_draining
// is 1, while for drain_delay new sockets connect and the HTTP API publishes to every
// socket; then the sockets are told 4200 one by one, spread over drain_period.
func TestDrainSequence(t *testing.T) {
	const delay, period = 2 * time.Second, 2 * time.Second
	d := startDrainNode(t, 2, 2)
	if st, h := d.up(); st != 200 || h != "OK" {
		t.Fatalf("/up before the signal: %d %q", st, h)
	}
	if g := d.gauge(t, "reverbgo_draining"); g != 0 {
		t.Fatalf("reverbgo_draining = %v before the signal", g)
	}
	clients := []*drainClient{}
	for range 4 {
		clients = append(clients, dialDrain(t, d, "private-drain"))
	}
	t0 := time.Now()
	d.stop <- syscall.SIGTERM
	testutil.WaitForWithin(t, 500*time.Millisecond, "/up 503 draining after the signal", func() bool {
		st, h := d.up()
		return st == http.StatusServiceUnavailable && h == "draining"
	})
	if g := d.gauge(t, "reverbgo_draining"); g != 1 {
		t.Fatalf("reverbgo_draining = %v while draining", g)
	}
	// During the delay: a new socket is served, and the HTTP API reaches every socket.
	clients = append(clients, dialDrain(t, d, "private-drain"))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st, err := pusherclient.Trigger(ctx, http.DefaultClient, d.base, pusherclient.App{ID: "d", Key: "d-key", Secret: "d-secret"}, "private-drain", "during-delay", "{}")
	if err != nil || st != 200 {
		t.Fatalf("HTTP API during the delay: %d %v", st, err)
	}
	testutil.WaitFor(t, "every socket to get the event published during the delay", func() bool {
		for _, c := range clients {
			if !c.got("during-delay") {
				return false
			}
		}
		return true
	})
	if el := time.Since(t0); el >= delay {
		t.Fatalf("the checks of the delay took %v, longer than the delay itself: inconclusive", el)
	}
	if st, h := d.up(); st != http.StatusServiceUnavailable || h != "draining" {
		t.Fatalf("/up still within the delay: %d %q", st, h)
	}
	// Then 4200, spread over the period.
	testutil.WaitForWithin(t, delay+period+3*time.Second, "every socket told 4200", func() bool {
		for _, c := range clients {
			if c.toldAt().IsZero() {
				return false
			}
		}
		return true
	})
	var at []time.Duration
	for _, c := range clients {
		at = append(at, c.toldAt().Sub(t0))
	}
	sort.Slice(at, func(i, j int) bool { return at[i] < at[j] })
	t.Logf("4200 at %v after the signal", at)
	n := time.Duration(len(at))
	if at[0] < delay-50*time.Millisecond {
		t.Errorf("first 4200 at %v, before the delay (%v) ended", at[0], delay)
	}
	if spread := at[len(at)-1] - at[0]; spread < period*(n-1)/n/2 {
		t.Errorf("4200s spread over %v, want about %v (all at once?)", spread, period*(n-1)/n)
	}
	if at[len(at)-1] > delay+period+500*time.Millisecond {
		t.Errorf("last 4200 at %v, after delay + period", at[len(at)-1])
	}
	for i, c := range clients {
		testutil.WaitFor(t, "socket closed", func() bool { return c.Err() != nil })
		if closeCode(c.Err()) != 4200 {
			t.Errorf("socket %d closed with %v, want 4200", i, c.Err())
		}
	}
	if err := d.wait(t, 10*time.Second); err != nil {
		t.Fatal(err)
	}
}

// TestDrainSecondSignalSkips: a second stop signal ends the drain: every socket is told
// 4200 at once and the node stops, long before drain_delay + drain_period.
func TestDrainSecondSignalSkips(t *testing.T) {
	for _, stage := range []string{"delay", "period"} {
		t.Run(stage, func(t *testing.T) {
			delay, period := 30, 30
			if stage == "period" {
				delay = 0
			}
			d := startDrainNode(t, delay, period)
			var clients []*drainClient
			for range 40 {
				clients = append(clients, dialDrain(t, d, "private-skip"))
			}
			d.stop <- syscall.SIGTERM
			if stage == "delay" {
				testutil.WaitFor(t, "/up 503 draining", func() bool { st, _ := d.up(); return st == http.StatusServiceUnavailable })
			} else {
				testutil.WaitFor(t, "the first 4200 of the period", func() bool {
					for _, c := range clients {
						if !c.toldAt().IsZero() {
							return true
						}
					}
					return false
				})
			}
			t1 := time.Now()
			d.stop <- syscall.SIGTERM
			if err := d.wait(t, 10*time.Second); err != nil {
				t.Fatal(err)
			}
			if el := time.Since(t1); el > 5*time.Second {
				t.Fatalf("stopped %v after the second signal", el)
			}
			for i, c := range clients {
				testutil.WaitFor(t, "socket closed", func() bool { return c.Err() != nil })
				if c.toldAt().IsZero() || closeCode(c.Err()) != 4200 {
					t.Errorf("socket %d: told %v, closed with %v; want 4200", i, c.toldAt(), c.Err())
				}
			}
		})
	}
}

// TestDrainOff: drain_delay 0 and drain_period 0 keep the old shutdown: the listener is
// closed and every socket told 4200 at once.
func TestDrainOff(t *testing.T) {
	d := startDrainNode(t, 0, 0)
	var clients []*drainClient
	for range 5 {
		clients = append(clients, dialDrain(t, d, "private-off"))
	}
	d.stop <- syscall.SIGTERM
	if err := d.wait(t, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if st, _ := d.up(); st != 0 {
		t.Fatalf("/up answered %d after the stop", st)
	}
	if g := d.gauge(t, "reverbgo_draining"); g != 0 {
		t.Fatalf("reverbgo_draining = %v without a drain", g)
	}
	for i, c := range clients {
		testutil.WaitFor(t, "socket closed", func() bool { return c.Err() != nil })
		if closeCode(c.Err()) != 4200 {
			t.Errorf("socket %d closed with %v, want 4200", i, c.Err())
		}
	}
}

// TestConfigCheckDrain: config check prints the effective drain keys and refuses a negative
// one naming it.
func TestConfigCheckDrain(t *testing.T) {
	tests := []struct {
		name, server string
		rc           int
		want         string
	}{
		{"defaults", "", 0, "drain_delay: 5\n    drain_period: 10\n"},
		{"off", "server: {drain_delay: 0, drain_period: 0}\n", 0, "drain_delay: 0\n    drain_period: 0\n"},
		{"negative delay", "server: {drain_delay: -1}\n", 1, "server.drain_delay: must be >= 0"},
		{"negative period", "server: {drain_period: -3}\n", 1, "server.drain_period: must be >= 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb strings.Builder
			file := writeTemp(t, "c.yaml", tt.server+"apps: [{app_id: a, key: k, secret: s}]\n")
			if rc := run([]string{"config", "check", "--config", file}, &out, &errb); rc != tt.rc {
				t.Fatalf("rc = %d, stderr %s", rc, errb.String())
			}
			if got := out.String() + errb.String(); !strings.Contains(got, tt.want) {
				t.Fatalf("output lacks %q:\n%s", tt.want, got)
			}
		})
	}
}
