package webhooks

import (
	"context"
	"time"

	"github.com/reverbgo/reverbgo/config"
)

// wantsView is an immutable copy of what Wants needs.
type wantsView struct {
	routes  map[string]*appRoutes
	counter bool
}

// publishWants replaces the view Wants reads. Caller holds d.mu.
func (d *Dispatcher) publishWants() {
	d.wants.Store(&wantsView{routes: d.routes, counter: d.counter != nil})
}

// route sends an app's events to one outbox; types nil means every event name.
type route struct {
	ob    *outbox
	types map[string]struct{}
}

func (r route) matches(name string) bool {
	if r.types == nil {
		return true
	}
	_, ok := r.types[name]
	return ok
}

// appRoutes are an app's outboxes and the event names any of them wants.
type appRoutes struct {
	routes []route
	all    bool                // some route takes every event
	wanted map[string]struct{} // names some route lists
}

func (a *appRoutes) wants(name string) bool {
	if a == nil {
		return false
	}
	if a.all {
		return true
	}
	_, ok := a.wanted[name]
	return ok
}

// targets lists the outboxes that take name.
func (a *appRoutes) targets(name string) []*outbox {
	if a == nil {
		return nil
	}
	var obs []*outbox
	for _, r := range a.routes {
		if r.matches(name) {
			obs = append(obs, r.ob)
		}
	}
	return obs
}

// SetApps replaces the routing table: which URLs, event types, headers, key and secret each
// app id has. It may be called at any time (config reload). Outboxes are keyed by app id +
// URL and survive a reload, so a URL that stays configured keeps its queue and its order.
// Events already queued for a URL that is removed are still delivered (with the last key,
// secret and headers seen); new events no longer go there. Invalid URLs are logged and
// skipped.
func (d *Dispatcher) SetApps(apps []config.App) {
	d.mu.Lock()
	defer d.mu.Unlock()

	routes := make(map[string]*appRoutes, len(apps))
	live := map[string]bool{}
	for _, app := range apps {
		// Two entries with the same URL share one outbox and one route (with the union of
		// their event types and headers), so an event matching both is not delivered twice.
		ar := &appRoutes{wanted: map[string]struct{}{}}
		byURL := map[string]int{}
		for _, wh := range app.Webhooks {
			logURL, err := checkURL(wh.URL)
			if err != nil {
				d.log.Error("webhook url skipped", "app_id", app.ID, "url", logURL, "error", err)
				continue
			}
			key := outboxKey(app.ID, wh.URL)
			ob := d.outboxes[key]
			if ob == nil {
				ob = newOutbox(d, key, app.ID, wh.URL, logURL)
				d.outboxes[key] = ob
			}
			live[key] = true

			var types map[string]struct{}
			if len(wh.EventTypes) > 0 {
				types = make(map[string]struct{}, len(wh.EventTypes))
				for _, t := range wh.EventTypes {
					types[t] = struct{}{}
					ar.wanted[t] = struct{}{}
				}
			} else {
				ar.all = true
			}
			if i, ok := byURL[wh.URL]; ok {
				ar.routes[i].types = unionTypes(ar.routes[i].types, types)
				ob.setCreds(app.Key, app.Secret, wh.Headers, whTimeout(wh), whRetryFor(wh), true)
				continue
			}
			ob.setCreds(app.Key, app.Secret, wh.Headers, whTimeout(wh), whRetryFor(wh), false)
			byURL[wh.URL] = len(ar.routes)
			ar.routes = append(ar.routes, route{ob: ob, types: types})
		}
		if len(ar.routes) > 0 {
			routes[app.ID] = ar
		}
	}
	d.routes = routes
	d.publishWants()

	// Forget outboxes that are no longer routed and have nothing left to do, so reloads
	// cannot grow the map without bound. Busy ones stay until a later SetApps finds them idle.
	for key, ob := range d.outboxes {
		if !live[key] && ob.idle() {
			delete(d.outboxes, key)
		}
	}
}

// whTimeout and whRetryFor are a webhook's settings (seconds in config; 0 = the default).
func whTimeout(wh config.Webhook) time.Duration  { return time.Duration(wh.Timeout) * time.Second }
func whRetryFor(wh config.Webhook) time.Duration { return time.Duration(wh.RetryFor) * time.Second }

// SetCounter gives the Dispatcher the cluster-wide subscriber count of a channel, which
// subscription_count reports. Without one, subscription_count is never produced.
func (d *Dispatcher) SetCounter(f func(ctx context.Context, app, channel string) (int, error)) {
	d.mu.Lock()
	d.counter = f
	d.publishWants()
	d.mu.Unlock()
}

// unionTypes merges two event-type filters where nil means "all".
func unionTypes(a, b map[string]struct{}) map[string]struct{} {
	if a == nil || b == nil {
		return nil
	}
	for t := range b {
		a[t] = struct{}{}
	}
	return a
}

// Wants reports whether an event named name for appID would go anywhere, so a producer
// can skip building it. Paired events want each other:
// channel_occupied and channel_vacated must both be reported to count occupancy when only
// one is configured (and cache_miss, once per occupation, needs them too), and
// member_added and member_removed likewise for the hold. It takes no lock: one atomic load
// and one map lookup, so an app without webhooks costs next to nothing on the hot path.
func (d *Dispatcher) Wants(appID, name string) bool {
	v := d.wants.Load()
	if v == nil {
		return false
	}
	ar := v.routes[appID]
	if ar == nil {
		return false
	}
	switch name {
	case ChannelOccupied, ChannelVacated:
		return ar.wants(ChannelOccupied) || ar.wants(ChannelVacated) || ar.wants(CacheMiss)
	case MemberAdded, MemberRemoved:
		return ar.wants(MemberAdded) || ar.wants(MemberRemoved)
	case SubscriptionCount:
		return v.counter && ar.wants(SubscriptionCount)
	}
	return ar.wants(name)
}
