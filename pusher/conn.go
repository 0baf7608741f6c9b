package pusher

import (
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gorilla/websocket"

	"github.com/reverbgo/reverbgo/channels"
)

// DefaultMaxQueueBytes bounds what may wait for one slow client before it is cut off.
const DefaultMaxQueueBytes = 1 << 20

// writeTimeout bounds one batched write; a peer that does not drain its socket for this
// long is treated as gone.
const writeTimeout = 10 * time.Second

// testHookPartialWrite, set only by tests, runs after a non-blocking write left a remainder
// and before the writer takes the connection's lock again: it holds open the window in
// which a subscribe can interleave with a partial write.
var testHookPartialWrite func()

// closeGrace is how long a closing connection waits for the peer's close frame.
const closeGrace = 2 * time.Second

// subscription is a channel this socket is in; userID is set for presence channels.
type subscription struct {
	userID string
	token  string // Toolmark page token (session.go), "" for other channels
}

// Conn is one client socket. Its reader (a poller or readLoop) owns the protocol state, or
// its task goroutine while that has Redis work queued (tasks.go: never both at once); other
// goroutines only call Send and closeWith. Writes bypass gorilla's writer: frames are built once per
// broadcast and several queued frames leave in one writev, so the hot path costs one
// syscall per batch and no allocation per delivery.
type Conn struct {
	srv      *Server
	app      *appState
	ws       *websocket.Conn
	netConn  net.Conn
	raw      syscall.RawConn // plain TCP: written by the flusher; nil (TLS): slow path only
	fl       *flusher
	socketID string

	mu          sync.Mutex
	queue       net.Buffers     // whole frames waiting for a writer, in order
	spare       net.Buffers     // a written batch's backing array, reused
	barriers    []*writeBarrier // open barriers and released ones behind an open one
	queuedBytes int             // bytes in queue
	heldBytes   int             // bytes held by barriers
	unsentBytes int             // remainder of a partial write, owned by the writer
	maxBytes    int
	writing     bool // a writer (flusher pass or slow-path goroutine) owns the socket
	scheduled   bool // on the flusher's dirty list
	closing     bool
	closed      bool
	reason      CloseReason
	flushed     chan struct{} // closed once the socket is finished (close frame sent or aborted)

	lastActivity atomic.Int64 // unix nanoseconds of the last frame read
	pingSentAt   atomic.Int64 // unix nanoseconds of an unanswered server ping, 0 if none
	controlPings atomic.Bool  // client used control-frame pings: answer in kind

	tasks taskQueue // work that may wait on Redis, run in order off the poller (tasks.go)

	subsMu sync.RWMutex // guards subs and userID for readers outside the read loop
	subs   map[string]subscription
	userID string // signed-in user ("" when not signed in)

	rateWindow int64 // unix second of the client-event window (reader goroutine only)
	rateCount  int

	// Read by a poller (plain TCP on Linux) instead of readLoop: see poller_linux.go.
	polled atomic.Bool // registered with a poller: only the poller may close the fd
	fd     int32       // the socket's fd while polled (the poller's key)
	rd     wsReader    // frame parser state, owned by the poller

	fdc fdConn // netConn and raw of a socket the fast listener upgraded (accept_linux.go)
}

// SocketID implements channels.Subscriber.
func (c *Conn) SocketID() string { return c.socketID }

var _ channels.Subscriber = (*Conn)(nil)

// Send queues a frame without blocking. A client whose queue would pass maxBytes is
// disconnected instead: one slow reader never slows a broadcast. While a write barrier is
// open the frame waits behind it (see holdWrites).
func (c *Conn) Send(frame []byte) {
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		return
	}
	if c.queuedBytes+c.heldBytes+c.unsentBytes+len(frame) > c.maxBytes {
		c.mu.Unlock()
		c.closeWith(CloseSlowConsumer)
		return
	}
	if n := len(c.barriers); n > 0 {
		b := c.barriers[n-1]
		b.after = append(b.after, frame)
		c.heldBytes += len(frame)
		c.mu.Unlock()
		return
	}
	c.queue = append(c.queue, frame)
	c.queuedBytes += len(frame)
	k := c.kickLocked()
	c.mu.Unlock()
	c.doKick(k)
}

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

// writeBarrier holds back every frame sent to its connection after it was opened until it
// is released with the frames that must go first (subscription_succeeded and a cache
// replay before the channel's events). The held frames live in the barrier, not in the
// queue, so nothing is ever inserted into the queue: the writer only ever takes whole
// frames from its front, and a partial write, a barrier and a close cannot interleave in
// a way that splits a frame. Frames queued before the barrier keep flowing meanwhile.
type writeBarrier struct {
	c        *Conn
	frames   net.Buffers // what release puts first
	after    net.Buffers // frames sent while this was the newest open barrier
	released bool
}

// holdWrites opens a barrier. Barriers nest in order: frames sent while several are open
// wait behind the newest, and a barrier's frames go out only once every older barrier
// is released, so the stream reads [before b1][b1's frames][sent during b1][b2's frames]...
// Every barrier must be released (a closing connection drops them).
func (c *Conn) holdWrites() *writeBarrier {
	b := &writeBarrier{c: c}
	c.mu.Lock()
	if !c.closing {
		c.barriers = append(c.barriers, b)
	}
	c.mu.Unlock()
	return b
}

// release sends frames, then what the barrier held, as soon as no older barrier is open.
// It is a no-op on a closing connection. Safe from any goroutine; call it once.
func (b *writeBarrier) release(frames ...[]byte) {
	c := b.c
	c.mu.Lock()
	if c.closing || b.released {
		c.mu.Unlock()
		return
	}
	b.released = true
	b.frames = frames
	for _, f := range frames {
		c.heldBytes += len(f)
	}
	c.drainBarriersLocked()
	k := c.kickLocked()
	c.mu.Unlock()
	c.doKick(k)
}

// drainBarriersLocked moves every released barrier at the head of the list to the queue.
func (c *Conn) drainBarriersLocked() {
	i := 0
	for ; i < len(c.barriers) && c.barriers[i].released; i++ {
		b := c.barriers[i]
		for _, part := range [2]net.Buffers{b.frames, b.after} {
			for _, f := range part {
				c.queue = append(c.queue, f)
				c.heldBytes -= len(f)
				c.queuedBytes += len(f)
			}
		}
		b.frames, b.after = nil, nil
		c.barriers[i] = nil
	}
	if i == len(c.barriers) {
		c.barriers = c.barriers[:0]
	} else if i > 0 {
		c.barriers = append(c.barriers[:0], c.barriers[i:]...)
	}
}

// dropBarriersLocked is for a connection that starts closing: released barriers at the
// head still go out in order; an unreleased one and everything behind it are dropped, as
// their frames would arrive before the subscription_succeeded they wait for.
func (c *Conn) dropBarriersLocked() {
	c.drainBarriersLocked()
	for i, b := range c.barriers {
		b.frames, b.after = nil, nil
		c.barriers[i] = nil
	}
	c.barriers = nil
	c.heldBytes = 0
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
		c.abort(CloseWriteError)
		return
	}
	if rest != nil {
		if testHookPartialWrite != nil {
			testHookPartialWrite()
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
			c.abort(CloseWriteError)
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
			c.abort(CloseWriteError)
			return
		}
	}
}

// closeWith ends the connection for reason: a pusher:error (for 4xxx codes) and a close
// frame go out after what is already queued, then the socket is shut. Safe from any
// goroutine and idempotent.
func (c *Conn) closeWith(reason CloseReason) {
	if reason == CloseSlowConsumer || reason == CloseWriteError {
		c.abort(reason)
		return
	}
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		return
	}
	c.closing = true
	c.reason = reason
	c.dropBarriersLocked()
	if reason.sendsPusherError() {
		f := errorFrame(reason.Code(), reason.Message())
		c.queue = append(c.queue, f)
	}
	c.queue = append(c.queue, closeFrame(reason.Code(), reason.Message()))
	k := c.kickLocked()
	c.mu.Unlock()
	c.doKick(k)
}

// abort drops the socket at once without a close handshake (slow or broken peer).
func (c *Conn) abort(reason CloseReason) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	// The first reason recorded wins: cleanup's abort(CloseClientGone) must not overwrite
	// the one the read loop found (message_too_big) in logs and metrics.
	if !c.closing && c.reason == CloseNone {
		c.reason = reason
	}
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

// closeReason reports why the connection ended (CloseClientGone if the peer left first).
func (c *Conn) closeReason() CloseReason {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reason == CloseNone {
		return CloseClientGone
	}
	return c.reason
}

// Channels returns the names of the channels this socket is subscribed to.
func (c *Conn) Channels() []string {
	c.subsMu.RLock()
	defer c.subsMu.RUnlock()
	out := make([]string, 0, len(c.subs))
	for name := range c.subs {
		out = append(out, name)
	}
	return out
}
