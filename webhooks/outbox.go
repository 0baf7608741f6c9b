package webhooks

import (
	"bytes"
	"context"
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

	mu      sync.Mutex
	apiKey  string // credentials and headers as of the last SetApps; read per attempt
	secret  string
	headers map[string]string
	running bool      // a run goroutine exists (or is about to)
	dirty   bool      // poked since run last looked at the store
	queued  int       // events this process queued and run has not claimed (for MaxBatch)
	since   time.Time // when the oldest of those was queued; zero when queued is 0
}

func newOutbox(d *Dispatcher, key, appID, rawURL, logURL string) *outbox {
	return &outbox{d: d, key: key, appID: appID, url: rawURL, logURL: logURL, wake: make(chan struct{}, 1)}
}

// setCreds stores the app's credentials and the webhook's headers; merge adds headers of a
// second entry with the same URL to the first's.
func (ob *outbox) setCreds(key, secret string, headers map[string]string, merge bool) {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	ob.apiKey, ob.secret = key, secret
	if !merge {
		ob.headers = nil
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
		batch, ok, err := d.store.Claim(ctx, ob.key, d.owner, d.maxBatch, d.lease)
		cancel()
		if err != nil {
			d.log.Warn("webhook outbox not readable; retried at the next poll",
				"app_id", ob.appID, "url", ob.logURL, "error", err)
			ob.exit()
			return
		}
		if !ok || len(batch) == 0 {
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
		if ob.queued = max(0, ob.queued-len(batch)); ob.queued == 0 {
			ob.since = time.Time{}
		}
		ob.mu.Unlock()
		// On false the loop's checks end it: Close's context ended (memory: the rest is
		// dropped), a shared store is closing, or the lease was lost (the claim is refused).
		ob.deliver(batch)
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
		batch, ok, _ := d.store.Claim(context.Background(), ob.key, d.owner, d.maxBatch, d.lease)
		if !ok || len(batch) == 0 {
			break
		}
		_, _ = d.store.Ack(context.Background(), ob.key, d.owner)
		total += len(batch)
	}
	if total > 0 {
		d.dropped.Add(uint64(total))
		d.log.Error("webhook events dropped at shutdown", "app_id", ob.appID, "url", ob.logURL, "events", total)
	}
}

// deliver POSTs one batch until a 2xx, retrying the same body with backoff until RetryFor
// has passed since the first attempt, and acknowledges it in the store. The signature is
// computed per attempt with the current secret, so a secret rotated by SetApps applies to
// retries too. It returns false when this node must stop delivering the outbox: Close's
// context ended, a shared store's Dispatcher is closing (the batch stays in flight in the
// store for the next owner), or the lease was lost.
func (ob *outbox) deliver(batch [][]byte) bool {
	d := ob.d
	body := encodeBody(d.now(), batch)
	n := len(batch)
	first := time.Now()
	delay := d.firstRetry

	for attempt := 1; ; attempt++ {
		if attempt > 1 {
			d.retried.Add(1)
		}
		key, secret, headers := ob.creds()
		err := ob.post(body, key, sign(secret, body), headers)
		ob.observe(n, attempt, err)
		if err == nil {
			d.sent.Add(uint64(n))
			d.batches.Add(1)
			ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
			acked, aerr := d.store.Ack(ctx, ob.key, d.owner)
			cancel()
			if aerr != nil || !acked {
				d.log.Warn("webhook batch delivered but its lease was lost; the next owner may send it again",
					"app_id", ob.appID, "url", ob.logURL, "events", n, "error", aerr)
			}
			if attempt > 1 {
				d.log.Info("webhook delivered after retries",
					"app_id", ob.appID, "url", ob.logURL, "events", n, "attempts", attempt)
			}
			return aerr == nil && acked
		}
		d.failed.Add(1)

		if d.ctx.Err() != nil {
			return ob.stop(n, attempt, err)
		}
		if d.shared && isClosed(d.closing) {
			return ob.stop(n, attempt, err)
		}
		elapsed := time.Since(first)
		if elapsed >= d.retryFor {
			ob.drop(n, "webhook batch dropped: retry period exhausted", attempt, err)
			return true
		}
		wait := min(jitter(delay), d.retryFor-elapsed)
		d.log.Warn("webhook delivery failed, will retry",
			"app_id", ob.appID, "url", ob.logURL, "events", n, "attempt", attempt,
			"error", err, "retry_in", wait)
		switch ob.sleepRenew(wait) {
		case sleptLost:
			d.log.Warn("webhook outbox lease lost while retrying; another node sends the batch",
				"app_id", ob.appID, "url", ob.logURL, "events", n)
			return false
		case sleptStopped:
			return ob.stop(n, attempt, err)
		}
		delay = min(delay*2, MaxBackoff)
	}
}

// stop ends delivery at shutdown: a memory batch is dropped, a shared one stays in flight
// in the store for the next owner.
func (ob *outbox) stop(n, attempts int, err error) bool {
	d := ob.d
	if d.mem != nil {
		ob.drop(n, "webhook batch dropped at shutdown", attempts, err)
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	_ = d.store.Release(ctx, ob.key, d.owner)
	d.log.Info("webhook batch left in the store at shutdown for the next owner",
		"app_id", ob.appID, "url", ob.logURL, "events", n, "attempts", attempts)
	return false
}

type sleepResult int

const (
	slept sleepResult = iota
	sleptStopped
	sleptLost
)

// sleepRenew waits d, renewing a shared store's lease every third of it. A shared store's
// wait also ends at Close, since the batch is safe in the store.
func (ob *outbox) sleepRenew(wait time.Duration) sleepResult {
	d := ob.d
	end := time.Now().Add(wait)
	for {
		left := time.Until(end)
		if left <= 0 {
			return slept
		}
		chunk := left
		if d.shared {
			chunk = min(left, d.lease/3)
		}
		var closing <-chan struct{}
		if d.shared {
			closing = d.closing
		}
		t := time.NewTimer(chunk)
		select {
		case <-t.C:
		case <-d.ctx.Done():
			t.Stop()
			return sleptStopped
		case <-closing:
			t.Stop()
			return sleptStopped
		}
		if d.shared {
			ctx, cancel := context.WithTimeout(d.ctx, opTimeout)
			ok, err := d.store.Renew(ctx, ob.key, d.owner, d.lease)
			cancel()
			if err == nil && !ok {
				return sleptLost
			}
		}
	}
}

func (ob *outbox) drop(n int, msg string, attempts int, err error) {
	d := ob.d
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	_, _ = d.store.Ack(ctx, ob.key, d.owner)
	cancel()
	d.dropped.Add(uint64(n))
	d.log.Error(msg, "app_id", ob.appID, "url", ob.logURL, "events", n,
		"attempts", attempts, "error", err)
}

// statusError is a non-2xx answer.
type statusError int

func (e statusError) Error() string { return "status " + strconv.Itoa(int(e)) }

// post makes one attempt. Errors are stripped of the URL (which url.Error would include,
// query string and all) so they can be logged.
func (ob *outbox) post(body []byte, key, sig string, headers map[string]string) error {
	req, err := http.NewRequestWithContext(ob.d.ctx, http.MethodPost, ob.url, bytes.NewReader(body))
	if err != nil {
		return errors.New("cannot build request")
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	// Set after the configured headers: config validation refuses these names, and this
	// order keeps the signature intact even if one slipped through.
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
