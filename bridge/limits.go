package bridge

import (
	"sync"
	"time"
)

// Limits are the bridge's abuse bounds. Zero values take the defaults documented per field;
// the defaults are chosen to be invisible to a well-behaved page and agent.
type Limits struct {
	// PageRate is the sustained page messages per second per socket (default 10 = 600/min).
	// The app-side /messages endpoint uses the same bucket size per app/user/conversation.
	PageRate float64
	// PageBurst is the page bucket size (default 60).
	PageBurst int
	// CallRate is the sustained calls+describes per second per app/user/conversation
	// (default 20).
	CallRate float64
	// CallBurst is the call bucket size (default 200, so that MaxInFlight is reachable).
	CallBurst int
	// MaxInFlight bounds the calls waiting per app/user/conversation on this node (default
	// 100). Over it the agent gets 429 {"error":"Too many calls in flight"}, so the agent's
	// HTTP client sees a retryable status rather than a tool result it might show the model.
	MaxInFlight int
	// MaxBody bounds every request body in bytes (default 1 MiB); over it → 413.
	MaxBody int64
	// ManifestTTL is how long a manifest lives after its last write (default 24h).
	ManifestTTL time.Duration
	// ConfirmTTL is how long a confirmId stays bound (default 660s: the page expires
	// confirmations after 600s).
	ConfirmTTL time.Duration
	// LateGrace is how long a call stays known after it is settled (answered or timed out), so
	// that a duplicate or late result is answered 409/410 instead of 404 (default 60 s). The
	// distinction is diagnostic only: a page never retries, and at the deadline it was sent
	// `cancel`, so what still arrives comes within network delays of it. Every call holds a
	// store entry for its whole grace, so grace × call rate is the store's size: 60 s keeps the
	// memory store at ~300,000 tombstones (~30 MB) at 5,000 calls/s, where 5 min held 1.65
	// million full entries and hit the old 1,000,000 cap at ~3,000 calls/s.
	LateGrace time.Duration
}

func (l Limits) withDefaults() Limits {
	if l.PageRate <= 0 {
		l.PageRate = 10
	}
	if l.PageBurst <= 0 {
		l.PageBurst = 60
	}
	if l.CallRate <= 0 {
		l.CallRate = 20
	}
	if l.CallBurst <= 0 {
		l.CallBurst = 200
	}
	if l.MaxInFlight <= 0 {
		l.MaxInFlight = 100
	}
	if l.MaxBody <= 0 {
		l.MaxBody = 1 << 20
	}
	if l.ManifestTTL <= 0 {
		l.ManifestTTL = 24 * time.Hour
	}
	if l.ConfirmTTL <= 0 {
		l.ConfirmTTL = 660 * time.Second
	}
	if l.LateGrace <= 0 {
		l.LateGrace = time.Minute
	}
	return l
}

// limiter is a keyed token bucket. Take and Refund let a handler check the limit after cheap
// validation and give the token back when the message is rejected, so a rejected message
// consumes nothing and a corrected retry is still accepted.
//
// Not golang.org/x/time/rate: its only way back is Reservation.Cancel, which restores less
// than the whole token once a later reservation was made (the refund would leak tokens
// under exactly the concurrent load it must not), and ReserveN(-1) is not capped at burst.
//
// K is the key type: a socket id or a composite string for page messages, the ConvKey itself for
// calls (no key string built per call).
type limiter[K comparable] struct {
	rate  float64
	burst float64
	now   func() time.Time

	mu      sync.Mutex
	buckets map[K]*bucket
}

type bucket struct {
	tokens float64
	last   time.Time
}

func newLimiter[K comparable](rate float64, burst int, now func() time.Time) *limiter[K] {
	return &limiter[K]{rate: rate, burst: float64(burst), now: now, buckets: map[K]*bucket{}}
}

// Take consumes one token for key; false means over the limit (nothing consumed).
func (l *limiter[K]) Take(key K) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	b := l.buckets[key]
	if b == nil {
		b = &bucket{tokens: l.burst, last: now}
		l.buckets[key] = b
	}
	if el := now.Sub(b.last).Seconds(); el > 0 {
		b.tokens = min(l.burst, b.tokens+el*l.rate)
	}
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// Refund returns a token taken for key.
func (l *limiter[K]) Refund(key K) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if b := l.buckets[key]; b != nil {
		b.tokens = min(l.burst, b.tokens+1)
	}
}

// sweep drops buckets that have refilled completely: such a bucket is identical to a new one,
// so memory stays bounded by the keys active within burst/rate seconds.
func (l *limiter[K]) sweep() {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	for k, b := range l.buckets {
		if b.tokens+now.Sub(b.last).Seconds()*l.rate >= l.burst {
			delete(l.buckets, k)
		}
	}
}

// inflight counts waiting calls per conversation on this node.
type inflight struct {
	max int
	mu  sync.Mutex
	n   map[ConvKey]int
}

func (f *inflight) acquire(k ConvKey) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n[k] >= f.max {
		return false
	}
	f.n[k]++
	return true
}

func (f *inflight) release(k ConvKey) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n[k]--; f.n[k] <= 0 {
		delete(f.n, k)
	}
}
