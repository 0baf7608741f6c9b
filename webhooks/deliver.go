package webhooks

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"
)

// deliver POSTs one batch until a 2xx, retrying the same body with backoff until the
// outbox's RetryFor has passed since the batch's first attempt (b.Since, which stays with the
// batch in the store across re-claims), and acknowledges it in the store. The signature is
// computed per attempt with the current secret, so a secret rotated by SetApps applies to
// retries too. With a shared store the lease is renewed for the batch's whole life, during
// the POST too, so a slow receiver cannot make it lapse; claimed is when the Claim that
// leased it was sent (the lease runs from no earlier than that). It returns false when this
// node must stop delivering the outbox: Close's context ended, a shared store's Dispatcher
// is closing (the batch stays in flight in the store for the next owner), or the lease was
// lost or could not be renewed in time.
func (ob *outbox) deliver(b Batch, claimed time.Time) bool {
	d := ob.d
	batch := b.Events
	body := encodeBody(d.now(), batch)
	n := len(batch)
	first := b.Since
	if first.IsZero() {
		first = time.Now()
	}
	timeout, retryFor := ob.settings()
	delay := d.firstRetry

	ctx, cancel := context.WithCancel(d.ctx)
	defer cancel()
	var lost <-chan struct{} // closed when the lease is lost; nil (never) in memory
	if d.shared {
		var stop func()
		lost, stop = ob.keepLease(claimed, cancel)
		defer stop()
	}

	for attempt := 1; ; attempt++ {
		if isClosed(lost) {
			return ob.lostLease(n)
		}
		if attempt > 1 {
			d.retried.Add(1)
		}
		key, secret, headers := ob.creds()
		err := ob.post(ctx, timeout, body, key, sign(secret, body), headers)
		ob.observe(n, attempt, err)
		if err == nil {
			d.sent.Add(uint64(n))
			d.batches.Add(1)
			actx, acancel := context.WithTimeout(context.Background(), opTimeout)
			acked, aerr := d.store.Ack(actx, ob.key, d.owner)
			acancel()
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

		if isClosed(lost) {
			return ob.lostLease(n)
		}
		if d.ctx.Err() != nil {
			return ob.stop(batch, attempt, err)
		}
		if d.shared && isClosed(d.closing) {
			return ob.stop(batch, attempt, err)
		}
		elapsed := time.Since(first)
		if elapsed >= retryFor {
			ob.drop(batch, "webhook batch dropped: retry period exhausted", attempt, err)
			return true
		}
		wait := min(jitter(delay), retryFor-elapsed)
		d.log.Warn("webhook delivery failed, will retry",
			"app_id", ob.appID, "url", ob.logURL, "events", n, "attempt", attempt,
			"error", err, "retry_in", wait)
		switch ob.sleep(wait, lost) {
		case sleptLost:
			return ob.lostLease(n)
		case sleptStopped:
			return ob.stop(batch, attempt, err)
		}
		delay = min(delay*2, MaxBackoff)
	}
}

func (ob *outbox) lostLease(n int) bool {
	ob.d.log.Warn("webhook outbox lease lost; another node sends the batch",
		"app_id", ob.appID, "url", ob.logURL, "events", n)
	return false
}

// stop ends delivery at shutdown: a memory batch is dropped, a shared one stays in flight
// in the store for the next owner.
func (ob *outbox) stop(batch [][]byte, attempts int, err error) bool {
	d := ob.d
	n := len(batch)
	if d.mem != nil {
		ob.drop(batch, "webhook batch dropped at shutdown", attempts, err)
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	_ = d.store.Release(ctx, ob.key, d.owner)
	d.log.Info("webhook batch left in the store at shutdown for the next owner",
		"app_id", ob.appID, "url", ob.logURL, "events", n, "attempts", attempts)
	return false
}

// RenewEvery is the renewal interval of a lease: a quarter of it, so a renewal that is
// slow or fails once still leaves time for the next.
func RenewEvery(lease time.Duration) time.Duration { return lease / 4 }

// LeaseMargin is how long before a lease could expire its owner stops sending when it could
// not renew it: a quarter of the lease, which covers the cancelled POST's way out of the
// HTTP client and the clock drift between this node and Redis. Stopping then, not at the
// expiry, is what makes a duplicate impossible by design: another node can claim only after
// the expiry, and by then this one has stopped.
func LeaseMargin(lease time.Duration) time.Duration { return lease / 4 }

// keepLease renews the outbox's lease every RenewEvery(lease) until stop is called. It
// closes lost and calls cancel (which ends a POST in flight) when a renewal finds the lease
// taken (another owner sends the batch) and when no renewal has succeeded for the lease
// minus LeaseMargin, counted from when the last successful Renew (or, before the first, the
// Claim at since) was sent: while Redis is unreachable the lease may lapse unseen and
// another node may claim the batch, so this one must have stopped sending by then.
func (ob *outbox) keepLease(since time.Time, cancel context.CancelFunc) (lost <-chan struct{}, stop func()) {
	d := ob.d
	l := make(chan struct{})
	quit, done := make(chan struct{}), make(chan struct{})
	every := RenewEvery(d.lease)
	valid := d.lease - LeaseMargin(d.lease) // how long a successful renewal keeps us sending
	lose := func(reason string, err error) {
		d.log.Warn("webhook outbox lease not kept; this node stops sending the batch",
			"app_id", ob.appID, "url", ob.logURL, "reason", reason, "error", err)
		close(l)
		cancel()
	}
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		deadline := since.Add(valid)
		expire := time.NewTimer(time.Until(deadline))
		defer expire.Stop()
		for {
			select {
			case <-quit:
				return
			case <-d.ctx.Done():
				return
			case <-expire.C:
				lose("not renewed in time", nil)
				return
			case <-t.C:
			}
			sent := time.Now()
			// A renewal that would answer after the deadline cannot help: bound it by that.
			ctx, c := context.WithTimeout(d.ctx, min(opTimeout, every, time.Until(deadline)))
			ok, err := d.store.Renew(ctx, ob.key, d.owner, d.lease)
			c()
			switch {
			case err == nil && !ok:
				lose("taken by another owner", nil)
				return
			case err == nil:
				deadline = sent.Add(valid)
				expire.Reset(time.Until(deadline))
			case !time.Now().Before(deadline):
				lose("not renewed in time", err)
				return
			}
		}
	}()
	return l, func() { close(quit); <-done }
}

type sleepResult int

const (
	slept sleepResult = iota
	sleptStopped
	sleptLost
)

// sleep waits d (the backoff). It ends early when the lease is lost, when Close's context
// ends and, for a shared store, at Close (the batch is safe in the store).
func (ob *outbox) sleep(wait time.Duration, lost <-chan struct{}) sleepResult {
	d := ob.d
	var closing <-chan struct{}
	if d.shared {
		closing = d.closing
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return slept
	case <-lost:
		return sleptLost
	case <-d.ctx.Done():
		return sleptStopped
	case <-closing:
		return sleptStopped
	}
}

// drop gives a batch up: logged, then counted in Stats.Dropped (events) and Stats.DroppedBatches, and
// logged with its event types (never the events themselves).
func (ob *outbox) drop(batch [][]byte, msg string, attempts int, err error) {
	d := ob.d
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	_, _ = d.store.Ack(ctx, ob.key, d.owner)
	cancel()
	// The log line first, then the counters: whoever sees Dropped move finds the line that
	// explains it.
	d.log.Error(msg, "app_id", ob.appID, "url", ob.logURL, "events", len(batch),
		"event_types", eventTypes(batch), "attempts", attempts, "error", err)
	d.dropped.Add(uint64(len(batch)))
	d.droppedBatches.Add(1)
}

// eventTypes lists the distinct event names of encoded events, sorted.
func eventTypes(batch [][]byte) []string {
	var names []string
	for _, raw := range batch {
		var e struct {
			Name string `json:"name"`
		}
		if json.Unmarshal(raw, &e) != nil {
			e.Name = "?"
		}
		if !slices.Contains(names, e.Name) {
			names = append(names, e.Name)
		}
	}
	slices.Sort(names)
	return names
}

// statusError is a non-2xx answer.
type statusError int

func (e statusError) Error() string { return "status " + strconv.Itoa(int(e)) }

// post makes one attempt within timeout. Errors are stripped of the URL (which url.Error
// would include, query string and all) so they can be logged.
func (ob *outbox) post(ctx context.Context, timeout time.Duration, body []byte, key, sig string, headers map[string]string) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ob.url, bytes.NewReader(body))
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
