package webhooks

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

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
	// Both events must travel in one batch: without a window the outbox may claim "a" alone
	// before "b" is emitted, and then drops two batches of one event each.
	opts.BatchWindow = 200 * time.Millisecond
	wh := hook(rcv.srv.URL)
	// retry_for leaves room for two 1 s POSTs and the backoff between them on a loaded
	// machine (with 2 s a second POST could start after the deadline).
	wh.Timeout, wh.RetryFor = 1, 4 // seconds
	d := start(t, opts, app("1", "k", "s", wh))
	began := time.Now()
	d.Emit("1", ev("member_added", "a"))
	d.Emit("1", ev("client_event", "b"))
	testutil.WaitForWithin(t, 12*time.Second, "the batch dropped after the webhook's retry_for", func() bool {
		return d.Stats().DroppedBatches == 1
	})
	if el := time.Since(began); el < 4*time.Second {
		t.Fatalf("dropped after %v, before retry_for", el)
	}
	if s := d.Stats(); s.Dropped != 2 || s.Failed < 2 {
		t.Fatalf("stats %+v: want 2 events dropped after at least two timed-out POSTs", s)
	}
	if !strings.Contains(logs.String(), `"event_types":["client_event","member_added"]`) {
		t.Fatalf("the drop is not logged with its event types:\n%s", logs.String())
	}
}

// cutStore is a node's view of a shared store that can be made unreachable: once cut, every
// call fails as if Redis did not answer, while other nodes' stores still reach it.
type cutStore struct {
	Store
	cut     atomic.Bool
	mu      sync.Mutex
	claimed time.Time // when the last Claim that returned a batch was sent
}

var errCut = errors.New("store unreachable (test)")

func (s *cutStore) Claim(ctx context.Context, key, owner string, max int, lease time.Duration, now time.Time) (Batch, bool, error) {
	if s.cut.Load() {
		return Batch{}, false, errCut
	}
	sent := time.Now()
	b, ok, err := s.Store.Claim(ctx, key, owner, max, lease, now)
	if err == nil && ok && len(b.Events) > 0 {
		s.mu.Lock()
		s.claimed = sent
		s.mu.Unlock()
	}
	return b, ok, err
}

func (s *cutStore) lastClaim() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.claimed
}

func (s *cutStore) Renew(ctx context.Context, key, owner string, lease time.Duration) (bool, error) {
	if s.cut.Load() {
		return false, errCut
	}
	return s.Store.Renew(ctx, key, owner, lease)
}

func (s *cutStore) Ack(ctx context.Context, key, owner string) (bool, error) {
	if s.cut.Load() {
		return false, errCut
	}
	return s.Store.Ack(ctx, key, owner)
}

func (s *cutStore) Release(ctx context.Context, key, owner string) error {
	if s.cut.Load() {
		return errCut
	}
	return s.Store.Release(ctx, key, owner)
}

func (s *cutStore) Size(ctx context.Context, key string) (int, error) {
	if s.cut.Load() {
		return 0, errCut
	}
	return s.Store.Size(ctx, key)
}

// nodeClient tags every POST of one Dispatcher with X-Test-Node, so the receiver can tell
// the nodes apart.
func nodeClient(name string) *http.Client {
	return &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		r = r.Clone(r.Context())
		r.Header.Set("X-Test-Node", name)
		return http.DefaultTransport.RoundTrip(r)
	})}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestUnrenewableLeaseStopsSending (issue 24): node A claims a batch, its receiver answers
// 500, and then A loses Redis, so it cannot renew the lease. A must stop POSTing before the
// lease can expire (counted from when its Claim was sent), because from then on node B may
// claim the batch; B does, after the expiry, and is the only one that sends it from then on.
// Before the fix A ignored the failed renewals and kept retrying until RetryFor, beside B: the
// same batch sent by two nodes.
func TestUnrenewableLeaseStopsSending(t *testing.T) {
	rdb := testutil.RealRedis(t) // the lease must really expire in Redis
	prefix := "t:" + uuid.NewString() + ":"
	const lease = 800 * time.Millisecond

	type post struct {
		node string
		at   time.Time
		n    string
	}
	var mu sync.Mutex
	var posts []post
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var env struct {
			Events []map[string]any `json:"events"`
		}
		_ = json.NewDecoder(r.Body).Decode(&env)
		node := r.Header.Get("X-Test-Node")
		mu.Lock()
		for _, e := range env.Events {
			n, _ := e["n"].(string)
			posts = append(posts, post{node: node, at: time.Now(), n: n})
		}
		mu.Unlock()
		if node == "A" {
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	t.Cleanup(srv.Close)
	postsOf := func(node string) []post {
		mu.Lock()
		defer mu.Unlock()
		var out []post
		for _, p := range posts {
			if p.node == node {
				out = append(out, p)
			}
		}
		return out
	}

	a := &cutStore{Store: redisStore(rdb, prefix, "A")}
	optsA := testOptions(&syncBuffer{})
	optsA.Store, optsA.Client, optsA.Lease, optsA.RetryFor = a, nodeClient("A"), lease, 4*time.Second
	optsA.Poll = 50 * time.Millisecond
	nodeA := start(t, optsA, app("1", "k", "s", hook(srv.URL)))
	nodeA.Emit("1", ev("client_event", "a"))
	testutil.WaitFor(t, "A's first attempt", func() bool { return len(postsOf("A")) > 0 })
	a.cut.Store(true)
	expires := a.lastClaim().Add(lease)

	optsB := testOptions(&syncBuffer{})
	optsB.Store, optsB.Client, optsB.Lease = redisStore(rdb, prefix, "B"), nodeClient("B"), lease
	optsB.Poll = 50 * time.Millisecond
	start(t, optsB, app("1", "k", "s", hook(srv.URL)))
	testutil.WaitFor(t, "B sends the batch", func() bool { return len(postsOf("B")) > 0 })
	// A's delivery loop ends either way: at the margin (fixed) or after RetryFor (before).
	testutil.WaitForWithin(t, 8*time.Second, "A's delivery loop ended", func() bool {
		nodeA.mu.RLock()
		ob := nodeA.outboxes[outboxKey("1", srv.URL)]
		nodeA.mu.RUnlock()
		return ob.idle()
	})

	for _, p := range postsOf("A") {
		if !p.at.Before(expires) {
			t.Errorf("A POSTed %s at %v after its lease could expire (%v): a duplicate of B's",
				p.n, p.at.Format("15:04:05.000"), expires.Format("15:04:05.000"))
		}
	}
	if b := postsOf("B"); len(b) != 1 || b[0].n != "a" || b[0].at.Before(expires) {
		t.Errorf("B's POSTs %v, want the batch [a] once, after A's lease expired at %v", b, expires)
	}
	if s := nodeA.Stats(); s.DroppedBatches != 0 {
		t.Errorf("A dropped the batch (%+v): it should have left it to the next owner", s)
	}
}
