package pusher

import (
	"sync"
	"sync/atomic"

	"github.com/reverbgo/reverbgo/channels"
	"github.com/reverbgo/reverbgo/ws"
)

// DefaultMaxQueueBytes bounds what may wait for one slow client before it is cut off.
const DefaultMaxQueueBytes = ws.DefaultMaxQueueBytes

// subscription is a channel this socket is in; userID is set for presence channels.
type subscription struct {
	userID string
	token  string // Toolmark page token (session.go), "" for other channels
}

// Conn is one client socket speaking the Pusher protocol over a ws.Conn (its Session). Its
// reader (a poller or the transport's read loop) owns the protocol state, or its task
// goroutine while that has Redis work queued (tasks.go: never both at once); other
// goroutines only call Send and closeWith. Frames are built once per broadcast and queued
// as they are (ws.Conn.WritePreframed): no allocation per delivery.
type Conn struct {
	srv          *Server
	app          *appState
	ws           *ws.Conn // set by OnOpen, before the socket is read or published to
	socketID     string
	opened       bool         // OnOpen admitted it (OnClose then undoes register)
	reason       atomic.Int32 // the CloseReason of the protocol's own close, first wins
	final        atomic.Int32 // the CloseReason recorded once the socket ended
	lastActivity atomic.Int64 // unix nanoseconds of the last frame read
	pingSentAt   atomic.Int64 // unix nanoseconds of an unanswered server ping, 0 if none
	controlPings atomic.Bool  // client used control-frame pings: answer in kind

	tasks taskQueue // work that may wait on Redis, run in order off the poller (tasks.go)

	subsMu sync.RWMutex // guards subs and userID for readers outside the read loop
	subs   subSet
	userID string // signed-in user ("" when not signed in)

	rateWindow int64 // unix second of the client-event window (reader goroutine only)
	rateCount  int
	msgWindow  messageWindow // Reverb's rate_limiting window (ratelimit.go, reader goroutine only)
}

// SocketID implements channels.Subscriber.
func (c *Conn) SocketID() string { return c.socketID }

var _ channels.Deflating = (*Conn)(nil)
var _ ws.Session = (*Conn)(nil)

// Send queues a frame without blocking (channels.Subscriber). A client whose queue would
// pass the server's MaxQueueBytes is dropped by the transport instead (slow_consumer): one
// slow reader never slows a broadcast. While a barrier is open the frame waits behind it.
//
// A frame sent to this socket alone is compressed when it negotiated permessage-deflate
// and the payload is large enough (a broadcast's shared frame goes through SendFrame).
func (c *Conn) Send(frame []byte) { c.ws.WriteCompressible(frame) }

// SendFrame queues a broadcast's frame as it is (channels.Deflating): the fan-out has
// already chosen the compressed or the plain one.
func (c *Conn) SendFrame(frame []byte) { c.ws.WritePreframed(frame) }

// Deflater is the socket's permessage-deflate compressor, nil if it negotiated none
// (channels.Deflating).
func (c *Conn) Deflater() channels.Compressor {
	if d := c.ws.Deflater(); d != nil {
		return d
	}
	return nil
}

// holdWrites opens a write barrier: frames sent from now on wait until it is released with
// the frames that must go first (subscription_succeeded, a cache replay).
func (c *Conn) holdWrites() *ws.Barrier { return c.ws.Hold() }

// closeWith ends the connection for reason: a pusher:error (for 4xxx codes) and a close
// frame go out after what is already queued, then the socket is shut. Safe from any
// goroutine and idempotent; the first reason recorded wins.
func (c *Conn) closeWith(reason CloseReason) {
	c.reason.CompareAndSwap(int32(CloseNone), int32(reason))
	if reason == CloseSlowConsumer || reason == CloseWriteError {
		c.ws.Abort()
		return
	}
	var last []byte
	if reason.sendsPusherError() {
		last = errorFrame(reason.Code(), reason.Message())
	}
	c.ws.Close(reason.Code(), reason.Message(), last)
}

// abort drops the socket at once without a close handshake.
func (c *Conn) abort(reason CloseReason) {
	c.reason.CompareAndSwap(int32(CloseNone), int32(reason))
	c.ws.Abort()
}

// causeReasons maps the transport's close causes to the protocol's close reasons.
var causeReasons = [...]CloseReason{
	ws.CausePeerGone:    CloseClientGone,
	ws.CauseProtocol:    CloseProtocolError,
	ws.CauseTooBig:      CloseMessageTooBig,
	ws.CauseInvalidUTF8: CloseInvalidPayload,
	ws.CauseOverflow:    CloseSlowConsumer,
	ws.CauseWriteError:  CloseWriteError,
	ws.CauseHandshake:   CloseClientGone,
}

// reasonFor is the close reason for the transport's cause (the protocol's own for CauseLocal).
func (c *Conn) reasonFor(cause ws.Cause) CloseReason {
	if cause == ws.CauseLocal {
		if r := CloseReason(c.reason.Load()); r != CloseNone {
			return r
		}
		return CloseClientGone
	}
	if int(cause) < len(causeReasons) {
		return causeReasons[cause]
	}
	return CloseClientGone
}

// closeReason reports why the connection ended (CloseClientGone if the peer left first).
func (c *Conn) closeReason() CloseReason {
	if r := CloseReason(c.final.Load()); r != CloseNone {
		return r
	}
	if r := CloseReason(c.reason.Load()); r != CloseNone {
		return r
	}
	return CloseClientGone
}

// isClosing reports whether the connection is ending (queued work for it is skipped).
func (c *Conn) isClosing() bool { return c.ws.Closing() }

// Channels returns the names of the channels this socket is subscribed to.
func (c *Conn) Channels() []string {
	c.subsMu.RLock()
	defer c.subsMu.RUnlock()
	out := make([]string, 0, c.subs.len())
	for name := range c.subs.all() {
		out = append(out, name)
	}
	return out
}
