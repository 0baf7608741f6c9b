package ws

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gorilla/websocket"
)

// writeTimeout bounds one batched write; a peer that does not drain its socket for this
// long is treated as gone.
const writeTimeout = 10 * time.Second

// closeGrace is how long a closing connection waits for the peer's close frame.
const closeGrace = 2 * time.Second

// TestHookPartialWrite, set only by tests (of this package and the protocol's), runs after
// a non-blocking write left a remainder and before the writer takes the connection's lock
// again: it holds open the window in which a barrier or a close can interleave with a
// partial write.
var TestHookPartialWrite func()

// Cause says why the transport ended a connection; the protocol maps it to its own close
// reasons for logs and metrics. The first cause recorded wins.
type Cause uint8

const (
	CauseLocal       Cause = iota // the Session called Close or Abort
	CausePeerGone                 // end of stream, a reset, or the peer's close frame
	CauseProtocol                 // an RFC 6455 violation (closed 1002)
	CauseTooBig                   // a message over the read limit (closed 1009)
	CauseInvalidUTF8              // a text message that is not UTF-8 (closed 1007)
	CauseOverflow                 // the write queue passed its byte bound (dropped)
	CauseWriteError               // a write failed or timed out (dropped)
	CauseHandshake                // the 101 could not be written (OnOpen never ran)
)

// Conn is one upgraded client socket. Its reader (a poller or the fallback's read loop)
// hands frames to the Session; any goroutine may queue frames (WritePreframed), hold them
// behind a Barrier, or Close. Writes bypass gorilla's writer: frames are built once per
// broadcast and several queued frames leave in one writev, so the hot path costs one
// syscall per batch and no allocation per delivery.
type Conn struct {
	srv     *Server
	session Session
	limit   int // read limit of a data message, bytes (<= 0: none)
	ws      *websocket.Conn
	netConn net.Conn
	raw     syscall.RawConn // plain TCP: written by the flusher; nil (TLS): slow path only
	fl      *flusher
	// deflater is set when the handshake negotiated permessage-deflate (deflate_offer.go).
	deflater *Deflater

	mu          sync.Mutex
	queue       net.Buffers // whole frames waiting for a writer, in order
	spare       net.Buffers // a written batch's backing array, reused
	barriers    []*Barrier  // open barriers and released ones behind an open one
	queuedBytes int         // bytes in queue
	heldBytes   int         // bytes held by barriers
	unsentBytes int         // remainder of a partial write, owned by the writer
	maxBytes    int
	writing     bool // a writer (flusher pass or slow-path goroutine) owns the socket
	scheduled   bool // on the flusher's dirty list
	closing     bool
	closed      bool
	causeSet    bool
	cause       Cause
	flushed     chan struct{} // closed once the socket is finished (close frame sent or aborted)

	// Read by a poller (plain TCP on Linux) instead of readLoop: see poller_linux.go.
	polled atomic.Bool // registered with a poller: only the poller may close the fd
	fd     int32       // the socket's fd while polled (the poller's key)
	rd     frameReader // frame parser state, owned by the poller

	fdc fdConn // netConn and raw of a socket the fast listener upgraded (accept_linux.go)
}

// RemoteAddr is the peer's address (empty for a socket the fast path upgraded).
func (c *Conn) RemoteAddr() net.Addr { return c.netConn.RemoteAddr() }

// errNoRawSocket is Control's answer for a connection without a plain TCP socket (TLS).
var errNoRawSocket = errors.New("ws: connection has no raw socket")

// Control runs fn with the socket's descriptor (socket options); plain TCP only.
func (c *Conn) Control(fn func(fd uintptr)) error {
	if c.raw == nil {
		return errNoRawSocket
	}
	return c.raw.Control(fn)
}

// Closing reports whether the connection is ending (work for it may be skipped).
func (c *Conn) Closing() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closing || c.closed
}

// Buffered is how many bytes wait for this connection: queued, held behind barriers and
// the remainder of a partial write.
func (c *Conn) Buffered() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.queuedBytes + c.heldBytes + c.unsentBytes
}

// setCauseLocked records why the connection ends unless a cause was recorded already.
func (c *Conn) setCauseLocked(cause Cause) {
	if !c.causeSet {
		c.cause, c.causeSet = cause, true
	}
}

// WritePreframed queues a complete frame without blocking and reports whether it was
// taken. A client whose queue would pass the byte bound is dropped instead
// (CauseOverflow): one slow reader never slows a broadcast. While a barrier is open the
// frame waits behind it (see Hold). frame is not copied: the same bytes may be queued on
// every subscriber and must not change.
func (c *Conn) WritePreframed(frame []byte) bool {
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		return false
	}
	if c.queuedBytes+c.heldBytes+c.unsentBytes+len(frame) > c.maxBytes {
		c.mu.Unlock()
		c.abort(CauseOverflow)
		return false
	}
	if n := len(c.barriers); n > 0 {
		b := c.barriers[n-1]
		b.after = append(b.after, frame)
		c.heldBytes += len(frame)
		c.mu.Unlock()
		return true
	}
	c.queue = append(c.queue, frame)
	c.queuedBytes += len(frame)
	k := c.kickLocked()
	c.mu.Unlock()
	c.doKick(k)
	return true
}

// WriteText frames payload as one text message and queues it (WritePreframed).
func (c *Conn) WriteText(payload []byte) bool { return c.WritePreframed(TextFrame(payload)) }

// kick says who must write next after frames were queued.
type kick uint8

const (
	kickNone      kick = iota
	kickFlusher        // put on the flusher's dirty list (plain TCP)
	kickGoroutine      // start the blocking writer goroutine (TLS, or a full socket)
)

// kickLocked decides, under c.mu, whether a writer must be started; nothing is started
// while one is already writing or scheduled.
func (c *Conn) kickLocked() kick {
	if c.writing || c.scheduled || c.closed {
		return kickNone
	}
	if len(c.queue) == 0 && !c.closing {
		return kickNone
	}
	if c.raw != nil {
		c.scheduled = true
		return kickFlusher
	}
	c.writing = true
	return kickGoroutine
}

func (c *Conn) doKick(k kick) {
	switch k {
	case kickFlusher:
		c.fl.schedule(c)
	case kickGoroutine:
		go c.writeLoop(nil)
	}
}

// takeBatchLocked hands the whole queue to a writer.
func (c *Conn) takeBatchLocked() net.Buffers {
	batch := c.queue
	c.queue, c.spare = c.spare[:0], nil
	c.queuedBytes = 0
	return batch
}

// recycleLocked keeps a written batch's backing array for the next one.
func (c *Conn) recycleLocked(orig net.Buffers) {
	if cap(orig) <= 1024 {
		c.spare = orig[:0]
	}
}

// flush is the fast path, run by the connection's flusher: one non-blocking writev of
// everything queued. What the socket does not take stays with the writer (the slow path
// goroutine gets it as its first batch); it never goes back into the queue, which others
// may have appended to meanwhile.
func (c *Conn) flush(f *flusher) {
	c.mu.Lock()
	c.scheduled = false
	if c.writing || c.closed {
		c.mu.Unlock()
		return
	}
	if len(c.queue) == 0 {
		finish := c.closing
		if finish {
			c.closed = true
		}
		c.mu.Unlock()
		if finish {
			c.finishClose()
		}
		return
	}
	batch := c.takeBatchLocked()
	c.writing = true
	c.mu.Unlock()

	orig := batch
	ownAdd(&f.stats.frames, uint64(len(batch)))
	rest, err := f.writev(c.raw, batch)
	if err != nil {
		clear(orig)
		c.abort(CauseWriteError)
		return
	}
	if rest != nil {
		if TestHookPartialWrite != nil {
			TestHookPartialWrite()
		}
		// The socket is full: a blocking goroutine writes the rest, then the queue.
		restCopy := append(net.Buffers(nil), rest...)
		n := 0
		for _, b := range restCopy {
			n += len(b)
		}
		clear(orig)
		c.mu.Lock()
		c.unsentBytes = n
		c.mu.Unlock()
		go c.writeLoop(restCopy) // c.writing stays true: the slow path owns the socket now
		return
	}
	clear(orig)
	c.mu.Lock()
	c.recycleLocked(orig)
	c.writing = false
	k := c.kickLocked()
	c.mu.Unlock()
	c.doKick(k)
}

// writeLoop is the slow path: a goroutine with blocking writes that runs only while a TLS
// connection has something queued or a plain socket's buffer is full. It writes first
// (the remainder of a partial write) and then the whole queue at once per pass.
func (c *Conn) writeLoop(first net.Buffers) {
	if len(first) > 0 {
		_ = c.netConn.SetWriteDeadline(time.Now().Add(writeTimeout))
		_, err := first.WriteTo(c.netConn)
		c.mu.Lock()
		c.unsentBytes = 0
		c.mu.Unlock()
		if err != nil {
			c.abort(CauseWriteError)
			return
		}
	}
	for {
		c.mu.Lock()
		if len(c.queue) == 0 || c.closed {
			c.writing = false
			finish := c.closing && !c.closed && len(c.queue) == 0
			if finish {
				c.closed = true
			}
			c.mu.Unlock()
			if c.raw != nil { // the flusher's non-blocking writes must not see this deadline
				_ = c.netConn.SetWriteDeadline(time.Time{})
			}
			if finish {
				c.finishClose()
			}
			return
		}
		batch := c.takeBatchLocked()
		c.mu.Unlock()

		if c.fl != nil {
			c.fl.stats.blocking.Add(1)
			c.fl.stats.blockingFrames.Add(uint64(len(batch)))
		}
		orig := batch // WriteTo consumes batch; orig keeps the backing array for reuse
		_ = c.netConn.SetWriteDeadline(time.Now().Add(writeTimeout))
		_, err := batch.WriteTo(c.netConn)
		clear(orig) // drop references so shared frames can be freed
		c.mu.Lock()
		c.recycleLocked(orig)
		c.mu.Unlock()
		if err != nil {
			c.abort(CauseWriteError)
			return
		}
	}
}

// Close ends the connection with a close handshake: last (pre-framed bytes, the
// protocol's last word; may be nil) and a close frame with code and text go out after what
// is already queued, frames held by an open barrier are dropped, and the socket is shut
// once the peer answers or the grace passes. Safe from any goroutine and idempotent.
func (c *Conn) Close(code int, text string, last []byte) {
	c.closeWith(CauseLocal, code, text, last)
}

func (c *Conn) closeWith(cause Cause, code int, text string, last []byte) {
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		return
	}
	c.closing = true
	c.setCauseLocked(cause)
	c.dropBarriersLocked()
	if last != nil {
		c.queue = append(c.queue, last)
	}
	c.queue = append(c.queue, CloseFrame(code, text))
	k := c.kickLocked()
	c.mu.Unlock()
	c.doKick(k)
}

// Abort drops the socket at once without a close handshake.
func (c *Conn) Abort() { c.abort(CauseLocal) }

// abort drops the socket at once without a close handshake (slow or broken peer).
func (c *Conn) abort(cause Cause) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	// The first cause recorded wins: the cleanup's abort must not overwrite the one the
	// reader found (a message too big) in logs and metrics.
	c.setCauseLocked(cause)
	c.closing = true
	c.closed = true
	c.dropBarriersLocked()
	clear(c.queue)
	c.queue = nil
	c.queuedBytes = 0
	c.mu.Unlock()
	if c.polled.Load() {
		c.dropPolled() // the poller closes the fd once it has deregistered it
	} else {
		_ = c.netConn.Close()
	}
	close(c.flushed)
}

// finishClose half-closes after the close frame so the peer reads everything, and lets
// the reader end on the peer's reply or after closeGrace.
func (c *Conn) finishClose() {
	defer close(c.flushed)
	if tc, ok := c.netConn.(interface{ CloseWrite() error }); ok {
		_ = tc.CloseWrite()
		if c.polled.Load() {
			// A poller never blocks in read, so a deadline would not fire: end reading
			// after the grace instead (a no-op if the socket is gone by then).
			time.AfterFunc(closeGrace, c.endPolledRead)
			return
		}
		_ = c.netConn.SetReadDeadline(time.Now().Add(closeGrace))
		return
	}
	_ = c.netConn.Close()
}

// mustAwaitFlush reports whether cleanup would wait for a queued close frame.
func (c *Conn) mustAwaitFlush() bool {
	c.mu.Lock()
	closing := c.closing
	c.mu.Unlock()
	if !closing {
		return false
	}
	select {
	case <-c.flushed:
		return false
	default:
		return true
	}
}

// cleanup ends the connection once its reader has ended and tells the Session why.
func (c *Conn) cleanup() {
	c.mu.Lock()
	closing := c.closing
	c.mu.Unlock()
	if closing { // let the close frame already queued reach the peer
		select {
		case <-c.flushed:
		case <-time.After(closeGrace):
		}
	}
	c.abort(CausePeerGone)
	_ = c.netConn.Close() // abort is a no-op after a graceful close that only half-closed
	c.mu.Lock()
	cause := c.cause
	c.mu.Unlock()
	c.session.OnClose(cause)
}

// frames is Conn seen as the frameHandler of its polled reader: every frame goes to the
// Session; a ping is answered in kind and a close frame with a close of our own.
type frames Conn

func (f *frames) onFrame(op byte, payload []byte) bool {
	c := (*Conn)(f)
	c.session.OnFrame(op, payload)
	switch op {
	case OpPing:
		c.WritePreframed(AppendFrame(nil, OpPong, payload))
	case OpClose:
		c.closeWith(CausePeerGone, CloseNormal, "", nil) // a no-op when we closed first
		return false
	}
	return true
}

// protocolError answers a violation found by the frame parser: a close frame with the
// code (1002, 1007 for text that is not UTF-8, 1009 for an oversized message), then the
// socket is dropped once the peer answers or closeGrace passes.
func (c *Conn) protocolError(code int) {
	switch code {
	case CloseTooBig:
		c.closeWith(CauseTooBig, code, closeTooBigText, nil)
	case CloseInvalidPayload:
		c.closeWith(CauseInvalidUTF8, code, closeInvalidUTF8Text, nil)
	default:
		c.closeWith(CauseProtocol, CloseProtocolError, "", nil)
	}
}

// The texts sent with the transport's own close codes.
const (
	closeTooBigText      = "Message too big"
	closeInvalidUTF8Text = "Text message is not valid UTF-8"
)
