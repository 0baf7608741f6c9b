package main

import (
	"context"
	"crypto/subtle"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/reverbgo/reverbgo/config"
	"github.com/reverbgo/reverbgo/internal/redisx"
	"github.com/reverbgo/reverbgo/webhooks"
)

// newMetricsRegistry holds every family of the process: Go runtime, process, build info;
// each node adds its own (registerNodeMetrics) and the bridge its families.
func newMetricsRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "reverbgo_build_info",
			Help:        "Always 1; the labels say which build runs.",
			ConstLabels: prometheus.Labels{"version": version, "goversion": runtime.Version()},
		}, func() float64 { return 1 }),
	)
	return reg
}

// webhookStats is what the metrics need of the webhook dispatcher: cumulative counters,
// read at scrape time (webhooks.Dispatcher implements it).
type webhookStats interface{ Stats() webhooks.Stats }

var (
	descWebhookDeliveries = prometheus.NewDesc("reverbgo_webhook_deliveries_total",
		"Webhook deliveries by result: delivered and dropped count events, failed (every failed POST) and retried (failed POSTs tried again) count attempts.",
		[]string{"result"}, nil)
	descWebhookOutbox = prometheus.NewDesc("reverbgo_webhook_outbox_size",
		"Webhook events queued or in flight (with scaling.enabled: the cluster's shared outbox as last polled, plus what this node has not handed over yet).", nil, nil)
	descWebhookDroppedBatches = prometheus.NewDesc("reverbgo_webhook_batches_dropped_total",
		"Webhook batches given up on after delivery began: retry_for passed without a 2xx, or dropped at shutdown (each is logged with its event types); and one per outbox whose events Redis lost (wiped, or restarted without persistence), the events counted in deliveries_total{result=\"dropped\"}.", nil, nil)
)

type webhookCollector struct{ w webhookStats }

func (c webhookCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descWebhookDeliveries
	ch <- descWebhookOutbox
	ch <- descWebhookDroppedBatches
}

func (c webhookCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.w.Stats()
	for _, r := range []struct {
		result string
		v      uint64
	}{{"delivered", s.Sent}, {"failed", s.Failed}, {"retried", s.Retried}, {"dropped", s.Dropped}} {
		ch <- prometheus.MustNewConstMetric(descWebhookDeliveries, prometheus.CounterValue, float64(r.v), r.result)
	}
	ch <- prometheus.MustNewConstMetric(descWebhookOutbox, prometheus.GaugeValue, float64(s.Pending))
	ch <- prometheus.MustNewConstMetric(descWebhookDroppedBatches, prometheus.CounterValue, float64(s.DroppedBatches))
}

// registerNodeMetrics adds a node's families: the pusher server's, the webhook queue's and,
// when scaled, the Redis broker's state.
func registerNodeMetrics(reg prometheus.Registerer, n *node) {
	reg.MustRegister(n.srv.Collector(), webhookCollector{n.hooks})
	n.reloads.register(reg)
	srv := n.srv
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "reverbgo_draining",
		Help: "1 from the stop signal on while the node drains (server.drain_delay, server.drain_period; /up answers 503 draining), 0 otherwise.",
	}, func() float64 {
		if srv.Draining() {
			return 1
		}
		return 0
	}))
	if n.cl != nil {
		b := n.cl.broker
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "reverbgo_redis_broker_up",
			Help: "1 while this node's Redis pub/sub subscription (scaling) is live, 0 while it reconnects.",
		}, func() float64 {
			if b.Healthy() {
				return 1
			}
			return 0
		}))
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "reverbgo_cluster_messages_received_total",
			Help: "Cluster messages this node read from Redis pub/sub (its own publishes that came back included). Under scaling.routing interest only the channels this node has subscribers of.",
		}, func() float64 { return float64(b.Received()) }))
		rc := n.cl.rdb
		for _, cause := range redisx.Causes {
			reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name:        "reverbgo_cluster_resubscribes_total",
				Help:        "Times a Redis subscription connection of this node (broker or bridge feeds) was made anew, by cause: failover (Sentinel switched master), resharding (Redis unsubscribed it: a Cluster slot moved or its master changed), reconnect, stall (a batch failed half way), probe (a probe published through the normal path did not come back).",
				ConstLabels: prometheus.Labels{"cause": cause},
			}, func() float64 { return float64(rc.Resubscribes(cause)) }))
		}
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "reverbgo_redis_subscriptions_down",
			Help: "Redis subscription connections of this node (broker and bridge feeds) not confirmed live.",
		}, func() float64 { return float64(rc.SubsDown()) }))
	}
}

// metricsHandler serves reg in Prometheus text format; with a token, only requests with
// "Authorization: Bearer <token>" (compared in constant time) get it, others 401.
func metricsHandler(reg *prometheus.Registry, token string, logger *slog.Logger) http.Handler {
	h := promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog:      slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		ErrorHandling: promhttp.ContinueOnError,
	})
	if token == "" {
		return h
	}
	want := []byte(token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="reverbgo metrics"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// mountMetrics serves {server.path}/metrics on the main listener when metrics are enabled
// without a listener of their own.
func mountMetrics(e *echo.Echo, cfg *config.Config, reg *prometheus.Registry, logger *slog.Logger) {
	if cfg.Metrics.Enabled && cfg.Metrics.Listen == "" {
		e.GET(cfg.Server.Path+"/metrics", echo.WrapHandler(metricsHandler(reg, cfg.Metrics.Token, logger)))
	}
}

// metricsListener starts the metrics.listen server (serving /metrics, and
// {server.path}/metrics too so a scrape config works either way); nil when not configured.
func metricsListener(cfg *config.Config, reg *prometheus.Registry, logger *slog.Logger) (*http.Server, error) {
	if !cfg.Metrics.Enabled || cfg.Metrics.Listen == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", cfg.Metrics.Listen)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	h := metricsHandler(reg, cfg.Metrics.Token, logger)
	mux.Handle("/metrics", h)
	if cfg.Server.Path != "" {
		mux.Handle(cfg.Server.Path+"/metrics", h)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("metrics listener stopped", "error", err)
		}
	}()
	logger.Info("metrics listening", "addr", ln.Addr().String(), "token", cfg.Metrics.Token != "")
	return srv, nil
}

func closeMetricsListener(srv *http.Server) {
	if srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}
}
