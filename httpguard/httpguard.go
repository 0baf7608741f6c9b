// Package httpguard bounds what a client can make the HTTP server hold before it has proved
// anything: how long it may take to send a request body, how many requests may be in that
// state at once, and how many of those one client may hold; and it answers every 413 so that
// a client still writing its body reads the answer.
//
// net/http's own ReadTimeout cannot be used for this: it also arms the read deadline of the
// connection's background read once the body is consumed, so a long-poll handler (a Toolmark
// call waits up to max_timeout_ms) would have its context cancelled when ReadTimeout passes.
// Instead each request with a body gets a read deadline that is cleared as soon as the body
// has been read to its end, and a request holds a "pending" slot until then (or until its
// handler returns): a body that is rejected unread (an unsigned API request, a page POST
// without its token) frees its slot at once and net/http closes the connection rather than
// drain a large remainder. Over MaxPending, or over the client's own MaxPendingPerClient,
// new requests with a body get 503 at once. A request without a body holds no slot: it has
// nothing left to send, so a long-lived GET stream (MCP, console) never counts.
//
// A 413 (a body over its route's limit) is answered, then the rest of the body is read and
// discarded, up to DrainLimit bytes (8 MiB) or DrainTimeout (2 s), before the connection closes: closing
// with the client's bytes still arriving would reset the connection, and a client that is
// still writing would lose the answer with it. This is done here, for every route.
package httpguard

import (
	"io"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults.
const (
	DefaultMaxPending  = 1024
	DefaultBodyTimeout = 10 * time.Second
	// DrainLimit and DrainTimeout bound what is read after a 413 so the client reads it.
	DrainLimit   = 8 << 20
	DrainTimeout = 2 * time.Second
)

// Options configure Wrap; zero fields take the defaults.
type Options struct {
	// MaxPending caps requests whose body is not yet read to its end (and whose handler has
	// not returned); requests over it are answered 503.
	MaxPending int
	// MaxPendingPerClient is one client's share of MaxPending (default MaxPending/4, at
	// least 1), so one client with slow bodies cannot hold the others at 503. A quarter, not
	// less: a load generator or a Laravel app behind one address may have many bodies in
	// flight while their handlers' cheap checks (a Redis lookup) run.
	MaxPendingPerClient int
	// BodyTimeout is how long a client may take to send a request body.
	BodyTimeout time.Duration
	// Clients finds a request's client (nil: the peer address; no proxy is trusted).
	Clients *Clients
}

// Guard is the wrapping handler.
type Guard struct {
	next      http.Handler
	max       int
	perClient int
	timeout   time.Duration
	clients   *Clients
	pending   atomic.Int64 // == the sum of byClient, for a lock-free Pending

	mu       sync.Mutex
	byClient map[netip.Addr]int // slots held per client Key; no zero entries
}

// Wrap guards next. WebSocket upgrades pass untouched: they carry no body and their
// connection outlives the request.
func Wrap(next http.Handler, o Options) *Guard {
	if o.MaxPending <= 0 {
		o.MaxPending = DefaultMaxPending
	}
	if o.MaxPendingPerClient <= 0 {
		o.MaxPendingPerClient = max(1, o.MaxPending/4)
	}
	if o.BodyTimeout <= 0 {
		o.BodyTimeout = DefaultBodyTimeout
	}
	return &Guard{next: next, max: o.MaxPending, perClient: min(o.MaxPendingPerClient, o.MaxPending),
		timeout: o.BodyTimeout, clients: o.Clients, byClient: map[netip.Addr]int{}}
}

// Pending is the number of requests holding a slot now.
func (g *Guard) Pending() int { return int(g.pending.Load()) }

func (g *Guard) acquire(key netip.Addr) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := g.byClient[key]
	if int(g.pending.Load()) >= g.max || n >= g.perClient {
		return false
	}
	g.byClient[key] = n + 1
	g.pending.Add(1)
	return true
}

func (g *Guard) releaseKey(key netip.Addr) {
	g.mu.Lock()
	if n := g.byClient[key] - 1; n > 0 {
		g.byClient[key] = n
	} else {
		delete(g.byClient, key)
	}
	g.pending.Add(-1)
	g.mu.Unlock()
}

func hasBody(r *http.Request) bool {
	return r.Body != nil && r.Body != http.NoBody
}

func (g *Guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !hasBody(r) || strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		g.next.ServeHTTP(w, r)
		return
	}
	key := Key(g.clients.Addr(r))
	if !g.acquire(key) {
		w.Header().Set("Connection", "close")
		w.Header().Set("Retry-After", "1")
		http.Error(w, "Server busy", http.StatusServiceUnavailable)
		return
	}
	s := &slot{g: g, key: key}
	s.rw = writer{ResponseWriter: w, s: s}
	// A handler that returns before the end of the body keeps the deadline: net/http may
	// still drain a small remainder, and that must not take longer than the body may.
	defer s.release(false)
	s.deadline = time.Now().Add(g.timeout)
	if http.NewResponseController(w).SetReadDeadline(s.deadline) == nil {
		s.w = w
	}
	orig := r.Body
	s.ReadCloser = orig
	r.Body = s
	g.next.ServeHTTP(&s.rw, r)
	// net/http looks at the body's type after the handler to decide whether to drain an
	// unread remainder before replying (only up to 256 KiB, and never for its own type when
	// more is left): give it back its own.
	r.Body = orig
	s.rw.release(true)
	if s.status == http.StatusRequestEntityTooLarge {
		s.drain(r, orig)
	}
}

// slot is one request's pending slot and body deadline, released once. It is also the
// request's body while the handler runs (one allocation per request): reading it to its end
// releases the slot. Its writer is the handler's ResponseWriter, which notes the status.
type slot struct {
	io.ReadCloser // the request's own body
	g             *Guard
	key           netip.Addr
	w             http.ResponseWriter // set when the body deadline was armed
	rw            writer
	deadline      time.Time
	once          sync.Once
	touched       bool // the handler read from the body
	eof           bool // the body was read to its end
	status        int  // the status the handler wrote
}

func (s *slot) release(read bool) {
	s.once.Do(func() {
		s.g.releaseKey(s.key)
		if read && s.w != nil {
			// The body is read: whatever the handler waits for now must not hit the deadline.
			_ = http.NewResponseController(s.w).SetReadDeadline(time.Time{})
		}
	})
}

func (s *slot) Read(p []byte) (int, error) {
	s.touched = true
	n, err := s.ReadCloser.Read(p)
	if err == io.EOF {
		s.eof = true
		s.release(true)
	}
	return n, err
}

// drain runs after a handler answered 413 with the body not read to its end (HTTP/1 only:
// HTTP/2 ends the stream alone, and a client that waits for 100-continue was never told to
// send). It sends the answer, then reads and discards the rest within the bounds, so the
// close that follows finds no bytes arriving and the client has read its 413.
func (s *slot) drain(r *http.Request, body io.Reader) {
	if s.eof || r.ProtoMajor != 1 || s.w == nil {
		return
	}
	if !s.touched && strings.EqualFold(r.Header.Get("Expect"), "100-continue") {
		return
	}
	rc := http.NewResponseController(s.w)
	_ = rc.EnableFullDuplex()
	if rc.Flush() != nil {
		return
	}
	until := time.Now().Add(DrainTimeout)
	if s.deadline.Before(until) {
		until = s.deadline
	}
	_ = rc.SetReadDeadline(until)
	_, _ = io.CopyN(io.Discard, body, DrainLimit)
}

// writer is the handler's ResponseWriter: it notes the status, and holds a 413's answer
// back until the handler returns, so that it goes out whole, with a Content-Length, before
// the drain (a chunked answer would end only at the close, where a reset can take it).
// Unwrap gives http.ResponseController (used by echo and the MCP SDK) the server's own.
type writer struct {
	http.ResponseWriter
	s    *slot
	held bool   // a 413 whose header is not yet passed on
	buf  []byte // its body so far
}

// maxHeld bounds a held 413 body; a longer one is passed on as it comes.
const maxHeld = 16 << 10

func (w *writer) WriteHeader(code int) {
	if w.s.status == 0 && code >= 200 {
		w.s.status = code
		if code == http.StatusRequestEntityTooLarge && !w.s.eof {
			w.Header().Set("Connection", "close")
			w.held = true
			return
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *writer) Write(p []byte) (int, error) {
	if w.s.status == 0 {
		w.s.status = http.StatusOK
	}
	if w.held {
		if len(w.buf)+len(p) <= maxHeld {
			w.buf = append(w.buf, p...)
			return len(p), nil
		}
		w.release(false)
	}
	return w.ResponseWriter.Write(p)
}

// release passes a held 413 on; whole tells that the handler is done, so its length is known.
func (w *writer) release(whole bool) {
	if !w.held {
		return
	}
	w.held = false
	if whole && w.Header().Get("Content-Length") == "" {
		w.Header().Set("Content-Length", strconv.Itoa(len(w.buf)))
	}
	w.ResponseWriter.WriteHeader(w.s.status)
	if len(w.buf) > 0 {
		_, _ = w.ResponseWriter.Write(w.buf)
	}
	w.buf = nil
}

// Unwrap is for http.ResponseController.
func (w *writer) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush implements http.Flusher for handlers that assert it.
func (w *writer) Flush() {
	w.release(false)
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}
