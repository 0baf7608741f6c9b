package console

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/reverbgo/reverbgo/api"
	"github.com/reverbgo/reverbgo/config"
	"github.com/reverbgo/reverbgo/internal/pusherclient"
	"github.com/reverbgo/reverbgo/pusher"
)

// triggering is a *pusher.Server whose Trigger is the HTTP API's, as cmd/reverbgo wires the
// console.
type triggering struct {
	*pusher.Server
	api *api.API
}

func (t triggering) Trigger(ctx context.Context, appID, channel, event string, data []byte) error {
	return t.api.Trigger(ctx, appID, channel, event, data)
}

func newTriggering(cfg *config.Config, srv *pusher.Server) triggering {
	return triggering{srv, api.New(api.Options{Config: cfg, Publisher: srv, Info: srv, Terminator: srv})}
}

// BenchmarkFanoutConsole measures one publish fanned out to real WebSocket subscribers with
// the console disabled (no Console), enabled but closed (a Console, no browser) and open (one
// stream draining events). Compare CPU per delivery between the three on a quiet machine:
//
//	go test -run '^$' -bench FanoutConsole -benchtime 20000x -count 10 ./console/ | benchstat -
//
// Each publish goes through the console's Trigger (api.API.Trigger), so the open variant pays for the API tap, the
// sampling budget and the per-delivery counters.
func BenchmarkFanoutConsole(b *testing.B) {
	for _, n := range []int{10, 100} {
		for _, mode := range []string{"disabled", "enabled-closed", "open"} {
			b.Run(fmt.Sprintf("%s-%d", mode, n), func(b *testing.B) { benchFanout(b, mode, n) })
		}
	}
}

func benchFanout(b *testing.B, mode string, n int) {
	cfg := &config.Config{Server: config.Server{MaxRequestSize: 10000}, Apps: []config.App{{
		ID: "bench", Key: "bench-key", Secret: "bench-secret", AllowedOrigins: []string{"*"},
		PingInterval: 600, ActivityTimeout: 600, MaxMessageSize: 10000, AcceptClientEventsFrom: "members",
		MaxPresenceMembers: 100, MaxBatchSize: 10,
	}}}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv := newTriggering(cfg, pusher.NewServer(pusher.Options{Config: cfg, Logger: quiet, MaxQueueBytes: 256 << 20}))
	e := echo.New()
	srv.Routes(e, "")
	ts := httptest.NewServer(e)
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		ts.Close()
	}()
	if mode != "disabled" {
		c := New(Options{Token: "t", Apps: []string{"bench"}, Server: srv, Logger: quiet})
		defer c.Close()
		if mode == "open" {
			s := &stream{app: "bench", ch: make(chan []byte, streamQueue)}
			c.mu.Lock()
			c.streams[s] = struct{}{}
			c.attachLocked()
			c.mu.Unlock()
			done := make(chan struct{})
			defer close(done)
			go func() { // the browser: takes what arrives
				for {
					select {
					case <-s.ch:
					case <-done:
						return
					}
				}
			}()
		}
	}

	counts := make([]*atomic.Int64, n)
	for i := range counts {
		counts[i] = subscriber(b, ts.URL, "orders")
	}
	data := []byte(`"{\"order\":{\"id\":123456,\"status\":\"shipped\",\"items\":[1,2,3]}}"`)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := srv.Trigger(ctx, "bench", "orders", "order.shipped", data); err != nil {
			b.Fatal(err)
		}
	}
	deadline := time.Now().Add(time.Minute)
	for _, c := range counts {
		for c.Load() < int64(b.N) {
			if time.Now().After(deadline) {
				b.Fatalf("a subscriber got %d of %d events", c.Load(), b.N)
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "deliveries/s")
}

// subscriber connects to base, subscribes to channel and counts the events that follow.
func subscriber(b *testing.B, base, channel string) *atomic.Int64 {
	b.Helper()
	c, err := pusherclient.DialWith(context.Background(), base, "bench-key", pusherclient.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	if _, err := c.Subscribe(pusherclient.App{Key: "bench-key"}, channel, ""); err != nil {
		b.Fatalf("subscribe: %v", err)
	}
	var count atomic.Int64
	go func() {
		for {
			if _, _, err := c.WS.ReadMessage(); err != nil {
				return
			}
			count.Add(1)
		}
	}()
	return &count
}

// TestClosedConsoleAddsNoAllocations: with the console enabled but no browser open, a publish
// allocates exactly what it allocates with no console at all; taps cost an atomic load only.
func TestClosedConsoleAddsNoAllocations(t *testing.T) {
	cfg := &config.Config{Server: config.Server{MaxRequestSize: 10000}, Apps: []config.App{{
		ID: "a", Key: "k", Secret: "s", AllowedOrigins: []string{"*"}, PingInterval: 60, ActivityTimeout: 30,
		MaxMessageSize: 10000, AcceptClientEventsFrom: "members", MaxPresenceMembers: 100, MaxBatchSize: 10,
	}}}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv := newTriggering(cfg, pusher.NewServer(pusher.Options{Config: cfg, Logger: quiet}))
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	data := []byte(`"{}"`)
	publish := func() {
		if err := srv.Trigger(context.Background(), "a", "orders", "e", data); err != nil {
			t.Fatal(err)
		}
	}
	without := testing.AllocsPerRun(200, publish)
	c := New(Options{Token: "t", Apps: []string{"a"}, Server: srv, Logger: quiet})
	t.Cleanup(c.Close)
	with := testing.AllocsPerRun(200, publish)
	if with != without {
		t.Fatalf("a closed console changes allocations per publish: %v → %v", without, with)
	}
}
