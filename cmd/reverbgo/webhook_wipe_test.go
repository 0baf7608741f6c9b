package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/reverbgo/reverbgo/config"
	"github.com/reverbgo/reverbgo/internal/testenv"
	"github.com/reverbgo/reverbgo/internal/testutil"
)

// TestWebhookEventsLostToARedisWipeInMetrics (issue 24): a node queues three
// channel_occupied for a receiver that answers 503, and its Redis (a server of the test's
// own, without persistence) is flushed. /metrics then says exactly what was lost: three
// events dropped, in one outbox's batch. Before, both stayed 0.
func TestWebhookEventsLostToARedisWipeInMetrics(t *testing.T) {
	testenv.RedisServer(t)
	top := testutil.StartTopology(t, "standalone")
	var attempts atomic.Int32
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		attempts.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(rcv.Close)
	cfg := &config.Config{
		Apps:    []config.App{{ID: appID, Key: appKey, Secret: secret, Webhooks: []config.Webhook{{URL: rcv.URL, EventTypes: []string{"channel_occupied"}}}}},
		Scaling: config.Scaling{Enabled: true, RedisURL: top.Var("REDIS_URL")},
	}
	cfg.ApplyDefaults()
	reg := newMetricsRegistry()
	n := buildNode(t, cfg, reg)
	ts := httptest.NewServer(n.e)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		n.shutdown(ctx, nil)
		ts.Close()
	})
	value := func(name, result string) float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
			for _, m := range mf.GetMetric() {
				if result == "" || len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == result {
					return m.GetCounter().GetValue()
				}
			}
		}
		return -1
	}

	c := connect(t, &testNode{n, ts})
	for _, ch := range []string{"wipe-1", "wipe-2", "wipe-3"} {
		c.subscribe(ch)
	}
	opt, err := redis.ParseURL(top.Var("REDIS_URL"))
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	queued := func() int64 { // the three events, queued or in flight in Redis
		ctx := context.Background()
		keys, _ := rdb.Keys(ctx, "*{webhooks}:[qf]:*").Result()
		var n int64
		for _, k := range keys {
			n += rdb.LLen(ctx, k).Val()
		}
		return n
	}
	testutil.WaitFor(t, "the events in Redis and a batch attempted", func() bool {
		return queued() == 3 && attempts.Load() > 0
	})
	if err := rdb.FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the lost events in /metrics", func() bool {
		return value("reverbgo_webhook_deliveries_total", "dropped") >= 3
	})
	if d, b := value("reverbgo_webhook_deliveries_total", "dropped"), value("reverbgo_webhook_batches_dropped_total", ""); d != 3 || b != 1 {
		t.Fatalf("dropped %v events in %v batches, want 3 in 1", d, b)
	}
}
