package main

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/reverbgo/reverbgo/config"
	"github.com/reverbgo/reverbgo/internal/testutil"
)

func TestNodeMetricsFamilies(t *testing.T) {
	mr := miniredis.RunT(t)
	cfg := &config.Config{
		Apps:    []config.App{{ID: "m", Key: "m-key", Secret: "m-secret", Webhooks: []config.Webhook{{URL: "http://127.0.0.1:1/hook"}}}},
		Scaling: config.Scaling{Enabled: true, RedisURL: "redis://" + mr.Addr() + "/0"},
	}
	cfg.ApplyDefaults()
	reg := newMetricsRegistry()
	n := buildNode(t, cfg, reg)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		n.shutdown(ctx, nil)
	})
	value := func(name string) float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == name && len(mf.GetMetric()) > 0 {
				m := mf.GetMetric()[0]
				if m.Gauge != nil {
					return m.Gauge.GetValue()
				}
				return m.Counter.GetValue()
			}
		}
		return -1
	}
	for _, name := range []string{"reverbgo_connections", "reverbgo_webhook_deliveries_total", "reverbgo_webhook_outbox_size", "reverbgo_build_info", "go_goroutines"} {
		if value(name) < 0 {
			t.Errorf("family %s missing", name)
		}
	}
	if v := value("reverbgo_redis_broker_up"); v != 1 {
		t.Fatalf("reverbgo_redis_broker_up = %v with Redis up", v)
	}
	mr.Close()
	testutil.WaitFor(t, "reverbgo_redis_broker_up to drop to 0 after Redis went away", func() bool {
		return value("reverbgo_redis_broker_up") == 0
	})
}
