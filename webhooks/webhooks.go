// Package webhooks delivers Pusher-style webhooks: signed, batched, retried POSTs to the URLs
// each app configures. It exists so that event producers (channel_occupied, member_added, …,
// and the Toolmark bridge's toolmark_confirmed) only ever call Emit, which encodes the event
// once and appends it to a bounded in-memory outbox per app+URL; everything slow (HTTP,
// retries, backoff) happens on a per-URL goroutine that exists only while that outbox has
// work. A broken or slow receiver therefore never blocks a connection, the broadcaster, or
// another receiver.
//
// Wire format (Pusher's): POST {"time_ms":<unix ms>,"events":[...]} with Content-Type
// application/json, X-Pusher-Key: <app key> and X-Pusher-Signature: lower-case hex
// HMAC-SHA256 of the exact body bytes with the app secret.
//
// Delivery is at-least-once while the process lives: a batch is retried with the same body
// until a 2xx or until Options.RetryFor has passed since its first attempt. The outbox is
// memory only, so events still queued when the process dies are lost.
package webhooks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/reverbgo/reverbgo/config"
)

// Event is one webhook event as Pusher defines it, e.g.
// {"name":"channel_occupied","channel":"presence-room"}. It must contain a string "name",
// which is what an app's event_types filter matches on. Emit encodes it immediately, so
// the caller may reuse or change the map once Emit returns.
type Event map[string]any

// Defaults, chosen to match Pusher's behaviour where Pusher documents one.
const (
	DefaultTimeout     = 10 * time.Second
	DefaultBatchWindow = 50 * time.Millisecond
	DefaultMaxBatch    = 100
	DefaultOutboxLimit = 10000
	// DefaultRetryFor is Pusher's retry period for webhooks that get no 2xx.
	DefaultRetryFor = 5 * time.Minute
	// DefaultFirstRetry is the first backoff. It must stay below MaxFirstRetry so that a
	// receiver that blipped once hears about the event within two seconds.
	DefaultFirstRetry = time.Second
	MaxFirstRetry     = 2 * time.Second
	// MaxBackoff caps the exponential backoff so a receiver that comes back after a long
	// outage is retried within half a minute.
	MaxBackoff = 30 * time.Second
)

// Options tunes a Dispatcher. The zero value of every field means its default.
type Options struct {
	// Client sends the POSTs. Default: a client with a 10s timeout that does not follow
	// redirects (a 3xx is a failed attempt), because following a 301/302 would turn the
	// signed POST into a bodiless GET whose 2xx would wrongly count as delivered. A
	// caller-supplied client should have a Timeout: a hung request holds its URL's outbox.
	Client *http.Client
	// BatchWindow is how long an event may wait for others to the same URL before one POST
	// carries them all (default 50ms). Negative means 0: send as soon as possible.
	BatchWindow time.Duration
	// MaxBatch bounds the events in one POST (default 100).
	MaxBatch int
	// OutboxLimit bounds the queued events per app+URL (default 10000). On overflow the
	// OLDEST queued event is dropped, counted in Stats.Dropped and logged (rate-limited),
	// so memory stays bounded while a receiver is down and the newest state survives.
	OutboxLimit int
	// RetryFor is how long a batch keeps being retried after its first attempt (default 5m).
	RetryFor time.Duration
	// FirstRetry is the first backoff (default 1s; values >= 2s are replaced by the default).
	// Each later backoff doubles, with jitter, capped at 30s.
	FirstRetry time.Duration
	// Logger receives structured logs; never secrets or event bodies. Default slog.Default().
	Logger *slog.Logger
	// Now stamps time_ms in the body (default time.Now). Waiting (batch window, backoff,
	// RetryFor) uses the monotonic clock, so a fake Now cannot stall or speed up retries.
	Now func() time.Time
}

// Stats are cumulative counters. Sent, Dropped and Pending count event deliveries: one
// event emitted to an app with two matching URLs counts twice.
type Stats struct {
	// Sent counts events acknowledged by a 2xx.
	Sent uint64
	// Batches counts successful POSTs.
	Batches uint64
	// Failed counts failed attempts (non-2xx, network error, timeout); a batch that is
	// retried five times adds five.
	Failed uint64
	// Dropped counts events given up on: outbox overflow, RetryFor exhausted, Close's
	// context ended, emitted after Close, or an invalid event (no name, not encodable).
	Dropped uint64
	// Pending is the number of events queued or in flight right now.
	Pending int64
	// Retried counts failed attempts after which the batch was tried again.
	Retried uint64
}

// Dispatcher owns the outboxes. It is safe for concurrent use.
type Dispatcher struct {
	client      *http.Client
	batchWindow time.Duration
	maxBatch    int
	outboxLimit int
	retryFor    time.Duration
	firstRetry  time.Duration
	log         *slog.Logger
	now         func() time.Time

	// mu guards routes, outboxes and closed. Lock order: mu before outbox.mu.
	mu       sync.RWMutex
	routes   map[string][]route // app id -> where its events go
	outboxes map[string]*outbox // outboxKey(app id, url) -> outbox, kept across SetApps
	closed   bool

	// closing is closed by Close: outboxes stop waiting for their batch window.
	closing   chan struct{}
	closeOnce sync.Once
	// ctx is cancelled when Close's context ends: in-flight requests and backoffs abort and
	// whatever is still queued is dropped.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	sent, batches, failed, dropped atomic.Uint64
	pending                        atomic.Int64
	retried                        atomic.Uint64
	obs                            atomic.Pointer[observerBox] // the console's (observe.go)
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

// New returns a Dispatcher with no apps; call SetApps before events are expected.
func New(opts Options) *Dispatcher {
	d := &Dispatcher{
		client:      opts.Client,
		batchWindow: opts.BatchWindow,
		maxBatch:    opts.MaxBatch,
		outboxLimit: opts.OutboxLimit,
		retryFor:    opts.RetryFor,
		firstRetry:  opts.FirstRetry,
		log:         opts.Logger,
		now:         opts.Now,
		routes:      map[string][]route{},
		outboxes:    map[string]*outbox{},
		closing:     make(chan struct{}),
	}
	if d.log == nil {
		d.log = slog.Default()
	}
	d.log = d.log.With("component", "webhooks")
	if d.client == nil {
		d.client = &http.Client{
			Timeout: DefaultTimeout,
			CheckRedirect: func(*http.Request, []*http.Request) error {
				return http.ErrUseLastResponse
			},
		}
	}
	if d.batchWindow < 0 {
		d.batchWindow = 0
	}
	if d.maxBatch <= 0 {
		d.maxBatch = DefaultMaxBatch
	}
	if d.outboxLimit <= 0 {
		d.outboxLimit = DefaultOutboxLimit
	}
	if d.retryFor <= 0 {
		d.retryFor = DefaultRetryFor
	}
	if d.firstRetry >= MaxFirstRetry {
		d.log.Warn("first_retry must be below 2s; using the default",
			"first_retry", d.firstRetry, "default", DefaultFirstRetry)
		d.firstRetry = DefaultFirstRetry
	}
	if d.firstRetry <= 0 {
		d.firstRetry = DefaultFirstRetry
	}
	if d.now == nil {
		d.now = time.Now
	}
	d.ctx, d.cancel = context.WithCancel(context.Background())
	return d
}

// SetApps replaces the routing table: which URLs, event types, key and secret each app id
// has. It may be called at any time (config reload). Outboxes are keyed by app id + URL and
// survive a reload, so a URL that stays configured keeps its queue and its order. Events
// already queued for a URL that is removed are still delivered (with the last key and
// secret seen); new events no longer go there. Invalid URLs are logged and skipped.
func (d *Dispatcher) SetApps(apps []config.App) {
	d.mu.Lock()
	defer d.mu.Unlock()

	routes := make(map[string][]route, len(apps))
	live := map[string]bool{}
	for _, app := range apps {
		// Two entries with the same URL share one outbox and one route (with the union of
		// their event types), so an event matching both is not delivered twice.
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
				ob = newOutbox(d, app.ID, wh.URL, logURL)
				d.outboxes[key] = ob
			}
			ob.setCreds(app.Key, app.Secret)
			live[key] = true

			var types map[string]struct{}
			if len(wh.EventTypes) > 0 {
				types = make(map[string]struct{}, len(wh.EventTypes))
				for _, t := range wh.EventTypes {
					types[t] = struct{}{}
				}
			}
			if i, ok := byURL[wh.URL]; ok {
				routes[app.ID][i].types = unionTypes(routes[app.ID][i].types, types)
				continue
			}
			byURL[wh.URL] = len(routes[app.ID])
			routes[app.ID] = append(routes[app.ID], route{ob: ob, types: types})
		}
	}
	d.routes = routes

	// Forget outboxes that are no longer routed and have nothing left to do, so reloads
	// cannot grow the map without bound. Busy ones stay until a later SetApps finds them idle.
	for key, ob := range d.outboxes {
		if !live[key] && ob.idle() {
			delete(d.outboxes, key)
		}
	}
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

// Emit queues ev for every URL of appID whose event_types match ev["name"] (no event_types
// means all). It never blocks on the network: it encodes ev once, appends it to each
// matching outbox (dropping that outbox's oldest event if it is full) and returns. Events
// for an app without webhooks cost one map lookup.
func (d *Dispatcher) Emit(appID string, ev Event) {
	name, _ := ev["name"].(string)
	if name == "" {
		d.dropped.Add(1)
		d.log.Error("webhook event without a name dropped", "app_id", appID)
		return
	}

	d.mu.RLock()
	defer d.mu.RUnlock()
	var raw json.RawMessage
	for _, r := range d.routes[appID] {
		if !r.matches(name) {
			continue
		}
		if d.closed {
			d.dropped.Add(1)
			d.log.Warn("webhook event emitted after close dropped", "app_id", appID, "event", name)
			continue
		}
		if raw == nil {
			b, err := json.Marshal(ev)
			if err != nil {
				d.dropped.Add(1)
				d.log.Error("webhook event not encodable, dropped",
					"app_id", appID, "event", name, "error", err)
				return
			}
			raw = b
		}
		r.ob.enqueue(raw)
	}
}

// Close stops accepting events and flushes: every outbox sends what it holds at once,
// without waiting for its batch window, and keeps retrying as usual. When ctx ends first,
// in-flight requests and backoffs are cancelled, what is left is dropped (counted and
// logged) and Close returns an error wrapping ctx.Err(). Close returns only after every
// delivery goroutine has stopped. It is safe to call more than once.
func (d *Dispatcher) Close(ctx context.Context) error {
	d.closeOnce.Do(func() {
		d.mu.Lock()
		d.closed = true
		d.mu.Unlock()
		close(d.closing)
	})

	done := make(chan struct{})
	go func() {
		d.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		d.cancel()
		return nil
	case <-ctx.Done():
	}
	before := d.dropped.Load()
	d.cancel()
	<-done
	if n := d.dropped.Load() - before; n > 0 {
		return fmt.Errorf("webhooks: close: %d event deliveries dropped: %w", n, ctx.Err())
	}
	return nil
}

// Stats returns the counters.
func (d *Dispatcher) Stats() Stats {
	return Stats{
		Sent:    d.sent.Load(),
		Batches: d.batches.Load(),
		Failed:  d.failed.Load(),
		Dropped: d.dropped.Load(),
		Pending: d.pending.Load(),
		Retried: d.retried.Load(),
	}
}

func outboxKey(appID, rawURL string) string { return appID + "\x00" + rawURL }

// checkURL accepts absolute http(s) URLs and returns the form that may be logged: scheme,
// host and path only, because user info and query strings can carry credentials.
func checkURL(raw string) (logURL string, err error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "<unparsable>", errors.New("unparsable url")
	}
	logURL = u.Scheme + "://" + u.Host + u.Path
	if u.Scheme != "http" && u.Scheme != "https" {
		return logURL, errors.New("scheme must be http or https")
	}
	if u.Host == "" {
		return logURL, errors.New("missing host")
	}
	return logURL, nil
}
