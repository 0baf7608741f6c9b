package main

import (
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/reverbgo/reverbgo/config"
)

// liveConfig is the configuration whose apps are in effect: the one the node started with,
// then each one a SIGHUP loaded. Only its apps are applied; the rest stays as started.
type liveConfig struct{ atomic.Pointer[config.Config] }

func newLiveConfig(cfg *config.Config) *liveConfig {
	l := &liveConfig{}
	l.Store(cfg)
	return l
}

// reloadCounts are reverbgo_config_reloads_total's two series.
type reloadCounts struct{ ok, failed atomic.Uint64 }

func (r *reloadCounts) register(reg prometheus.Registerer) {
	for _, s := range []struct {
		result string
		n      *atomic.Uint64
	}{{"ok", &r.ok}, {"error", &r.failed}} {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "reverbgo_config_reloads_total",
			Help:        "Configuration reloads on SIGHUP by result: ok (the apps applied), error (the file did not pass config check; the running configuration kept).",
			ConstLabels: prometheus.Labels{"result": s.result},
		}, func() float64 { return float64(s.n.Load()) }))
	}
}

// reload applies the apps of the configuration load reads (SIGHUP): every holder of apps
// (the Pusher server's table, the HTTP API, the webhooks, and through n.live the bridge and
// MCP) swaps to the new apps, each in one atomic step. A file that does not load and validate
// changes nothing. Other keys are not applied: those that changed are logged in one line,
// "needs a restart".
func (n *node) reload(load func() (*config.Config, error)) {
	if load == nil {
		return
	}
	next, err := load()
	if err != nil {
		n.log.Error("config reload failed; keeping the running config", "error", err)
		n.reloads.failed.Add(1) // after the line: who sees the count finds its cause logged
		return
	}
	started := n.live.Load()
	keys := restartKeys(started, next)
	// What is applied: the new apps, except a kept app's recovery (its history's bounds stay
	// as started, as in the server's table); every other key as started.
	applied := *next
	applied.Server, applied.Scaling, applied.Console, applied.Metrics = started.Server, started.Scaling, started.Console, started.Metrics
	applied.Apps = append([]config.App(nil), next.Apps...)
	for i := range applied.Apps {
		a := &applied.Apps[i]
		switch prev := started.AppByID(a.ID); {
		case prev != nil && !reflect.DeepEqual(prev.Recovery, a.Recovery):
			keys = append(keys, "apps["+strconv.Itoa(i)+"].recovery")
			a.Recovery = prev.Recovery
		case prev == nil && a.Recovery.Enabled && !n.srv.RecoveryServed():
			// The node keeps no history (no app had recovery at start): the added app is
			// served, its resumes answered not_enabled until a restart.
			keys = append(keys, "apps["+strconv.Itoa(i)+"].recovery")
		}
	}
	if err := applied.Validate(); err != nil { // and it rebuilds the id and key indexes
		n.log.Error("config reload failed; keeping the running config", "error", err)
		n.reloads.failed.Add(1) // after the line: who sees the count finds its cause logged
		return
	}
	if len(keys) > 0 {
		n.log.Warn("needs a restart", "keys", strings.Join(keys, ", "))
	}
	ch := n.srv.ReloadApps(applied.Apps)
	n.httpAPI.SetApps(applied.Apps)
	n.hooks.SetApps(applied.Apps)
	n.live.Store(&applied)
	n.log.Info("config reloaded", "apps", len(applied.Apps), "added", ch.Added, "removed", ch.Removed,
		"changed", ch.Changed, "disabled", ch.Disabled, "enabled", ch.Enabled)
	n.reloads.ok.Add(1)
}

// restartKeys names the keys outside apps whose value differs between the running and the
// new configuration (server.port, scaling.redis_url, ...): a reload applies none of them.
func restartKeys(running, next *config.Config) []string {
	var keys []string
	a, b := reflect.ValueOf(running).Elem(), reflect.ValueOf(next).Elem()
	t := a.Type()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name := tagName(f)
		if !f.IsExported() || name == "" || name == "apps" {
			continue
		}
		keys = diffKeys(keys, name, a.Field(i), b.Field(i))
	}
	return keys
}

// diffKeys appends prefix's changed keys: a struct's fields one by one, anything else whole.
func diffKeys(keys []string, prefix string, a, b reflect.Value) []string {
	if a.Kind() != reflect.Struct {
		if !reflect.DeepEqual(a.Interface(), b.Interface()) {
			keys = append(keys, prefix)
		}
		return keys
	}
	t := a.Type()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if name := tagName(f); f.IsExported() && name != "" {
			keys = diffKeys(keys, prefix+"."+name, a.Field(i), b.Field(i))
		}
	}
	return keys
}

func tagName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("mapstructure"), ",")
	if name == "-" {
		return ""
	}
	return name
}
