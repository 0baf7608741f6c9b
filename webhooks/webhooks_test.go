package webhooks

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reverbgo/reverbgo/internal/testutil"
)

// TestWireFormat checks what a receiver sees: the envelope, the headers and a signature it
// can verify by recomputing the HMAC over the raw body with the app secret.
func TestWireFormat(t *testing.T) {
	rcv := newReceiver(t, nil)
	logs := &syncBuffer{}
	opts := testOptions(logs)
	fixed := time.UnixMilli(1700000000123)
	opts.Now = func() time.Time { return fixed }
	d := start(t, opts, app("1", "app-key", "app-secret", hook(rcv.srv.URL)))

	d.Emit("1", Event{"name": "channel_occupied", "channel": "presence-room"})
	testutil.WaitFor(t, "one delivery", func() bool { return len(rcv.deliveries()) == 1 })

	got := rcv.deliveries()[0]
	want := `{"time_ms":1700000000123,"events":[{"channel":"presence-room","name":"channel_occupied"}]}`
	if string(got.Body) != want {
		t.Errorf("body\n got %s\nwant %s", got.Body, want)
	}
	for _, tc := range []struct{ header, want string }{
		{"Content-Type", "application/json"},
		{"X-Pusher-Key", "app-key"},
		{"X-Pusher-Signature", hmacHex("app-secret", got.Body)},
	} {
		if v := got.Header.Get(tc.header); v != tc.want {
			t.Errorf("%s = %q, want %q", tc.header, v, tc.want)
		}
	}
	if sig := got.Header.Get("X-Pusher-Signature"); sig != strings.ToLower(sig) || len(sig) != 64 {
		t.Errorf("signature %q is not lower-case hex sha256", sig)
	}
	testutil.WaitFor(t, "stats", func() bool { s := d.Stats(); return s.Sent == 1 && s.Batches == 1 })
	if s := d.Stats(); s.Failed != 0 || s.Dropped != 0 || s.Pending != 0 {
		t.Errorf("stats = %+v", s)
	}
}

// TestSignatureVector pins sign to a value computed independently (openssl dgst -sha256
// -hmac), so a receiver in any language agrees with it.
func TestSignatureVector(t *testing.T) {
	if got, want := sign("secret", []byte("body")), "dc46983557fea127b43af721467eb9b3fde2338fe3e14f51952aa8478c13d355"; got != want {
		t.Fatalf("sign(secret, body) = %s, want %s", got, want)
	}
}

// TestBatching: Emits close together reach a URL as one POST, in order, split by MaxBatch.
func TestBatching(t *testing.T) {
	for _, tc := range []struct {
		name     string
		window   time.Duration
		maxBatch int
		emits    int
		sizes    []int // expected events per POST
	}{
		{"window gathers all", 200 * time.Millisecond, 100, 5, []int{5}},
		{"max batch splits", time.Hour, 2, 5, []int{2, 2, 1}}, // the last one is sent by Close
		{"max batch exactly", time.Hour, 3, 3, []int{3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rcv := newReceiver(t, nil)
			opts := testOptions(&syncBuffer{})
			opts.BatchWindow = tc.window
			opts.MaxBatch = tc.maxBatch
			d := New(opts)
			d.SetApps(nil)
			d.SetApps(nil) // harmless twice
			d.SetApps(appsOf(app("1", "k", "s", hook(rcv.srv.URL))))

			var want []string
			for i := range tc.emits {
				n := fmt.Sprint(i)
				want = append(want, n)
				d.Emit("1", ev("client_event", n))
			}
			full := tc.emits / tc.maxBatch
			testutil.WaitFor(t, "full batches", func() bool { return len(rcv.deliveries()) >= min(full, len(tc.sizes)) })
			if tc.window < time.Hour {
				testutil.WaitFor(t, "all sent", settled(d))
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := d.Close(ctx); err != nil {
				t.Fatalf("Close: %v", err)
			}
			var sizes []int
			for _, dv := range rcv.deliveries() {
				sizes = append(sizes, len(dv.Events))
			}
			if !slices.Equal(sizes, tc.sizes) {
				t.Errorf("POST sizes = %v, want %v", sizes, tc.sizes)
			}
			if got := rcv.eventNames(); !slices.Equal(got, want) {
				t.Errorf("order = %v, want %v", got, want)
			}
		})
	}
}

// TestEventTypes: a URL with event_types gets only those; none means all; a URL listed
// twice for one app gets each event once.
func TestEventTypes(t *testing.T) {
	for _, tc := range []struct {
		name  string
		types []string
		want  []string
	}{
		{"empty means all", nil, []string{"channel_occupied", "member_added", "toolmark_confirmed"}},
		{"filter", []string{"member_added", "toolmark_confirmed"}, []string{"member_added", "toolmark_confirmed"}},
		{"no match", []string{"cache_miss"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rcv := newReceiver(t, nil)
			d := start(t, testOptions(&syncBuffer{}), app("1", "k", "s", hook(rcv.srv.URL, tc.types...)))
			for _, name := range []string{"channel_occupied", "member_added", "toolmark_confirmed"} {
				d.Emit("1", Event{"name": name})
			}
			testutil.WaitFor(t, "settled", settled(d))
			if got := rcv.eventNames(); !slices.Equal(got, tc.want) {
				t.Errorf("delivered %v, want %v", got, tc.want)
			}
		})
	}

	t.Run("same url twice is one route", func(t *testing.T) {
		rcv := newReceiver(t, nil)
		d := start(t, testOptions(&syncBuffer{}), app("1", "k", "s",
			hook(rcv.srv.URL, "member_added"), hook(rcv.srv.URL, "member_added", "member_removed")))
		d.Emit("1", Event{"name": "member_added"})
		d.Emit("1", Event{"name": "member_removed"})
		d.Emit("1", Event{"name": "channel_vacated"})
		testutil.WaitFor(t, "settled", settled(d))
		if got, want := rcv.eventNames(), []string{"member_added", "member_removed"}; !slices.Equal(got, want) {
			t.Errorf("delivered %v, want %v", got, want)
		}
	})
}

// TestRetry: non-2xx answers and refused connections are retried with the identical body
// until a 2xx.
func TestRetry(t *testing.T) {
	for _, tc := range []struct {
		name     string
		status   func(i int) int
		failures int
	}{
		{"500 twice then ok", func(i int) int { return map[bool]int{true: 500, false: 200}[i < 2] }, 2},
		{"503 then 204", func(i int) int { return map[bool]int{true: 503, false: 204}[i < 1] }, 1},
		{"redirect is a failure", func(i int) int { return map[bool]int{true: 302, false: 200}[i < 1] }, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rcv := newReceiver(t, tc.status)
			opts := testOptions(&syncBuffer{})
			d := start(t, opts, app("1", "k", "s", hook(rcv.srv.URL)))
			d.Emit("1", ev("member_added", "a"))
			testutil.WaitFor(t, "delivered", func() bool { return d.Stats().Sent == 1 })
			// A wrong retry after the 2xx would wait a backoff first: watch for several of them.
			time.Sleep(noRetryWindow(opts))

			all := rcv.deliveries()
			if len(all) != tc.failures+1 {
				t.Fatalf("attempts = %d, want %d", len(all), tc.failures+1)
			}
			for i, dv := range all[1:] {
				if string(dv.Body) != string(all[0].Body) ||
					dv.Header.Get("X-Pusher-Signature") != all[0].Header.Get("X-Pusher-Signature") {
					t.Errorf("attempt %d differs from the first", i+2)
				}
			}
			if s := d.Stats(); s.Failed != uint64(tc.failures) || s.Retried != uint64(tc.failures) || s.Dropped != 0 || s.Pending != 0 {
				t.Errorf("stats = %+v", s)
			}
		})
	}

	t.Run("connection refused then listening", func(t *testing.T) {
		addr := testutil.FreeAddr(t)

		d := start(t, testOptions(&syncBuffer{}), app("1", "k", "s", hook("http://"+addr+"/hook")))
		d.Emit("1", ev("member_added", "a"))
		testutil.WaitFor(t, "two refused attempts", func() bool { return d.Stats().Failed >= 2 })

		l2, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("cannot listen again on %s: %v", addr, err) // a skip would hide the case
		}
		rcv := &receiver{t: t, arrived: make(chan struct{}, 100)}
		rcv.srv = httptest.NewUnstartedServer(http.HandlerFunc(rcv.serve))
		rcv.srv.Listener.Close()
		rcv.srv.Listener = l2
		rcv.srv.Start()
		t.Cleanup(rcv.srv.Close)

		testutil.WaitFor(t, "delivered", func() bool { return d.Stats().Sent == 1 })
		if got := rcv.eventNames(); !slices.Equal(got, []string{"a"}) {
			t.Errorf("delivered %v", got)
		}
	})
}

// TestGiveUp: a receiver that never answers 2xx is retried for RetryFor, then the batch is
// dropped with an error log, and the next batch is tried on its own.
func TestGiveUp(t *testing.T) {
	var healthy atomic.Bool
	rcv := newReceiver(t, func(int) int {
		if healthy.Load() {
			return 200
		}
		return 500
	})
	logs := &syncBuffer{}
	opts := testOptions(logs)
	// A slow log sink: the give-up line must be written before Dropped moves, so a reader
	// that waits for the counter finds it.
	opts.Logger = slog.New(slog.NewJSONHandler(slowWriter{logs, 30 * time.Millisecond}, nil))
	opts.RetryFor = 150 * time.Millisecond
	opts.FirstRetry = 10 * time.Millisecond
	d := start(t, opts, app("1", "k", "top-secret-value", hook(rcv.srv.URL+"/hook?token=query-secret")))

	began := time.Now()
	d.Emit("1", ev("member_added", "lost"))
	testutil.WaitFor(t, "dropped", func() bool { return d.Stats().Dropped == 1 })
	if el := time.Since(began); el < opts.RetryFor {
		t.Errorf("gave up after %v, before RetryFor %v", el, opts.RetryFor)
	}
	s := d.Stats()
	if s.Failed < 3 || s.Sent != 0 || s.Pending != 0 {
		t.Errorf("stats = %+v", s)
	}
	if !strings.Contains(logs.String(), `"level":"ERROR","msg":"webhook batch dropped: retry period exhausted"`) {
		t.Errorf("no give-up error log:\n%s", logs)
	}

	healthy.Store(true)
	d.Emit("1", ev("member_added", "next"))
	testutil.WaitFor(t, "next delivered", func() bool { return d.Stats().Sent == 1 })
	time.Sleep(noRetryWindow(opts)) // a dropped batch retried anyway would show up here
	if got := rcv.eventNames(); !slices.Equal(got, []string{"next"}) {
		t.Errorf("delivered %v", got)
	}
	// Nothing sensitive in the logs: no secret, no query string, no event body.
	for _, bad := range []string{"top-secret-value", "query-secret", `"lost"`, "private-x"} {
		if strings.Contains(logs.String(), bad) {
			t.Errorf("logs contain %q:\n%s", bad, logs)
		}
	}
}

// TestBackoff: exponential from FirstRetry with jitter in [d/2, d], capped at MaxBackoff,
// and the first retry always under 2s.
func TestBackoff(t *testing.T) {
	for _, tc := range []struct {
		in, lo, hi time.Duration
	}{
		{time.Second, 500 * time.Millisecond, time.Second},
		{10 * time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond},
		{MaxBackoff, MaxBackoff / 2, MaxBackoff},
		{1, 1, 1},
	} {
		for range 200 {
			if got := jitter(tc.in); got < tc.lo || got > tc.hi {
				t.Fatalf("jitter(%v) = %v, want in [%v, %v]", tc.in, got, tc.lo, tc.hi)
			}
		}
	}
	for _, tc := range []struct {
		first, want time.Duration
	}{
		{0, DefaultFirstRetry},
		{-time.Second, DefaultFirstRetry},
		{1999 * time.Millisecond, 1999 * time.Millisecond},
		{2 * time.Second, DefaultFirstRetry},
		{time.Minute, DefaultFirstRetry},
	} {
		d := New(Options{FirstRetry: tc.first, Logger: testOptions(&syncBuffer{}).Logger})
		if d.firstRetry != tc.want {
			t.Errorf("FirstRetry %v -> %v, want %v", tc.first, d.firstRetry, tc.want)
		}
	}
}

// TestOverflow: a full outbox drops its oldest events, counts and logs them, and delivers
// the newest in order.
func TestOverflow(t *testing.T) {
	rcv := newReceiver(t, nil)
	logs := &syncBuffer{}
	opts := testOptions(logs)
	opts.MaxBatch = 1
	opts.OutboxLimit = 3
	d := start(t, opts, app("1", "k", "s", hook(rcv.srv.URL)))

	rcv.hold()
	d.Emit("1", ev("client_event", "0"))
	<-rcv.arrived // "0" is in flight; the queue is empty

	for i := 1; i <= 6; i++ {
		d.Emit("1", ev("client_event", fmt.Sprint(i)))
	}
	if s := d.Stats(); s.Dropped != 3 || s.Pending != 4 {
		t.Errorf("while blocked: stats = %+v, want Dropped 3 Pending 4", s)
	}
	rcv.unblock()
	testutil.WaitFor(t, "settled", settled(d))
	if got, want := rcv.eventNames(), []string{"0", "4", "5", "6"}; !slices.Equal(got, want) {
		t.Errorf("delivered %v, want %v", got, want)
	}
	if n := strings.Count(logs.String(), "webhook outbox full"); n != 1 {
		t.Errorf("overflow logged %d times, want 1 (rate-limited):\n%s", n, logs)
	}
}

// TestIsolation: apps never see each other's events, each is signed with its own secret,
// and a blocked receiver holds up neither another app nor another URL of the same app.
func TestIsolation(t *testing.T) {
	a := newReceiver(t, nil)
	a2 := newReceiver(t, nil)
	b := newReceiver(t, nil)
	slow := newReceiver(t, nil)
	d := start(t, testOptions(&syncBuffer{}),
		app("A", "key-a", "secret-a", hook(a.srv.URL), hook(a2.srv.URL), hook(slow.srv.URL)),
		app("B", "key-b", "secret-b", hook(b.srv.URL)),
	)
	slow.hold()
	for i := range 3 {
		d.Emit("A", ev("client_event", fmt.Sprint("a", i)))
		d.Emit("B", ev("client_event", fmt.Sprint("b", i)))
	}
	d.Emit("C", ev("client_event", "unknown app"))

	want := map[*receiver][]string{a: {"a0", "a1", "a2"}, a2: {"a0", "a1", "a2"}, b: {"b0", "b1", "b2"}}
	for r, names := range want {
		testutil.WaitFor(t, "fast receivers", func() bool { return len(r.eventNames()) == len(names) })
	}
	for r, names := range want {
		if got := r.eventNames(); !slices.Equal(got, names) {
			t.Errorf("receiver got %v, want %v", got, names)
		}
	}
	for _, tc := range []struct {
		r           *receiver
		key, secret string
	}{{a, "key-a", "secret-a"}, {a2, "key-a", "secret-a"}, {b, "key-b", "secret-b"}} {
		for _, dv := range tc.r.deliveries() {
			if dv.Header.Get("X-Pusher-Key") != tc.key || dv.Header.Get("X-Pusher-Signature") != hmacHex(tc.secret, dv.Body) {
				t.Errorf("delivery for %s not signed with its own credentials", tc.key)
			}
		}
	}
	if d.Stats().Pending == 0 {
		t.Error("slow receiver's events should still be pending")
	}
	slow.unblock()
	testutil.WaitFor(t, "slow receiver", func() bool { return len(slow.eventNames()) == 3 })
}

// TestClose: Close sends what is queued without waiting for the batch window, refuses new
// events, and when its context ends it abandons a dead receiver and says so.
func TestClose(t *testing.T) {
	t.Run("flushes", func(t *testing.T) {
		rcv := newReceiver(t, nil)
		opts := testOptions(&syncBuffer{})
		opts.BatchWindow = time.Hour
		d := New(opts)
		d.SetApps(appsOf(app("1", "k", "s", hook(rcv.srv.URL))))
		d.Emit("1", ev("member_added", "a"))
		d.Emit("1", ev("member_added", "b"))

		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := d.Close(ctx); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if got := rcv.eventNames(); !slices.Equal(got, []string{"a", "b"}) {
			t.Errorf("delivered %v", got)
		}
		d.Emit("1", ev("member_added", "late"))
		if s := d.Stats(); s.Sent != 2 || s.Dropped != 1 || s.Pending != 0 {
			t.Errorf("stats = %+v", s)
		}
		if err := d.Close(ctx); err != nil {
			t.Errorf("second Close: %v", err)
		}
	})

	t.Run("deadline abandons dead receiver", func(t *testing.T) {
		rcv := newReceiver(t, func(int) int { return 500 })
		opts := testOptions(&syncBuffer{})
		opts.FirstRetry = time.Second // Close must not wait for the backoff
		opts.MaxBatch = 1
		d := New(opts)
		d.SetApps(appsOf(app("1", "k", "s", hook(rcv.srv.URL))))
		d.Emit("1", ev("member_added", "a"))
		d.Emit("1", ev("member_added", "b"))
		testutil.WaitFor(t, "first failure", func() bool { return d.Stats().Failed >= 1 })

		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		began := time.Now()
		err := d.Close(ctx)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Close = %v, want DeadlineExceeded", err)
		}
		if el := time.Since(began); el > 900*time.Millisecond {
			t.Errorf("Close took %v", el)
		}
		if s := d.Stats(); s.Dropped != 2 || s.Pending != 0 || s.Sent != 0 {
			t.Errorf("stats = %+v", s)
		}
	})

	t.Run("deadline cancels a hung request", func(t *testing.T) {
		rcv := newReceiver(t, nil)
		rcv.hold()
		d := New(testOptions(&syncBuffer{}))
		d.SetApps(appsOf(app("1", "k", "s", hook(rcv.srv.URL))))
		d.Emit("1", ev("member_added", "a"))
		<-rcv.arrived
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		if err := d.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Close = %v", err)
		}
		if s := d.Stats(); s.Dropped != 1 || s.Pending != 0 {
			t.Errorf("stats = %+v", s)
		}
	})
}

// TestSetApps: reloads re-route new events, keep queues, and apply a rotated secret.
func TestSetApps(t *testing.T) {
	old := newReceiver(t, nil)
	cur := newReceiver(t, nil)
	logs := &syncBuffer{}
	d := start(t, testOptions(logs), app("1", "k", "s1", hook(old.srv.URL)))

	d.Emit("1", ev("member_added", "a"))
	testutil.WaitFor(t, "a", func() bool { return len(old.eventNames()) == 1 })

	d.SetApps(appsOf(app("1", "k2", "s2", hook(cur.srv.URL), hook("ftp://nope"), hook("::bad"))))
	d.Emit("1", ev("member_added", "b"))
	testutil.WaitFor(t, "b", func() bool { return len(cur.eventNames()) == 1 })
	if got := old.eventNames(); !slices.Equal(got, []string{"a"}) {
		t.Errorf("removed url got %v", got)
	}
	dv := cur.deliveries()[0]
	if dv.Header.Get("X-Pusher-Key") != "k2" || dv.Header.Get("X-Pusher-Signature") != hmacHex("s2", dv.Body) {
		t.Error("not signed with the new credentials")
	}
	if n := strings.Count(logs.String(), "webhook url skipped"); n != 2 {
		t.Errorf("invalid urls logged %d times, want 2", n)
	}
	// The removed outbox is forgotten by a reload once its goroutine has finished.
	testutil.WaitFor(t, "removed outbox forgotten", func() bool {
		d.SetApps(appsOf(app("1", "k2", "s2", hook(cur.srv.URL))))
		d.mu.RLock()
		defer d.mu.RUnlock()
		return len(d.outboxes) == 1
	})
}

// TestInvalidEvent: an event without a string name is dropped and counted, not sent.
func TestInvalidEvent(t *testing.T) {
	rcv := newReceiver(t, nil)
	d := start(t, testOptions(&syncBuffer{}), app("1", "k", "s", hook(rcv.srv.URL)))
	d.Emit("1", Event{"channel": "x"})
	d.Emit("1", Event{"name": 42})
	d.Emit("1", Event{"name": "client_event", "data": make(chan int)})
	if s := d.Stats(); s.Dropped != 3 || s.Pending != 0 {
		t.Errorf("stats = %+v", s)
	}
}

// TestEmitCopies: the caller may change its map once Emit returns.
func TestEmitCopies(t *testing.T) {
	rcv := newReceiver(t, nil)
	opts := testOptions(&syncBuffer{})
	opts.BatchWindow = 20 * time.Millisecond
	d := start(t, opts, app("1", "k", "s", hook(rcv.srv.URL)))
	e := ev("member_added", "before")
	d.Emit("1", e)
	e["n"] = "after"
	testutil.WaitFor(t, "settled", settled(d))
	if got := rcv.eventNames(); !slices.Equal(got, []string{"before"}) {
		t.Errorf("delivered %v", got)
	}
}

// noRetryWindow is how long a test watches for a retry that must not happen: longer than
// the first backoffs a retry would wait (FirstRetry, then double, with jitter), so a wrong
// retry cannot slip past it.
func noRetryWindow(o Options) time.Duration {
	w := 8 * o.FirstRetry // FirstRetry + 2x + 4x < 8x
	if w < 50*time.Millisecond {
		w = 50 * time.Millisecond
	}
	return w
}

// slowWriter delays every error line, as a busy log pipe does.
type slowWriter struct {
	w     io.Writer
	delay time.Duration
}

func (s slowWriter) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte(`"level":"ERROR"`)) {
		time.Sleep(s.delay)
	}
	return s.w.Write(p)
}
