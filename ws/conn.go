package ws

import (
	"errors"
	"net"
	"sync"
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
//
// Its life is three fields under mu, each with one meaning for the connection's whole
// life (see connState, writerState and readerKind): where it is between open and ended,
// who writes its socket now, and who reads it (fixed before the Session sees it).
type Conn struct {
	srv     *Server // its maxQueue bounds the queue: one copy, not one per connection
	session Session
	ws      *websocket.Conn
	netConn net.Conn
	raw     syscall.RawConn // plain TCP: written by the flusher; nil (TLS): slow path only
	fl      *flusher
	// deflater is set when the handshake negotiated permessage-deflate (deflate_offer.go).
	deflater *Deflater

	mu           sync.Mutex
	queue        net.Buffers // whole frames waiting for a writer, in order
	spare        net.Buffers // a written batch's backing array, reused
	barriers     []*Barrier  // open barriers and released ones behind an open one
	queuedBytes  int         // bytes in queue
	heldBytes    int         // bytes held by barriers
	writingBytes int         // bytes a blocking writer has taken and not yet written (in flight)
	// flushDone is set once the write side is finished (close frame sent, or aborted);
	// flushed, made only by a cleanup that must wait for that (flushedChan), is closed then.
	// An idle connection carries no channel (issue 25).
	flushed chan struct{}

	// The small fields together, so a Conn fits the 352-byte size class (issue 25).
	limit     int32       // read limit of a data message, bytes (<= 0: none)
	fd        int32       // the socket's fd (the poller's key, poller_linux.go), set by register
	reader    readerKind  // set by register before OnOpen, never changed
	state     connState   // mu
	writer    writerState // mu
	cause     Cause       // mu; recorded by the transition out of stateOpen
	flushDone bool        // mu

	// Read by a poller (plain TCP on Linux) instead of readLoop: see poller_linux.go.
	rd frameReader // frame parser state, owned by the poller

	fdc fdConn // netConn and raw of a socket the fast listener upgraded (accept_linux.go)
}

// connState is where a connection is in its life; it only ever moves forward:
//
//	stateOpen ──Close, peer's close, protocol error──▶ stateClosing ──close frame written──▶ stateClosed
//	stateOpen, stateClosing ──Abort, overflow, write error, reader ended──▶ stateClosed
//	stateClosed ──the reader ended, OnClose ran (cleanup)──▶ stateEnded
//
// The cause is recorded by the move out of stateOpen, so the first one wins. Nothing in
// any state closes the descriptor but cleanup, which only the connection's reader runs,
// once: an Abort shuts the socket down and the reader then sees it end.
type connState uint8

const (
	stateOpen    connState = iota // frames are taken and written
	stateClosing                  // the close frame is queued: nothing more is taken; the queue drains
	stateClosed                   // the write side is finished (close frame written, or aborted)
	stateEnded                    // the reader ended and the Session was told (OnClose)
)

// writerState says who owns the socket's write side: nobody, the flusher (the connection
// is on its dirty list), or a writer that took a batch (a flusher pass, or the slow path's
// blocking goroutine). One writer at a time; only the owner takes from the queue.
type writerState uint8

const (
	writerIdle      writerState = iota
	writerScheduled             // on the flusher's dirty list
	writerBusy                  // a flusher pass or the blocking goroutine owns the socket
)

// readerKind is who reads the socket, fixed by register before the Session can publish
// the connection: a poller (plain TCP on Linux) or a goroutine of its own (readLoop: TLS,
// or where epoll is unavailable). It decides how the connection is ended from outside:
// a polled socket is shut down (the poller deregisters it before cleanup closes it, so a
// reused descriptor number is never mistaken for it); a goroutine's is closed.
type readerKind uint8

const (
	readerGoroutine readerKind = iota
	readerPoller
)

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
	return c.state != stateOpen
}

// Buffered is how many bytes wait for this connection: queued, held behind barriers and
// in flight (taken by a writer and not yet written). The byte bound applies to this sum.
func (c *Conn) Buffered() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bufferedLocked()
}

func (c *Conn) bufferedLocked() int { return c.queuedBytes + c.heldBytes + c.writingBytes }

// WritePreframed queues a complete frame without blocking and reports whether it was
// taken. A client whose queue would pass the byte bound is dropped instead
// (CauseOverflow): one slow reader never slows a broadcast. While a barrier is open the
// frame waits behind it (see Hold). frame is not copied: the same bytes may be queued on
// every subscriber and must not change.
func (c *Conn) WritePreframed(frame []byte) bool {
	c.mu.Lock()
	if c.state != stateOpen {
		c.mu.Unlock()
		return false
	}
	if c.bufferedLocked()+len(frame) > c.srv.maxQueue {
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
	if c.writer != writerIdle || c.state >= stateClosed {
		return kickNone
	}
	if len(c.queue) == 0 && c.state != stateClosing {
		return kickNone
	}
	if c.raw != nil {
		c.writer = writerScheduled
		return kickFlusher
	}
	c.writer = writerBusy
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

// takeBatchLocked hands the whole queue to a writer and returns its size in bytes.
func (c *Conn) takeBatchLocked() (net.Buffers, int) {
	batch, n := c.queue, c.queuedBytes
	c.queue, c.spare = c.spare[:0], nil
	c.queuedBytes = 0
	return batch, n
}

// recycleLocked keeps a written batch's backing array for the next one.
func (c *Conn) recycleLocked(orig net.Buffers) {
	if cap(orig) <= 1024 {
		c.spare = orig[:0]
	}
}

// flush is the fast path, run by the connection's flusher: one non-blocking writev of
// everything queued. It is takeFlush, the write and endFlush; the flusher's io_uring
// round (flusher_uring_linux.go) runs the same two halves around its own write.
func (c *Conn) flush(f *flusher) {
	batch := c.takeFlush()
	if batch == nil {
		return
	}
	ownAdd(&f.stats.frames, uint64(len(batch)))
	rest, err := f.writev(c.raw, batch)
	c.endFlush(batch, rest, err)
}

// takeFlush is the first half of a flusher's write: it takes the whole queue for a
// non-blocking write and makes the flusher the writer (writerBusy). It returns nil when
// there is nothing to write (the connection was taken by the slow path, is closed, or its
// queue is empty; a closing one with an empty queue is finished here).
func (c *Conn) takeFlush() net.Buffers {
	c.mu.Lock()
	if c.writer != writerScheduled {
		c.mu.Unlock()
		return nil
	}
	if c.state >= stateClosed {
		c.writer = writerIdle
		c.mu.Unlock()
		return nil
	}
	if len(c.queue) == 0 {
		c.writer = writerIdle
		finish := c.state == stateClosing
		if finish {
			c.state = stateClosed
		}
		c.mu.Unlock()
		if finish {
			c.finishClose()
		}
		return nil
	}
	// The batch leaves the count while the non-blocking write runs (it takes what the
	// socket has room for at once); what it leaves goes to the slow path and counts again.
	batch, _ := c.takeBatchLocked()
	c.writer = writerBusy
	c.mu.Unlock()
	return batch
}

// endFlush is the second half: batch is what takeFlush returned, rest what the
// non-blocking write left of it (nil when all went out; it may share batch's backing
// array), err a write error. What the socket did not take stays with the writer (the slow
// path goroutine gets it as its first batch); it never goes back into the queue, which
// others may have appended to meanwhile. An error drops the connection (CauseWriteError).
func (c *Conn) endFlush(batch, rest net.Buffers, err error) {
	if err != nil {
		clear(batch)
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
		clear(batch)
		c.mu.Lock()
		c.writingBytes = n
		c.mu.Unlock()
		go c.writeLoop(restCopy) // the writer stays busy: the slow path owns the socket now
		return
	}
	clear(batch)
	c.mu.Lock()
	c.recycleLocked(batch)
	c.writingBytes = 0
	c.writer = writerIdle
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
		if err := c.writeBatch(first); err != nil {
			c.abort(CauseWriteError)
			return
		}
	}
	cleared := false // the deadline is off since the last write
	for {
		c.mu.Lock()
		if len(c.queue) == 0 || c.state >= stateClosed {
			if c.raw != nil && !cleared {
				// The flusher's non-blocking writes must not see this deadline. It is
				// cleared while this goroutine still owns the socket, then the queue is
				// looked at again: cleared once idle, it could remove the deadline of the
				// next slow-path writer's blocking write.
				// A fast-path socket's blocking duplicate is closed here too: an idle
				// connection holds one descriptor (the cap counts one per connection),
				// and the next slow spell makes a new one.
				c.mu.Unlock()
				_ = c.netConn.SetWriteDeadline(time.Time{})
				if d, ok := c.netConn.(slowReleaser); ok {
					d.releaseSlow()
				}
				cleared = true
				continue
			}
			c.writer = writerIdle
			finish := c.state == stateClosing
			if finish {
				c.state = stateClosed
			}
			c.mu.Unlock()
			if finish {
				c.finishClose()
			}
			return
		}
		cleared = false
		// A blocking write may take as long as the peer likes: its batch stays counted
		// against the bound (writingBytes) until written, frame by frame.
		batch, n := c.takeBatchLocked()
		c.writingBytes = n
		c.mu.Unlock()

		if c.fl != nil {
			c.fl.stats.blocking.Add(1)
			c.fl.stats.blockingFrames.Add(uint64(len(batch)))
		}
		_ = c.netConn.SetWriteDeadline(time.Now().Add(writeTimeout))
		err := c.writeBatch(batch) // drops its references, so shared frames can be freed
		c.mu.Lock()
		c.recycleLocked(batch)
		c.mu.Unlock()
		if err != nil {
			c.abort(CauseWriteError)
			return
		}
	}
}

// slowReleaser is a connection whose blocking writes go through a descriptor of their own
// (fdConn's duplicate), released by the slow path's writer once it is done.
type slowReleaser interface{ releaseSlow() }

// writeBatch is the slow path's blocking write of a batch, a frame at a time: each frame's
// bytes leave the in-flight count as soon as they are written, so the bound holds what is
// still to be written, no more (a peer that reads slowly is not cut for what it took).
// (net.Buffers.WriteTo writes a TLS or fast-path connection a frame at a time too.)
func (c *Conn) writeBatch(bufs net.Buffers) error {
	var err error
	for i, b := range bufs {
		var n int
		if err == nil {
			n, err = c.netConn.Write(b)
		}
		bufs[i] = nil
		c.mu.Lock()
		c.writingBytes -= n
		if err != nil || i == len(bufs)-1 {
			c.writingBytes = 0
		}
		c.mu.Unlock()
	}
	return err
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
	if c.state != stateOpen {
		c.mu.Unlock()
		return
	}
	c.state, c.cause = stateClosing, cause
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

// abort drops the socket at once without a close handshake (slow or broken peer). It
// only makes the reader see the end: a polled socket is shut down, never closed (its
// poller deregisters it, then cleanup closes it), a goroutine reader's connection is
// closed, which fails its read. Either way the reader then runs cleanup, whatever window
// of the connection's life this lands in: register fixed the reader before the Session
// could publish the connection to anyone who might abort it.
func (c *Conn) abort(cause Cause) {
	c.mu.Lock()
	if c.state >= stateClosed {
		c.mu.Unlock()
		return
	}
	// The first cause recorded wins: the cleanup's abort must not overwrite the one the
	// reader found (a message too big) in logs and metrics.
	if c.state == stateOpen {
		c.cause = cause
	}
	c.state = stateClosed
	c.dropBarriersLocked()
	clear(c.queue)
	c.queue = nil
	c.queuedBytes = 0
	c.mu.Unlock()
	if c.reader == readerPoller {
		c.dropPolled()
	} else {
		_ = c.netConn.Close()
	}
	c.markFlushed()
}

// markFlushed records that the write side is finished and wakes a cleanup waiting for it.
// Called once, by the move into stateClosed.
func (c *Conn) markFlushed() {
	c.mu.Lock()
	c.flushDone = true
	ch := c.flushed
	c.mu.Unlock()
	if ch != nil {
		close(ch)
	}
}

// flushedChan is closed once the write side is finished (at once if it already is).
func (c *Conn) flushedChan() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.flushed == nil {
		c.flushed = make(chan struct{})
		if c.flushDone {
			close(c.flushed)
		}
	}
	return c.flushed
}

// finishClose half-closes after the close frame so the peer reads everything, and lets
// the reader end on the peer's reply or after closeGrace.
func (c *Conn) finishClose() {
	defer c.markFlushed()
	if tc, ok := c.netConn.(interface{ CloseWrite() error }); ok {
		_ = tc.CloseWrite()
		if c.reader == readerPoller {
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
	defer c.mu.Unlock()
	return (c.state == stateClosing || c.state == stateClosed) && !c.flushDone
}

// cleanup ends the connection once its reader has ended and tells the Session why. Only
// the reader runs it (or register, when the reader could not start), once.
func (c *Conn) cleanup() {
	c.mu.Lock()
	closing := c.state == stateClosing || c.state == stateClosed
	c.mu.Unlock()
	if closing { // let the close frame already queued reach the peer
		select {
		case <-c.flushedChan():
		case <-time.After(closeGrace):
		}
	}
	c.abort(CausePeerGone)
	_ = c.netConn.Close() // the descriptor's only close (abort shut it down, or half-closed it)
	c.mu.Lock()
	if c.state == stateEnded {
		c.mu.Unlock()
		return
	}
	c.state = stateEnded
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
