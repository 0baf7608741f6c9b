package webhooks

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"
)

// overflowLogEvery rate-limits the overflow log per outbox: a dead receiver under load
// would otherwise log once per dropped event.
const overflowLogEvery = 10 * time.Second

// maxDrain bounds how much of a response body is read so the connection can be reused
// without letting a receiver make us read forever.
const maxDrain = 64 << 10

// queued is one encoded event and when it was queued (monotonic, for the batch window).
type queued struct {
	raw json.RawMessage
	at  time.Time
}

// outbox is the ordered queue for one app+URL. At most one goroutine (run) drains it, which
// is what keeps order and allows one in-flight batch per URL; the goroutine exits when the
// queue is empty, so idle URLs cost no goroutine.
type outbox struct {
	d      *Dispatcher
	appID  string
	url    string
	logURL string // without user info or query: safe to log

	// wake is poked when the queue reaches MaxBatch, so run stops waiting for the window.
	wake chan struct{}

	mu       sync.Mutex
	key      string // credentials as of the last SetApps; read per attempt
	secret   string
	queue    []queued
	inflight int  // events taken by run and not yet sent or dropped
	running  bool // a run goroutine exists (or is about to)

	overflowSince  int       // drops not yet logged
	overflowLogged time.Time // last overflow log line; zero = never
}

func newOutbox(d *Dispatcher, appID, rawURL, logURL string) *outbox {
	return &outbox{d: d, appID: appID, url: rawURL, logURL: logURL, wake: make(chan struct{}, 1)}
}

func (ob *outbox) setCreds(key, secret string) {
	ob.mu.Lock()
	ob.key, ob.secret = key, secret
	ob.mu.Unlock()
}

func (ob *outbox) creds() (key, secret string) {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	return ob.key, ob.secret
}

// idle reports whether the outbox holds nothing and has no goroutine.
func (ob *outbox) idle() bool {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	return !ob.running && len(ob.queue) == 0 && ob.inflight == 0
}

// enqueue appends raw, dropping the oldest queued event when the outbox is full, and starts
// the delivery goroutine if there is none. The caller holds d.mu (read), which orders this
// wg.Add before Close's wg.Wait.
func (ob *outbox) enqueue(raw json.RawMessage) {
	d := ob.d
	ob.mu.Lock()
	defer ob.mu.Unlock()

	if len(ob.queue) >= d.outboxLimit {
		ob.queue[0] = queued{} // let the dropped bytes be collected
		ob.queue = ob.queue[1:]
		d.dropped.Add(1)
		d.pending.Add(-1)
		ob.noteOverflow()
	}
	ob.queue = append(ob.queue, queued{raw: raw, at: time.Now()})
	d.pending.Add(1)

	if !ob.running {
		ob.running = true
		d.wg.Add(1)
		go ob.run()
	} else if len(ob.queue) >= d.maxBatch {
		select {
		case ob.wake <- struct{}{}:
		default:
		}
	}
}

// noteOverflow logs the first overflow at once and then at most every overflowLogEvery,
// with the number of events dropped in between. Caller holds ob.mu.
func (ob *outbox) noteOverflow() {
	ob.overflowSince++
	now := time.Now()
	if !ob.overflowLogged.IsZero() && now.Sub(ob.overflowLogged) < overflowLogEvery {
		return
	}
	ob.overflowLogged = now
	ob.d.log.Warn("webhook outbox full, dropped oldest events",
		"app_id", ob.appID, "url", ob.logURL, "dropped", ob.overflowSince, "limit", ob.d.outboxLimit)
	ob.overflowSince = 0
}

// run delivers batches until the queue is empty, then exits.
func (ob *outbox) run() {
	defer ob.d.wg.Done()
	for {
		batch := ob.next()
		if batch == nil {
			return
		}
		ob.deliver(batch)
	}
}

// next waits until a batch is due and takes it: when MaxBatch events are queued, when the
// oldest queued event has waited BatchWindow, or at once while closing. It returns nil (and
// marks the outbox not running, under the same lock Emit checks) when there is nothing left.
// After Close's context has ended it drops whatever is queued.
func (ob *outbox) next() []json.RawMessage {
	d := ob.d
	ob.mu.Lock()
	for {
		if d.ctx.Err() != nil && len(ob.queue) > 0 {
			n := len(ob.queue)
			ob.queue = nil
			d.dropped.Add(uint64(n))
			d.pending.Add(-int64(n))
			d.log.Error("webhook events dropped at shutdown", "app_id", ob.appID, "url", ob.logURL, "events", n)
		}
		if len(ob.queue) == 0 {
			ob.running = false
			ob.queue = nil // release the backing array of a burst
			ob.mu.Unlock()
			return nil
		}
		wait := time.Until(ob.queue[0].at.Add(d.batchWindow))
		if len(ob.queue) >= d.maxBatch || wait <= 0 || isClosed(d.closing) {
			n := min(len(ob.queue), d.maxBatch)
			batch := make([]json.RawMessage, n)
			for i := range n {
				batch[i] = ob.queue[i].raw
				ob.queue[i] = queued{}
			}
			ob.queue = ob.queue[n:]
			ob.inflight = n
			ob.mu.Unlock()
			return batch
		}
		ob.mu.Unlock()

		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ob.wake:
		case <-d.closing:
		case <-d.ctx.Done():
		}
		t.Stop()
		ob.mu.Lock()
	}
}

// deliver POSTs one batch until a 2xx, retrying the same body with backoff until RetryFor
// has passed since the first attempt. The signature is computed per attempt with the
// current secret, so a secret rotated by SetApps applies to retries too.
func (ob *outbox) deliver(batch []json.RawMessage) {
	d := ob.d
	body := encodeBody(d.now(), batch)
	n := len(batch)
	first := time.Now()
	delay := d.firstRetry

	for attempt := 1; ; attempt++ {
		key, secret := ob.creds()
		err := ob.post(body, key, sign(secret, body))
		ob.observe(n, attempt, err)
		if err == nil {
			d.sent.Add(uint64(n))
			d.batches.Add(1)
			ob.finish(n)
			if attempt > 1 {
				d.log.Info("webhook delivered after retries",
					"app_id", ob.appID, "url", ob.logURL, "events", n, "attempts", attempt)
			}
			return
		}
		d.failed.Add(1)

		if d.ctx.Err() != nil {
			ob.drop(n, "webhook batch dropped at shutdown", attempt, err)
			return
		}
		elapsed := time.Since(first)
		if elapsed >= d.retryFor {
			ob.drop(n, "webhook batch dropped: retry period exhausted", attempt, err)
			return
		}
		wait := min(jitter(delay), d.retryFor-elapsed)
		d.log.Warn("webhook delivery failed, will retry",
			"app_id", ob.appID, "url", ob.logURL, "events", n, "attempt", attempt,
			"error", err, "retry_in", wait)
		d.retried.Add(1)
		if !sleep(d.ctx, wait) {
			ob.drop(n, "webhook batch dropped at shutdown", attempt, err)
			return
		}
		delay = min(delay*2, MaxBackoff)
	}
}

func (ob *outbox) drop(n int, msg string, attempts int, err error) {
	ob.d.dropped.Add(uint64(n))
	ob.finish(n)
	ob.d.log.Error(msg, "app_id", ob.appID, "url", ob.logURL, "events", n,
		"attempts", attempts, "error", err)
}

func (ob *outbox) finish(n int) {
	ob.d.pending.Add(-int64(n))
	ob.mu.Lock()
	ob.inflight = 0
	ob.mu.Unlock()
}

// statusError is a non-2xx answer.
type statusError int

func (e statusError) Error() string { return "status " + strconv.Itoa(int(e)) }

// post makes one attempt. Errors are stripped of the URL (which url.Error would include,
// query string and all) so they can be logged.
func (ob *outbox) post(body []byte, key, sig string) error {
	req, err := http.NewRequestWithContext(ob.d.ctx, http.MethodPost, ob.url, bytes.NewReader(body))
	if err != nil {
		return errors.New("cannot build request")
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Pusher-Key", key)
	req.Header.Set("X-Pusher-Signature", sig)
	resp, err := ob.d.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("post: %w", err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxDrain))
	_ = resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return statusError(resp.StatusCode)
	}
	return nil
}

// encodeBody builds {"time_ms":...,"events":[...]} from already-encoded events, so the
// bytes signed are exactly the bytes sent, on every attempt.
func encodeBody(now time.Time, events []json.RawMessage) []byte {
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

// sleep waits for d or until ctx ends; it reports whether the full wait elapsed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
