package webhooks

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/reverbgo/reverbgo/internal/testutil"
)

// TestHangingReceiverDoesNotStallItsOutbox (issue 20, fault 1): a receiver that accepts and
// never answers, with a POST timeout longer than the lease. The lease is renewed during the
// POST, so it is never lost and re-claimed with a fresh retry clock: the batch is dropped
// once RetryFor has passed since its first attempt (counted), and the outbox goes on with
// the events queued behind it once the receiver answers again.
func TestHangingReceiverDoesNotStallItsOutbox(t *testing.T) {
	for name, stores := range sharedStores(t) {
		t.Run(name, func(t *testing.T) {
			newStore := stores(t)
			rcv := newReceiver(t, nil)
			rcv.hold() // accepts, reads the body, never answers
			logs := &syncBuffer{}
			opts := testOptions(logs)
			opts.Store = newStore()
			opts.Lease = 400 * time.Millisecond
			opts.Poll = 50 * time.Millisecond
			opts.RetryFor = 1500 * time.Millisecond
			opts.Client = &http.Client{Timeout: 700 * time.Millisecond}
			d := start(t, opts, app("1", "k", "s", hook(rcv.srv.URL)))
			d.Emit("1", ev("client_event", "a"))
			<-rcv.arrived
			testutil.WaitForWithin(t, 8*time.Second, "the hung batch dropped after RetryFor", func() bool {
				return d.Stats().Dropped == 1
			})
			rcv.unblock()
			d.Emit("1", ev("client_event", "b"))
			testutil.WaitFor(t, "the next event delivered", func() bool {
				return slices.Contains(rcv.eventNames(), "b")
			})
		})
	}
}

// TestPerWebhookTimeoutAndRetryFor: a webhook's own timeout bounds each POST and its own
// retry_for decides when its batch is dropped (the Dispatcher's defaults are far longer);
// the drop is counted as a batch and logged with the batch's event types.
func TestPerWebhookTimeoutAndRetryFor(t *testing.T) {
	rcv := newReceiver(t, nil)
	rcv.hold()
	logs := &syncBuffer{}
	opts := testOptions(logs)
	opts.RetryFor = time.Hour
	wh := hook(rcv.srv.URL)
	wh.Timeout, wh.RetryFor = 1, 2 // seconds
	d := start(t, opts, app("1", "k", "s", wh))
	began := time.Now()
	d.Emit("1", ev("member_added", "a"))
	d.Emit("1", ev("client_event", "b"))
	testutil.WaitForWithin(t, 8*time.Second, "the batch dropped after the webhook's retry_for", func() bool {
		return d.Stats().DroppedBatches == 1
	})
	if el := time.Since(began); el < 2*time.Second {
		t.Fatalf("dropped after %v, before retry_for", el)
	}
	if s := d.Stats(); s.Dropped != 2 || s.Failed < 2 {
		t.Fatalf("stats %+v: want 2 events dropped after at least two timed-out POSTs", s)
	}
	if !strings.Contains(logs.String(), `"event_types":["client_event","member_added"]`) {
		t.Fatalf("the drop is not logged with its event types:\n%s", logs.String())
	}
}
