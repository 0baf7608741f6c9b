package webhooks

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"
)

// maxDrain bounds how much of a response body is read so the connection can be reused
// without letting a receiver make us read forever.
const maxDrain = 64 << 10

// outbox delivers one app+URL's queue, which lives in the store. At most one goroutine per
// process (run) drains it, and the store's lease makes that one per cluster, which is what
// keeps order and allows one in-flight batch per URL; the goroutine exits when the queue
// is empty, so idle URLs cost no goroutine.
type outbox struct {
	d      *Dispatcher
	key    string // in the store
	appID  string
	url    string
	logURL string // without user info or query: safe to log

	// wake is poked when MaxBatch events were queued, so run stops waiting for the window.
	wake chan struct{}

	mu       sync.Mutex
	apiKey   string // credentials, headers and settings as of the last SetApps; read per batch
	secret   string
	headers  map[string]string
	timeout  time.Duration // of one POST
	retryFor time.Duration // how long a batch is retried after its first attempt
	running  bool          // a run goroutine exists (or is about to)
	dirty    bool          // poked since run last looked at the store
	queued   int           // events this process queued and run has not claimed (for MaxBatch)
	since    time.Time     // when the oldest of those was queued; zero when queued is 0
}

func newOutbox(d *Dispatcher, key, appID, rawURL, logURL string) *outbox {
	return &outbox{d: d, key: key, appID: appID, url: rawURL, logURL: logURL, wake: make(chan struct{}, 1)}
}

// setCreds stores the app's credentials, the webhook's headers and its settings (zero: the
// Dispatcher's); merge adds headers of a second entry with the same URL to the first's and
// keeps the longer of each setting.
func (ob *outbox) setCreds(key, secret string, headers map[string]string, timeout, retryFor time.Duration, merge bool) {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	ob.apiKey, ob.secret = key, secret
	timeout, retryFor = orDefault(timeout, ob.d.timeout), orDefault(retryFor, ob.d.retryFor)
	if !merge {
		ob.headers = nil
		ob.timeout, ob.retryFor = timeout, retryFor
	} else {
		ob.timeout, ob.retryFor = max(ob.timeout, timeout), max(ob.retryFor, retryFor)
	}
	for k, v := range headers {
		if ob.headers == nil {
			ob.headers = make(map[string]string, len(headers))
		}
		ob.headers[k] = v
	}
}

func (ob *outbox) creds() (key, secret string, headers map[string]string) {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	return ob.apiKey, ob.secret, ob.headers
}

func (ob *outbox) settings() (timeout, retryFor time.Duration) {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	return orDefault(ob.timeout, ob.d.timeout), orDefault(ob.retryFor, ob.d.retryFor)
}

// idle reports whether the outbox has no goroutine and (in memory) nothing queued.
func (ob *outbox) idle() bool {
	ob.mu.Lock()
	running := ob.running
	ob.mu.Unlock()
	if running {
		return false
	}
	if ob.d.mem != nil {
		n, _ := ob.d.mem.Size(context.Background(), ob.key)
		return n == 0
	}
	return true
}

// poke says the store may hold work for this outbox (n events were just queued by this
// process, 0 for a poll) and starts the delivery goroutine if there is none.
func (ob *outbox) poke(n int) {
	d := ob.d
	ob.mu.Lock()
	defer ob.mu.Unlock()
	ob.dirty = true
	if n > 0 && ob.queued == 0 {
		ob.since = time.Now()
	}
	ob.queued += n
	if ob.running {
		if ob.queued >= d.maxBatch {
			select {
			case ob.wake <- struct{}{}:
			default:
			}
		}
		return
	}
	d.runMu.Lock()
	if d.stopped {
		d.runMu.Unlock()
		return
	}
	d.wg.Add(1)
	d.runMu.Unlock()
	ob.running = true
	go ob.run()
}

// run claims and delivers batches until the store has none for this node, then exits.
func (ob *outbox) run() {
	d := ob.d
	defer d.wg.Done()
	for {
		ob.waitWindow()
		ob.mu.Lock()
		ob.dirty = false
		ob.mu.Unlock()
		if d.ctx.Err() != nil {
			if d.mem != nil {
				ob.dropAll()
			}
			ob.exit()
			return
		}
		if d.shared && isClosed(d.closing) {
			ob.exit()
			return
		}
		ctx, cancel := context.WithTimeout(d.ctx, opTimeout)
		claimed := time.Now()
		batch, ok, err := d.store.Claim(ctx, ob.key, d.owner, d.maxBatch, d.lease, claimed)
		cancel()
		if err != nil {
			d.log.Warn("webhook outbox not readable; retried at the next poll",
				"app_id", ob.appID, "url", ob.logURL, "error", err)
			ob.exit()
			return
		}
		if !ok || len(batch.Events) == 0 {
			ob.mu.Lock()
			if ok && ob.dirty {
				ob.mu.Unlock()
				continue
			}
			ob.running, ob.queued, ob.since = false, 0, time.Time{}
			ob.mu.Unlock()
			return
		}
		ob.mu.Lock()
		if ob.queued = max(0, ob.queued-len(batch.Events)); ob.queued == 0 {
			ob.since = time.Time{}
		}
		ob.mu.Unlock()
		// On false the loop's checks end it: Close's context ended (memory: the rest is
		// dropped), a shared store is closing, or the lease was lost (the claim is refused).
		ob.deliver(batch, claimed)
	}
}

func (ob *outbox) exit() {
	ob.mu.Lock()
	ob.running, ob.queued, ob.since = false, 0, time.Time{}
	ob.mu.Unlock()
}

// waitWindow lets events gather until the oldest this process queued has waited the batch
// window, unless MaxBatch are already queued or the Dispatcher is closing. Without such an
// event (a poll found work queued by another node) it waits one window from now.
func (ob *outbox) waitWindow() {
	d := ob.d
	if d.batchWindow <= 0 {
		return
	}
	ob.mu.Lock()
	since := ob.since
	ob.mu.Unlock()
	if since.IsZero() {
		since = time.Now()
	}
	deadline := since.Add(d.batchWindow)
	for {
		ob.mu.Lock()
		full := ob.queued >= d.maxBatch
		ob.mu.Unlock()
		wait := time.Until(deadline)
		if full || wait <= 0 || isClosed(d.closing) || d.ctx.Err() != nil {
			return
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ob.wake:
		case <-d.closing:
		case <-d.ctx.Done():
		}
		t.Stop()
	}
}

// dropAll empties the outbox after Close's context ended (memory store only).
func (ob *outbox) dropAll() {
	d := ob.d
	total := 0
	for {
		batch, ok, _ := d.store.Claim(context.Background(), ob.key, d.owner, d.maxBatch, d.lease, time.Now())
		if !ok || len(batch.Events) == 0 {
			break
		}
		_, _ = d.store.Ack(context.Background(), ob.key, d.owner)
		total += len(batch.Events)
	}
	if total > 0 {
		d.dropped.Add(uint64(total))
		d.log.Error("webhook events dropped at shutdown", "app_id", ob.appID, "url", ob.logURL, "events", total)
	}
}

// encodeBody builds {"time_ms":...,"events":[...]} from already-encoded events, so the
// bytes signed are exactly the bytes sent, on every attempt.
func encodeBody(now time.Time, events [][]byte) []byte {
	size := 32
	for _, e := range events {
		size += len(e) + 1
	}
	b := make([]byte, 0, size)
	b = append(b, `{"time_ms":`...)
	b = strconv.AppendInt(b, now.UnixMilli(), 10)
	b = append(b, `,"events":[`...)
	for i, e := range events {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, e...)
	}
	return append(b, "]}"...)
}

// jitter spreads retries of many outboxes that failed together ("equal jitter"): a value in
// [d/2, d], so the first retry never exceeds FirstRetry and stays under 2s.
func jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	half := d / 2
	return half + rand.N(d-half+1)
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
