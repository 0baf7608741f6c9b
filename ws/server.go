package ws

import (
	"fmt"
	"log/slog"
	"math"
	mrand "math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// DefaultMaxQueueBytes bounds what may wait for one slow client before it is cut off.
const DefaultMaxQueueBytes = 1 << 20

// Request is what a Handler decides an upgrade on. The slices are only valid during
// Accept (on the fast path they point into the poller's buffer).
type Request struct {
	Name   []byte // the path's last segment (after the fast path's prefix; the route's parameter)
	Query  []byte // raw query without '?'
	Origin []byte // the Origin header, nil if none
	// Tentative is set on the fast path: a refusal is not final there, the connection is
	// handed to the portable path (net/http), which asks again and sends Refusal. A
	// handler counts and logs refusals only when Tentative is false.
	Tentative bool
}

// Decision is a Handler's answer to an upgrade.
type Decision struct {
	// Session receives the connection's frames; nil refuses the connection.
	Session Session
	// Greeting is pre-framed bytes sent in the same write as the 101 response: the
	// buffer Accept was given with them appended (so the fast path copies nothing).
	Greeting []byte
	// MaxMessageSize bounds one data message (<= 0: no bound); a bigger one closes 1009.
	MaxMessageSize int
	// Refusal is pre-framed bytes sent after the 101 of a refused connection (the
	// protocol's error and close frame); the server then waits briefly for the peer's
	// close and drops the socket.
	Refusal []byte
}

// Handler is the protocol's side of the upgrade. Accept runs on a poller goroutine (fast
// path) or net/http's (portable path) and must not block.
type Handler interface {
	Accept(req *Request, greeting []byte) Decision
}

// Session is the protocol's side of one connection. Its methods run on the goroutine
// that reads the socket (a poller serving many sockets) and must never block.
type Session interface {
	// OnOpen is called once the 101 and the greeting were written, before any frame is
	// read. Returning false drops the socket, and OnClose is not called.
	OnOpen(c *Conn) bool
	// OnFrame is called for every frame read: a data message (OpText, validated UTF-8, or
	// OpBinary) whole once its last fragment arrived, OpContinuation with a nil payload
	// for a non-final fragment (on the fast path), and each control frame. The transport
	// answers a ping with a pong and a close frame with a close itself, after OnFrame.
	// payload is only valid during the call.
	OnFrame(op byte, payload []byte)
	// OnClose is called once when the connection has ended, with the first cause
	// recorded; also, without OnOpen, when the handshake's write failed (CauseHandshake).
	OnClose(cause Cause)
}

// Options configures a Server.
type Options struct {
	Handler       Handler
	Logger        *slog.Logger
	MaxQueueBytes int // per-connection outbound bound (default DefaultMaxQueueBytes)
	// CoalesceWindow is the flushers' adaptive coalescing window (server.write_coalesce_ms;
	// 0 = off): after a busy round the next one starts no earlier than this after it began.
	CoalesceWindow time.Duration
	// Compression is permessage-deflate (server.compression; off when not Enabled).
	Compression Compression
	// IOUring (server.io_uring; Linux) makes each flusher submit a round's writes to all
	// its sockets in one io_uring_enter instead of a writev each, once a start-up probe
	// proved the kernel completes a SENDMSG (ProbeIOUring); else writev is used. Either
	// way one log line names the path (WritePath). The zero value is IOUringOff.
	IOUring IOUringMode
}

// IOUringMode is Options.IOUring: whether the flushers write with io_uring, and how loudly
// a kernel that refuses it (old kernel, a seccomp profile such as Docker's default,
// kernel.io_uring_disabled) is reported.
type IOUringMode uint8

const (
	// IOUringOff writes with writev.
	IOUringOff IOUringMode = iota
	// IOUringAuto uses io_uring where the probe passes (server.io_uring absent): a
	// refusal is expected in containers, so the fallback to writev is logged at Info.
	IOUringAuto
	// IOUringOn uses io_uring as asked for (server.io_uring: true): a refusal is logged at
	// Warn, since the operator asked for what the kernel will not do (the server's wiring
	// runs ProbeIOUring first and does not start).
	IOUringOn
)

func (m IOUringMode) String() string {
	switch m {
	case IOUringOff:
		return "off"
	case IOUringAuto:
		return "auto"
	case IOUringOn:
		return "on"
	}
	return fmt.Sprintf("IOUringMode(%d)", uint8(m))
}

// Server accepts WebSocket connections for one Handler: on Linux through epoll pollers
// and the fast upgrade path (FastListener), elsewhere and for TLS through net/http and
// gorilla's upgrader (Upgrade). Its flushers write every connection's queue.
type Server struct {
	handler  Handler
	log      *slog.Logger
	maxQueue int
	upgrader websocket.Upgrader
	// deflater compresses for connections that negotiated permessage-deflate (nil: off);
	// upgraderDeflate is upgrader with gorilla's negotiation on (deflate_offer.go).
	deflater        *Deflater
	upgraderDeflate websocket.Upgrader

	flushers []*flusher
	path     *pathSwitch // the flushers' write path (writepath.go)
	pollers  pollerSet

	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup // flushers and pollers
}

// NewServer starts the flushers; pollers start on first use.
func NewServer(opts Options) *Server {
	s := &Server{handler: opts.Handler, log: opts.Logger, maxQueue: opts.MaxQueueBytes, stop: make(chan struct{})}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.maxQueue <= 0 {
		s.maxQueue = DefaultMaxQueueBytes
	}
	s.upgrader = websocket.Upgrader{
		ReadBufferSize:  512,
		WriteBufferPool: &sync.Pool{},
		CheckOrigin:     func(*http.Request) bool { return true }, // the Handler judges Origin
	}
	s.initDeflate(opts.Compression)
	s.flushers, s.path = newFlushers(s.stop, opts.CoalesceWindow, opts.IOUring, s.log)
	for _, f := range s.flushers {
		s.wg.Add(1)
		go func() { defer s.wg.Done(); f.run() }()
	}
	return s
}

// Stop ends the flushers and pollers; call it once every connection has closed (or been
// aborted). A FastListener keeps handing new connections to net/http until it is closed.
func (s *Server) Stop() {
	s.stopOnce.Do(func() { close(s.stop); s.stopPollers() })
	s.wg.Wait()
}

// newConn builds a connection for an accepted Decision.
func (s *Server) newConn(d *Decision) *Conn {
	return &Conn{
		srv: s, session: d.Session, limit: int32(max(0, min(d.MaxMessageSize, math.MaxInt32))), // 0: no bound
		fl: s.flushers[int(fastrandn(uint32(len(s.flushers))))],
	}
}

// register opens an upgraded connection: both accept paths (the fast path's poller and
// the portable path's Upgrade) end here, with p the poller that will read it (nil: a
// goroutine reads) and inSet whether its socket is in p's epoll set already (the fast
// path's handshake). The reader is fixed first, so whatever the Session does with c in
// OnOpen (publish it to a table that a shutdown sweep aborts) ends it the one way that
// reader notices; only then does reading start. From here on exactly one cleanup, run by
// the reader, closes the socket and calls OnClose.
func (s *Server) register(c *Conn, p *poller, inSet bool) {
	if p != nil {
		c.reader = readerPoller
	}
	if !c.session.OnOpen(c) {
		if inSet {
			p.forget(c)
		}
		_ = c.netConn.Close() // refused: no OnClose
		return
	}
	if p == nil {
		go c.readLoop()
		return
	}
	c.ws = nil // gorilla's Conn and its read buffer are not needed any more
	if !p.add(c, inSet) {
		go c.cleanup() // the socket could not be watched: end it as its reader would
	}
}

func fastrandn(n uint32) uint32 { return mrand.Uint32N(n) }
