// Package httpguard bounds what a client can make the HTTP server hold before it has proved
// anything: how long it may take to send a request body, and how many requests may be in
// that state at once.
//
// net/http's own ReadTimeout cannot be used for this: it also arms the read deadline of the
// connection's background read once the body is consumed, so a long-poll handler (a Toolmark
// call waits up to max_timeout_ms) would have its context cancelled when ReadTimeout passes.
// Instead each request with a body gets a read deadline that is cleared as soon as the body
// has been read to its end, and a request holds a "pending" slot until then (or until its
// handler returns): a body that is rejected unread (an unsigned API request, a page POST
// without its token) frees its slot at once and net/http closes the connection rather than
// drain a large remainder. Over MaxPending, new requests get 503 at once.
package httpguard

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults.
const (
	DefaultMaxPending  = 1024
	DefaultBodyTimeout = 10 * time.Second
)

// Options configure Wrap; zero fields take the defaults.
type Options struct {
	// MaxPending caps requests whose body is not yet read to its end (and whose handler has
	// not returned); requests over it are answered 503.
	MaxPending int
	// BodyTimeout is how long a client may take to send a request body.
	BodyTimeout time.Duration
}

// Guard is the wrapping handler.
type Guard struct {
	next    http.Handler
	max     int64
	timeout time.Duration
	pending atomic.Int64
}

// Wrap guards next. WebSocket upgrades pass untouched: they carry no body and their
// connection outlives the request.
func Wrap(next http.Handler, o Options) *Guard {
	if o.MaxPending <= 0 {
		o.MaxPending = DefaultMaxPending
	}
	if o.BodyTimeout <= 0 {
		o.BodyTimeout = DefaultBodyTimeout
	}
	return &Guard{next: next, max: int64(o.MaxPending), timeout: o.BodyTimeout}
}

// Pending is the number of requests holding a slot now.
func (g *Guard) Pending() int { return int(g.pending.Load()) }

func (g *Guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		g.next.ServeHTTP(w, r)
		return
	}
	if g.pending.Add(1) > g.max {
		g.pending.Add(-1)
		w.Header().Set("Connection", "close")
		w.Header().Set("Retry-After", "1")
		http.Error(w, "Server busy", http.StatusServiceUnavailable)
		return
	}
	s := &slot{g: g}
	// A handler that returns before the end of the body keeps the deadline: net/http may
	// still drain a small remainder, and that must not take longer than the body may.
	defer s.release(false)
	if r.Body != nil && r.Body != http.NoBody {
		if http.NewResponseController(w).SetReadDeadline(time.Now().Add(g.timeout)) == nil {
			s.w = w
		}
		orig := r.Body
		s.ReadCloser = orig
		r.Body = s
		// net/http looks at the body's type after the handler to decide whether to drain an
		// unread remainder before replying (only up to 256 KiB, and never for its own type
		// when more is left): give it back its own.
		defer func() { r.Body = orig }()
	}
	g.next.ServeHTTP(w, r)
}

// slot is one request's pending slot and body deadline, released once. It is also the
// request's body while the handler runs (one allocation per request): reading it to its end
// releases the slot.
type slot struct {
	io.ReadCloser // the request's own body; nil without one
	g             *Guard
	w             http.ResponseWriter // set when the body deadline was armed
	once          sync.Once
}

func (s *slot) release(read bool) {
	s.once.Do(func() {
		s.g.pending.Add(-1)
		if read && s.w != nil {
			// The body is read: whatever the handler waits for now must not hit the deadline.
			_ = http.NewResponseController(s.w).SetReadDeadline(time.Time{})
		}
	})
}

func (s *slot) Read(p []byte) (int, error) {
	n, err := s.ReadCloser.Read(p)
	if err == io.EOF {
		s.release(true)
	}
	return n, err
}
