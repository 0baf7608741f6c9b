package pusher

import (
	"context"
	"fmt"
	"github.com/reverbgo/reverbgo/internal/testutil"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/reverbgo/reverbgo/config"
)

// sample returns the value of the series name{labels} in reg, or -1 when absent.
func sample(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue next
				}
			}
			return value(m)
		}
	}
	return -1
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	return -1
}

// newMetricsServer is newServer with the HTTPMetrics middleware installed before the server
// starts (echo's middleware list must not change while requests are served).
func newMetricsServer(t *testing.T, app func(*config.App)) *tserver {
	t.Helper()
	cfg := testConfig()
	app(&cfg.Apps[0])
	return newMetricsServerConfig(t, cfg)
}

func newMetricsServerConfig(t *testing.T, cfg *config.Config, opts ...func(*Options)) *tserver {
	t.Helper()
	o := Options{Config: cfg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for _, fn := range opts {
		fn(&o)
	}
	s := NewServer(o)
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.Use(s.HTTPMetrics(""))
	s.Routes(e, "")
	hs := httptest.NewUnstartedServer(e)
	hs.Listener = s.FastListener(hs.Listener, "")
	hs.Start()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		_ = s.Shutdown(ctx)
		hs.Close()
	})
	return &tserver{t: t, cfg: cfg, app: &cfg.Apps[0], s: s, e: e, ts: hs}
}

func TestMetricsMoveWithTraffic(t *testing.T) {
	cfg := testConfig()
	cfg.Apps[0].ClientEventRateLimit = intPtr(1)
	cfg.Apps[0].AcceptClientEventsFrom = "all"
	// The client-event limit counts per wall-clock second: a stopped clock keeps the two
	// client events below in one second however slowly the test runs.
	clock := newFakeClock(time.Now())
	ts := newMetricsServerConfig(t, cfg, func(o *Options) { o.Now = clock.Now })
	reg := prometheus.NewRegistry()
	reg.MustRegister(ts.s.Collector())
	app := map[string]string{"app": testAppID}

	a, b := ts.connect(t), ts.connect(t)
	a.Subscribe("news")
	b.Subscribe("news")
	ts.subscribePresence(b, "presence-room", `{"user_id":"u1"}`)
	ts.trigger(t, "news", "hello", "12345")
	a.WaitEvent("hello", "news")
	b.WaitEvent("hello", "news")

	testutil.WaitFor(t, "opened", func() bool { return sample(t, reg, "reverbgo_connections_opened_total", app) == 2 })
	if v := sample(t, reg, "reverbgo_connections", app); v != 2 {
		t.Errorf("connections = %v", v)
	}
	if v := sample(t, reg, "reverbgo_subscriptions", map[string]string{"app": testAppID, "type": "public"}); v != 2 {
		t.Errorf("public subscriptions = %v", v)
	}
	if v := sample(t, reg, "reverbgo_channels", map[string]string{"app": testAppID, "type": "presence"}); v != 1 {
		t.Errorf("presence channels = %v", v)
	}
	if v := sample(t, reg, "reverbgo_presence_members", app); v != 1 {
		t.Errorf("presence members = %v", v)
	}
	if v := sample(t, reg, "reverbgo_messages_published_total", app); v != 1 {
		t.Errorf("published = %v", v)
	}
	// The trigger reached two sockets; member_added etc. are broadcasts too, so at least 2.
	if v := sample(t, reg, "reverbgo_deliveries_total", nil); v < 2 {
		t.Errorf("deliveries = %v", v)
	}
	// Every socket wrote at least its subscription_succeeded and the event through a flusher
	// (connection_established went out with the 101, before the flusher): with writev, or
	// with io_uring (server.io_uring's default) where the kernel allows it.
	writes := sample(t, reg, "reverbgo_socket_writes_total", map[string]string{"path": "writev"}) +
		sample(t, reg, "reverbgo_socket_writes_total", map[string]string{"path": "io_uring"})
	if frames := sample(t, reg, "reverbgo_frames_written_total", nil); writes < 2 || frames < writes {
		t.Errorf("flusher socket writes = %v, frames written = %v", writes, frames)
	}
	if v := sample(t, reg, "reverbgo_socket_writes_total", map[string]string{"path": "blocking"}); v != 0 {
		t.Errorf("blocking writes = %v on fast sockets that never filled", v)
	}
	if v := sample(t, reg, "reverbgo_flusher_rounds_total", map[string]string{"coalesced": "false"}); v < 2 {
		t.Errorf("flusher rounds = %v", v)
	}
	if v := sample(t, reg, "reverbgo_flusher_rounds_total", map[string]string{"coalesced": "true"}); v != 0 {
		t.Errorf("coalesced rounds = %v on an idle server", v)
	}
	// The Pusher HTTP API's routes are package api's (TestAPIRequestsCounted there).
	if st, _ := ts.rawAPI(t, "GET", "/up", nil); st != http.StatusOK {
		t.Fatalf("/up: %d", st)
	}
	if v := sample(t, reg, "reverbgo_http_requests_total", map[string]string{"app": "", "endpoint": "/up", "code": "200"}); v != 1 {
		t.Errorf("http /up 200 = %v", v)
	}
	ts.rawAPI(t, "GET", "/no/such/route/"+strings.Repeat("x", 10), nil)
	if v := sample(t, reg, "reverbgo_http_requests_total", map[string]string{"endpoint": "other", "code": "404"}); v != 1 {
		t.Errorf("http other 404 = %v", v)
	}

	// Client events: the second in one second is refused by the rate limit of 1.
	before := sample(t, reg, "reverbgo_client_messages_received_total", app)
	for i := 0; i < 2; i++ {
		a.Send(map[string]any{"event": "client-x", "channel": "news", "data": map[string]any{}})
	}
	a.WaitError()
	if v := sample(t, reg, "reverbgo_rate_limit_refusals_total", map[string]string{"app": testAppID, "limit": "client_events"}); v != 1 {
		t.Errorf("rate limited = %v", v)
	}
	if v := sample(t, reg, "reverbgo_client_messages_received_total", app); v != before+2 {
		t.Errorf("client messages = %v, want %v", v, before+2)
	}

	_ = a.WS.Close()
	testutil.WaitFor(t, "closed counted", func() bool {
		return sample(t, reg, "reverbgo_connections_closed_total", map[string]string{"app": testAppID, "reason": "client_gone"}) == 1
	})

	if c, err := dial(t, ts.wsURL("nope", "protocol=7"), nil); err == nil {
		t.Cleanup(func() { _ = c.WS.Close() })
	}
	testutil.WaitFor(t, "refusal counted", func() bool {
		return sample(t, reg, "reverbgo_connections_refused_total", map[string]string{"app": "", "reason": "app_not_found"}) == 1
	})

	// Every family carries HELP text and labels stay bounded: no channel names anywhere.
	mfs, err := reg.Gather()
	if err != nil || len(mfs) == 0 {
		t.Fatalf("gather: %d families, %v", len(mfs), err)
	}
	for _, mf := range mfs {
		if mf.GetHelp() == "" {
			t.Errorf("%s has no HELP", mf.GetName())
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if strings.Contains(lp.GetValue(), "news") || strings.Contains(lp.GetValue(), "u1") {
					t.Errorf("%s carries an unbounded label %s", mf.GetName(), fmt.Sprint(lp))
				}
			}
		}
	}
}

// A client that stops reading is cut off and counted as a slow consumer.
func TestMetricsSlowConsumer(t *testing.T) {
	ts := newServer(t, withOptions(func(o *Options) { o.MaxQueueBytes = 64 << 10 }))
	reg := prometheus.NewRegistry()
	reg.MustRegister(ts.s.Collector())
	slow := rawDial(t, ts.ts.Listener.Addr().String(), "/app/"+ts.app.Key+"?protocol=7")
	slow.writeText(t, `{"event":"pusher:subscribe","data":{"channel":"firehose"}}`)
	testutil.WaitFor(t, "subscribed", func() bool { return ts.s.Registry().SubscriptionCount(testAppID, "firehose") == 1 })
	payload := []byte(`"` + strings.Repeat("x", 8000) + `"`)
	deadline := time.Now().Add(20 * time.Second)
	for ts.s.Registry().SubscriptionCount(testAppID, "firehose") == 1 {
		if time.Now().After(deadline) {
			t.Fatal("slow consumer never cut off")
		}
		if err := ts.s.Publish(testAppID, "firehose", "big", payload); err != nil {
			t.Fatal(err)
		}
	}
	app := map[string]string{"app": testAppID}
	testutil.WaitFor(t, "slow consumer counted", func() bool {
		return sample(t, reg, "reverbgo_slow_consumer_disconnects_total", app) == 1 &&
			sample(t, reg, "reverbgo_connections_closed_total", map[string]string{"app": testAppID, "reason": "slow_consumer"}) == 1
	})

	if v := sample(t, reg, "reverbgo_delivery_bytes_total", nil); v < 64<<10 {
		t.Errorf("delivery bytes %v, want more than the 64 KiB queue", v)
	}
}
