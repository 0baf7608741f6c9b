// Package webhooks delivers Pusher-style webhooks: signed, batched, retried POSTs to the URLs
// each app configures, with Pusher's semantics: channel_vacated and member_removed are held
// for 3 s and dropped when the channel is occupied again or the user rejoins within the
// hold (and then no second channel_occupied or member_added goes out either); cache_miss
// goes out once per channel occupation; subscription_count is debounced per channel.
//
// Producers (the pusher server, the Toolmark bridge's toolmark_confirmed) call Wants, which
// is one map lookup, and only then build the event and call Emit, which never blocks: it
// encodes the event once and hands it to the Store. Everything slow (HTTP, retries,
// backoff, Redis) happens on goroutines of this package, so a broken or slow receiver never
// blocks a connection, the broadcaster, or another receiver.
//
// The Store is the seam. MemoryStore serves one process. RedisStore makes every decision
// cluster-wide (occupied/vacated from the nodes' combined occupancy, the holds shared so a
// user leaving on one node and rejoining on another within 3 s sends nothing) and keeps the
// outboxes in Redis, leased to one node at a time: each event is sent by one node, and a
// restart or crash loses nothing queued (delivery is at least once: the batch in flight
// when a node dies is sent again by the node that takes its lease over). What Redis itself
// loses (restarted without persistence, wiped) is counted dropped by the nodes that queued
// it (ledger.go).
//
// Wire format (Pusher's): POST {"time_ms":<unix ms>,"events":[...]} with Content-Type
// application/json, X-Pusher-Key: <app key>, X-Pusher-Signature: lower-case hex
// HMAC-SHA256 of the exact body bytes with the app secret, and the webhook's configured
// headers.
package webhooks

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

// Event is one webhook event as Pusher defines it, e.g.
// {"name":"channel_occupied","channel":"presence-room"}. It must contain a string "name",
// which is what an app's event_types filter matches on. Emit encodes it immediately, so
// the caller may reuse or change the map once Emit returns.
type Event map[string]any

// Event names with semantics of their own.
const (
	ChannelOccupied   = "channel_occupied"
	ChannelVacated    = "channel_vacated"
	MemberAdded       = "member_added"
	MemberRemoved     = "member_removed"
	CacheMiss         = "cache_miss"
	SubscriptionCount = "subscription_count"
)

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
	// DefaultHold is Pusher's delay of channel_vacated and member_removed.
	DefaultHold = 3 * time.Second
	// DefaultCountDebounce is the longest a subscription_count waits for further changes of
	// the same channel: a burst of subscribes yields one event with the final count.
	DefaultCountDebounce = time.Second
	// DefaultLease is how long a node owns an outbox without renewing (it renews every
	// quarter of it, RenewEvery, for as long as a batch is in flight, during its POSTs too);
	// a node that dies holding it is taken over after at most this long. It must be longer
	// than a POST's timeout plus the renewal interval (config refuses less).
	DefaultLease = 15 * time.Second
	// DefaultPoll is how often a node looks at every outbox of a shared store, to send
	// what other nodes queued or left behind.
	DefaultPoll = 500 * time.Millisecond
	// DefaultOpsLimit bounds the events waiting for a shared store (while Redis is slow).
	DefaultOpsLimit = 10000
)

// tick is how often holds are checked: they fire at most this late.
const tick = 100 * time.Millisecond

// opTimeout bounds one store operation of the delivery and decision loops.
const opTimeout = 5 * time.Second

// Options tunes a Dispatcher. The zero value of every field means its default.
type Options struct {
	// Store holds outboxes and decisions (default NewMemoryStore()). A store other than
	// *MemoryStore is treated as shared and slow: Emit queues work for it on a bounded
	// queue and a Close leaves what is queued in it for the next owner.
	Store Store
	// NodeID names this node in a shared store (default a random id).
	NodeID string
	// Client sends the POSTs. Default: a client that does not follow redirects (a 3xx is a
	// failed attempt), because following a 301/302 would turn the signed POST into a
	// bodiless GET whose 2xx would wrongly count as delivered. Each POST is bounded by its
	// webhook's timeout (Timeout by default) whatever the client.
	Client *http.Client
	// Timeout bounds one POST of a webhook that sets none (default 10s).
	Timeout time.Duration
	// BatchWindow is how long an event may wait for others to the same URL before one POST
	// carries them all (default 50ms). Negative means 0: send as soon as possible.
	BatchWindow time.Duration
	// MaxBatch bounds the events in one POST (default 100).
	MaxBatch int
	// OutboxLimit bounds the queued events per app+URL (default 10000). On overflow the
	// OLDEST queued event is dropped, counted in Stats.Dropped and logged (rate-limited),
	// so memory stays bounded while a receiver is down and the newest state survives.
	OutboxLimit int
	// RetryFor is how long a batch keeps being retried after its first attempt, for a
	// webhook that sets none (default 5m).
	RetryFor time.Duration
	// FirstRetry is the first backoff (default 1s; values >= 2s are replaced by the default).
	// Each later backoff doubles, with jitter, capped at 30s.
	FirstRetry time.Duration
	// Hold delays channel_vacated and member_removed (default 3s).
	Hold time.Duration
	// CountDebounce delays subscription_count (default 1s).
	CountDebounce time.Duration
	// Lease and Poll tune a shared store (defaults 15s, 500ms).
	Lease, Poll time.Duration
	// OpsLimit bounds the work queued for a shared store (default 10000).
	OpsLimit int
	// Logger receives structured logs; never secrets or event bodies. Default slog.Default().
	Logger *slog.Logger
	// Now stamps time_ms in the body (default time.Now). Waiting (batch window, backoff,
	// RetryFor) uses the monotonic clock, so a fake Now cannot stall or speed up retries.
	Now func() time.Time
}

// Stats are cumulative counters, for metrics. Sent, Dropped and Pending count event
// deliveries: one event emitted to an app with two matching URLs counts twice.
type Stats struct {
	// Sent counts events acknowledged by a 2xx (delivered).
	Sent uint64
	// Batches counts successful POSTs.
	Batches uint64
	// Failed counts failed attempts (non-2xx, network error, timeout); a batch that is
	// retried five times adds five.
	Failed uint64
	// Retried counts attempts after a batch's first.
	Retried uint64
	// Dropped counts events given up on: outbox overflow, RetryFor exhausted, Close's
	// context ended, emitted after Close, an invalid event (no name, not encodable), a
	// shared store that could not take it, or one that lost it (a Redis wiped or restarted
	// without persistence: the events this node queued there and had not seen done).
	Dropped uint64
	// DroppedBatches counts batches given up on after they were claimed for delivery:
	// RetryFor exhausted, or dropped at shutdown (memory store), each logged with its event
	// types; and, per outbox, what a shared store lost (each loss logged with its count).
	DroppedBatches uint64
	// Pending is the number of events queued or in flight (the outbox size). With a
	// shared store it is the cluster's total as of the last poll, plus what this node has
	// not yet handed to the store.
	Pending int64
}

// Dispatcher routes events to outboxes and runs their delivery. It is safe for concurrent use.
type Dispatcher struct {
	store  Store
	mem    *MemoryStore // == store when the store is the in-process one
	shared bool         // store is not in-process: work goes through ops
	owner  string

	client        *http.Client
	timeout       time.Duration
	batchWindow   time.Duration
	maxBatch      int
	outboxLimit   int
	retryFor      time.Duration
	firstRetry    time.Duration
	hold          time.Duration
	countDebounce time.Duration
	lease         time.Duration
	poll          time.Duration
	log           *slog.Logger
	now           func() time.Time

	// mu guards routes, outboxes, counter and closed. Lock order: mu before outbox.mu.
	mu       sync.RWMutex
	routes   map[string]*appRoutes // app id -> where its events go
	outboxes map[string]*outbox    // outbox key -> outbox, kept across SetApps
	counter  func(ctx context.Context, app, channel string) (int, error)
	closed   bool
	// wants is what Wants reads without a lock (it runs on every subscribe and leave):
	// replaced, never changed, under mu by SetApps and SetCounter.
	wants atomic.Pointer[wantsView]

	ops      chan op // shared store only
	opsDone  chan struct{}
	opsCount atomic.Int64 // events in ops not yet handed to the store
	tickStop chan struct{}
	tickDone chan struct{}

	// closing is closed by Close: outboxes stop waiting for their batch window (and, on a
	// shared store, stop after their current attempt).
	closing   chan struct{}
	closeOnce sync.Once
	// ctx is cancelled when Close's context ends: in-flight requests and backoffs abort and
	// whatever is still queued in memory is dropped.
	ctx    context.Context
	cancel context.CancelFunc
	// runMu orders starting a delivery goroutine (wg.Add) before Close's wg.Wait.
	runMu   sync.Mutex
	stopped bool
	wg      sync.WaitGroup

	sent, batches, failed, retried, dropped atomic.Uint64
	droppedBatches                          atomic.Uint64
	sharedSize                              atomic.Int64                // shared store: total as of the last poll
	overflowLogged, storeErrLogged          atomic.Int64                // unix nanos of the last such log
	obs                                     atomic.Pointer[observerBox] // the console's (observe.go)
}

// New returns a Dispatcher with no apps; call SetApps before events are expected.
func New(opts Options) *Dispatcher {
	d := &Dispatcher{
		store:         opts.Store,
		client:        opts.Client,
		timeout:       opts.Timeout,
		batchWindow:   opts.BatchWindow,
		maxBatch:      opts.MaxBatch,
		outboxLimit:   opts.OutboxLimit,
		retryFor:      opts.RetryFor,
		firstRetry:    opts.FirstRetry,
		hold:          opts.Hold,
		countDebounce: opts.CountDebounce,
		lease:         opts.Lease,
		poll:          opts.Poll,
		log:           opts.Logger,
		now:           opts.Now,
		routes:        map[string]*appRoutes{},
		outboxes:      map[string]*outbox{},
		closing:       make(chan struct{}),
		tickStop:      make(chan struct{}),
		tickDone:      make(chan struct{}),
	}
	if d.log == nil {
		d.log = slog.Default()
	}
	d.log = d.log.With("component", "webhooks")
	if d.store == nil {
		d.store = NewMemoryStore()
	}
	d.mem, _ = d.store.(*MemoryStore)
	d.shared = d.mem == nil
	node := opts.NodeID
	if node == "" {
		node = "node"
	}
	var rb [8]byte
	_, _ = rand.Read(rb[:])
	d.owner = node + "/" + hex.EncodeToString(rb[:])
	if d.client == nil {
		d.client = &http.Client{
			CheckRedirect: func(*http.Request, []*http.Request) error {
				return http.ErrUseLastResponse
			},
		}
	}
	if d.batchWindow < 0 {
		d.batchWindow = 0
	}
	d.maxBatch = orDefault(d.maxBatch, DefaultMaxBatch)
	d.outboxLimit = orDefault(d.outboxLimit, DefaultOutboxLimit)
	d.retryFor = orDefault(d.retryFor, DefaultRetryFor)
	d.timeout = orDefault(d.timeout, DefaultTimeout)
	if d.firstRetry >= MaxFirstRetry {
		d.log.Warn("first_retry must be below 2s; using the default",
			"first_retry", d.firstRetry, "default", DefaultFirstRetry)
		d.firstRetry = DefaultFirstRetry
	}
	d.firstRetry = orDefault(d.firstRetry, DefaultFirstRetry)
	d.hold = orDefault(d.hold, DefaultHold)
	d.countDebounce = orDefault(d.countDebounce, DefaultCountDebounce)
	d.lease = orDefault(d.lease, DefaultLease)
	d.poll = orDefault(d.poll, DefaultPoll)
	if d.now == nil {
		d.now = time.Now
	}
	d.ctx, d.cancel = context.WithCancel(context.Background())
	if d.shared {
		d.ops = make(chan op, orDefault(opts.OpsLimit, DefaultOpsLimit))
		d.opsDone = make(chan struct{})
		go d.runOps()
	}
	go d.ticker()
	return d
}

func orDefault[T int | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// Stats returns the counters, for the Prometheus collector: webhook deliveries by result
// are delivered = Sent, failed = Failed, retried = Retried, dropped = Dropped (all event
// counts except Failed and Retried, which count POST attempts), and the outbox size is
// Pending. It does no I/O (a shared store's size is the one the last poll read), so a
// metrics scrape may call it as often as it likes.
func (d *Dispatcher) Stats() Stats {
	st := Stats{
		Sent:    d.sent.Load(),
		Batches: d.batches.Load(),
		Failed:  d.failed.Load(),
		Retried: d.retried.Load(),
		Dropped: d.dropped.Load(),

		DroppedBatches: d.droppedBatches.Load(),
	}
	if d.mem != nil {
		st.Pending = int64(d.mem.Total())
	} else {
		st.Pending = d.sharedSize.Load() + d.opsCount.Load()
	}
	return st
}

// Close stops accepting events and settles what was emitted. With the memory store it
// flushes: held events fire at once, every outbox sends what it holds without waiting for
// its batch window and keeps retrying as usual. With a shared store nothing is lost by
// stopping: what was emitted is handed to the store, each outbox finishes its current
// attempt and gives its lease up, and the rest stays queued for another node (or this one
// after a restart). When ctx ends first, in-flight requests and backoffs are cancelled,
// what is left in memory is dropped (counted and logged) and Close returns an error
// wrapping ctx.Err(). Close returns only after every goroutine of the Dispatcher has
// stopped. It is safe to call more than once.
func (d *Dispatcher) Close(ctx context.Context) error {
	before := d.dropped.Load()
	d.closeOnce.Do(func() {
		d.mu.Lock()
		d.closed = true
		d.mu.Unlock()
		if d.shared {
			close(d.ops)
			select {
			case <-d.opsDone:
			case <-ctx.Done():
			}
		}
		close(d.tickStop)
		<-d.tickDone
		if d.mem != nil {
			d.mem.flushHolds(time.Now())
			d.fireDue(time.Now())
		}
		close(d.closing)
	})

	done := make(chan struct{})
	go func() {
		d.runMu.Lock()
		d.stopped = true
		d.runMu.Unlock()
		d.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		d.cancel()
		d.waitOps()
		return nil
	case <-ctx.Done():
	}
	d.cancel()
	<-done
	d.waitOps()
	if n := d.dropped.Load() - before; n > 0 {
		return fmt.Errorf("webhooks: close: %d event deliveries dropped: %w", n, ctx.Err())
	}
	return nil
}

// waitOps waits for a shared store's op goroutine, which ends once its queue is drained
// (or, after cancel, dropped).
func (d *Dispatcher) waitOps() {
	if d.shared {
		<-d.opsDone
	}
}

// outboxKey names an app+URL's outbox in a store: a hash, so the URL (which may carry
// credentials) never appears in a Redis key.
func outboxKey(appID, rawURL string) string {
	sum := sha256.Sum256([]byte(appID + "\x00" + rawURL))
	return hex.EncodeToString(sum[:16])
}

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
