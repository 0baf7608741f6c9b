package pusher

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"syscall"
	"time"

	"github.com/gorilla/websocket"

	"github.com/reverbgo/reverbgo/origin"
	"github.com/reverbgo/reverbgo/ws"
)

// ServeWS handles GET {path}/app/{key}. Refusals (unknown app, origin, quota) are sent after
// the upgrade as pusher:error plus a close frame with the same code, as Pusher does, so
// pusher-js sees the code and knows whether to reconnect.
func (s *Server) ServeWS(w http.ResponseWriter, r *http.Request, appKey string) {
	if headerHasToken(r.Header, "Upgrade", "websocket") && !headerHasToken(r.Header, "Sec-Websocket-Version", "13") {
		// RFC 6455 §4.2.2: an unsupported (or missing) version is answered with the
		// versions this server speaks; gorilla would answer 400 without saying which.
		// Every other bad handshake (a key that is not 16 bytes of base64...) gets
		// gorilla's 400.
		w.Header().Set("Sec-WebSocket-Version", "13")
		http.Error(w, "Unsupported WebSocket version: this server speaks version 13", http.StatusUpgradeRequired)
		return
	}
	app := s.appsKey[appKey]
	if reason := s.admit(app, r); reason != CloseNone {
		s.countRefused(app, reason)
		if wc, err := s.upgrader.Upgrade(w, r, nil); err == nil {
			s.refuse(wc, reason)
		}
		return
	}
	// connection_established leaves in the same write as the 101 response: on loopback
	// and LANs a write costs far more than its bytes, and this saves one per connection.
	socketID := s.unusedSocketID()
	uw := &upgradeWriter{ResponseWriter: w}
	uw.conn.first = EventFrame("pusher:connection_established", "", establishedData(socketID, app.cfg.ActivityTimeout))
	wc, err := s.upgrader.Upgrade(uw, r, nil)
	if err != nil {
		app.conns.Add(-1)
		return // the upgrader already answered with an HTTP error or closed the socket
	}
	c := &Conn{srv: s, app: app, ws: wc, netConn: uw.conn.Conn, socketID: socketID, maxBytes: s.maxQueue, flushed: make(chan struct{})}
	// A *net.TCPConn, or the fast listener's replayConn around one; never a *tls.Conn.
	if sc, ok := c.netConn.(syscall.Conn); ok && haveWritev {
		if rc, err := sc.SyscallConn(); err == nil {
			c.raw = rc
		}
	}
	if !s.register(c) {
		return
	}
	if s.startReader(c) {
		return
	}
	// A fresh goroutine reads: returning lets net/http's connection goroutine end and
	// release the 8 KiB of bufio buffers it keeps for a hijacked connection.
	go func() {
		defer s.active.Done()
		c.readLoop()
	}()
}

// register gives an upgraded connection its flusher and enters it in the socket table
// and the active count. It reports false, having closed the socket and released the
// app's quota, if the connection must be dropped.
func (s *Server) register(c *Conn) bool {
	app := c.app
	c.fl = s.flushers[int(fastrandn(uint32(len(s.flushers))))]
	if !s.sockets.add(c) {
		// Another socket took this random 80-bit id since unusedSocketID looked: the
		// client was already told the id, so drop it and let it reconnect.
		_ = c.netConn.Close()
		app.conns.Add(-1)
		return false
	}
	// draining is checked and active counted under one lock that Shutdown also takes to
	// set draining, so no connection is counted after Shutdown starts waiting and none
	// added before the check escapes Shutdown's walk of the socket table.
	s.activeMu.Lock()
	if s.draining.Load() {
		s.activeMu.Unlock()
		s.sockets.remove(c)
		_ = c.netConn.Close() // pusher-js reconnects at once after an abnormal close
		app.conns.Add(-1)
		return false
	}
	s.active.Add(1)
	s.activeMu.Unlock()
	c.lastActivity.Store(s.now().UnixNano())
	c.observeOpen()
	app.stats.opened.Add(1)
	return true
}

// admit runs the checks that may refuse a connection and counts an admitted one against
// the app's quota.
func (s *Server) admit(app *appState, r *http.Request) CloseReason {
	return s.admitRaw(app, r.Header.Get("Origin"), func() bool { return protocolSupported(r.URL.Query()) })
}

// admitRaw is admit for the fast path, which has no http.Request: origin is the Origin
// header and protocolOK checks the query, called only if the earlier checks pass.
func (s *Server) admitRaw(app *appState, origin string, protocolOK func() bool) CloseReason {
	switch {
	case s.draining.Load():
		return CloseServerShutdown
	case app == nil:
		return CloseAppNotFound
	case !app.cfg.IsEnabled():
		return CloseAppDisabled
	case !originAllowed(origin, app.cfg.AllowedOrigins):
		return CloseOriginNotAllowed
	case !protocolOK():
		return CloseUnsupportedProtocol
	}
	if max := app.cfg.MaxConnections; max > 0 && app.conns.Add(1) > int64(max) {
		app.conns.Add(-1)
		return CloseOverQuota
	} else if max <= 0 {
		app.conns.Add(1)
	}
	return CloseNone
}

// refuse sends pusher:error and a close frame, then waits briefly for the peer's close.
func (s *Server) refuse(wc *websocket.Conn, reason CloseReason) {
	nc := wc.NetConn()
	frames := net.Buffers{errorFrame(reason.Code(), reason.Message()), ws.CloseFrame(reason.Code(), reason.Message())}
	_ = nc.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = frames.WriteTo(nc)
	if tc, ok := nc.(interface{ CloseWrite() error }); ok {
		_ = tc.CloseWrite()
		_ = nc.SetReadDeadline(time.Now().Add(closeGrace))
		_, _, _ = wc.ReadMessage()
	}
	_ = nc.Close()
	s.log.Debug("connection refused", "reason", reason.String(), "code", reason.Code())
}

// unusedSocketID draws socket ids until one is not taken.
func (s *Server) unusedSocketID() string {
	for {
		if id := newSocketID(); s.sockets.get(id) == nil {
			return id
		}
	}
}

// upgradeWriter hands gorilla's Upgrade a connection whose first write (the 101 response)
// carries first after it, in the same syscall.
type upgradeWriter struct {
	http.ResponseWriter
	conn firstWriteConn
}

func (u *upgradeWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	nc, brw, err := http.NewResponseController(u.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	u.conn.Conn = nc
	return &u.conn, brw, nil
}

// firstWriteConn appends first to the first Write; it is only used during the upgrade
// (and by gorilla's reader on the goroutine path, which only reads through it).
type firstWriteConn struct {
	net.Conn
	first []byte
}

func (f *firstWriteConn) Write(p []byte) (int, error) {
	if f.first == nil {
		return f.Conn.Write(p)
	}
	b := append(append(make([]byte, 0, len(p)+len(f.first)), p...), f.first...)
	f.first = nil
	n, err := f.Conn.Write(b)
	return min(n, len(p)), err
}

// readLoop runs on the upgrading goroutine for the connection's whole life.
func (c *Conn) readLoop() {
	defer c.cleanup()
	cfg := c.app.cfg
	c.ws.SetReadLimit(int64(cfg.MaxMessageSize))
	c.ws.SetPingHandler(func(data string) error {
		c.controlPings.Store(true)
		c.touch()
		c.Send(ws.AppendFrame(nil, ws.OpPong, []byte(data)))
		return nil
	})
	c.ws.SetPongHandler(func(string) error { c.touch(); return nil })
	c.ws.SetCloseHandler(func(code int, _ string) error {
		c.mu.Lock()
		replied := c.closing
		c.mu.Unlock()
		if !replied {
			c.closeWith(CloseClientGone)
		}
		return nil
	})

	var buf []byte
	for {
		msg, err := c.readMessage(buf[:0])
		if err != nil {
			switch {
			case errors.Is(err, websocket.ErrReadLimit):
				// gorilla has sent the 1009 close frame itself
				c.mu.Lock()
				if c.reason == CloseNone {
					c.reason = CloseMessageTooBig
				}
				c.mu.Unlock()
			case errors.Is(err, errInvalidUTF8):
				c.closeWith(CloseInvalidPayload)
			}
			return
		}
		c.touch()
		c.handle(msg)
		if cap(msg) <= 4<<10 {
			buf = msg // small messages reuse one buffer; handle keeps no reference
		} else {
			buf = nil
		}
	}
}

// errInvalidUTF8 is readMessage's answer to a text message that is not UTF-8.
var errInvalidUTF8 = errors.New("pusher: text message is not valid UTF-8")

// readMessage reads the next data message into dst, as gorilla's ReadMessage does, but
// validates a text message as UTF-8 while it arrives: gorilla does not, and RFC 6455 §8.1
// wants the connection failed (1007) as soon as an invalid byte is seen. gorilla itself
// enforces the other framing rules (RSV bits, masking, opcodes, control frames,
// continuation order, close codes) and the read limit, which it checks from the header.
func (c *Conn) readMessage(dst []byte) ([]byte, error) {
	op, r, err := c.ws.NextReader()
	if err != nil {
		return nil, err
	}
	var text ws.UTF8Stream
	for {
		if len(dst) == cap(dst) {
			dst = append(dst, 0)[:len(dst)]
		}
		n, err := r.Read(dst[len(dst):cap(dst)])
		piece := dst[len(dst) : len(dst)+n]
		dst = dst[:len(dst)+n]
		final := errors.Is(err, io.EOF)
		if op == websocket.TextMessage && !text.Write(piece, final) {
			return nil, errInvalidUTF8
		}
		if final {
			return dst, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

func establishedData(socketID string, activityTimeout int) string {
	return `{"socket_id":"` + socketID + `","activity_timeout":` + strconv.Itoa(activityTimeout) + `}`
}

// OnFrame implements ws.FrameHandler for polled connections with readLoop's semantics: every
// frame is activity, every data message goes to handle, pings are answered in kind and a
// close frame is answered through closeWith.
func (c *Conn) OnFrame(op byte, payload []byte) bool {
	c.touch()
	switch op {
	case ws.OpText, ws.OpBinary: // readLoop hands every data message to handle, binary too
		c.handle(payload)
	case ws.OpPing:
		c.controlPings.Store(true)
		c.Send(ws.AppendFrame(nil, ws.OpPong, payload))
	case ws.OpClose:
		c.mu.Lock()
		replied := c.closing
		c.mu.Unlock()
		if !replied {
			c.closeWith(CloseClientGone)
		}
		return false
	}
	return true
}

// protocolError answers a violation found by the frame parser: a close frame with the
// code (1002, 1007 for text that is not UTF-8, 1009 for an oversized message), then the
// socket is dropped once the peer answers or closeGrace passes.
func (c *Conn) protocolError(code int) {
	reason := CloseProtocolError
	switch code {
	case ws.CloseTooBig:
		reason = CloseMessageTooBig
	case ws.CloseInvalidPayload:
		reason = CloseInvalidPayload
	}
	c.closeWith(reason)
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

func (c *Conn) touch() {
	c.lastActivity.Store(c.srv.now().UnixNano())
	c.pingSentAt.Store(0)
}

// cleanup leaves every channel and forgets the socket once the reader has ended.
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
	c.abort(CloseClientGone)
	_ = c.netConn.Close() // abort is a no-op after a graceful close that only half-closed
	s := c.srv
	s.sockets.remove(c)
	if s.remote {
		// Presence leaves wait on Redis: they run on the connection's task goroutine, after
		// any work still queued there (a join in flight is then left, not forgotten).
		c.enqueue(c.leaveAll, true)
	} else {
		c.leaveAll(context.Background())
	}
	c.app.conns.Add(-1)
	c.observeClose()
	c.app.stats.closed[c.closeReason()].Add(1)
	s.log.Debug("connection closed", "app", c.app.cfg.ID, "socket_id", c.socketID, "reason", c.closeReason().String())
}

// leaveAll leaves every channel of a closed socket and drops its user bindings.
func (c *Conn) leaveAll(ctx context.Context) {
	s := c.srv
	c.subsMu.Lock()
	subs := c.subs
	c.subs = nil
	user := c.userID
	c.subsMu.Unlock()
	for name, sub := range subs {
		c.leave(ctx, name, sub)
		if sub.userID != "" {
			s.sockets.unbindUser(c.app.cfg.ID, sub.userID, c)
		}
	}
	if user != "" {
		s.sockets.unbindUser(c.app.cfg.ID, user, c)
	}
}

// originAllowed is the shared matcher (package origin), as on the Toolmark page endpoint.
func originAllowed(o string, allowed []string) bool { return origin.Allowed(allowed, o) }

// protocolSupported accepts a missing protocol and any version from 5 up.
func protocolSupported(q url.Values) bool {
	v := q.Get("protocol")
	if v == "" {
		return true
	}
	n, err := strconv.Atoi(v)
	return err == nil && n >= 5
}

// sweepLoop pings idle connections and drops those that never answer, once a second.
func (s *Server) sweepLoop() {
	defer s.wg.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			now := s.now().UnixNano()
			s.sockets.each(func(c *Conn) { c.checkActivity(now) })
		}
	}
}

var pingFrame = EventFrame("pusher:ping", "", "{}")

func (c *Conn) checkActivity(now int64) {
	cfg := c.app.cfg
	if sent := c.pingSentAt.Load(); sent != 0 {
		if time.Duration(now-sent) >= time.Duration(cfg.ActivityTimeout)*time.Second {
			c.closeWith(ClosePongTimeout)
		}
		return
	}
	if time.Duration(now-c.lastActivity.Load()) < time.Duration(cfg.PingInterval)*time.Second {
		return
	}
	c.pingSentAt.Store(now)
	if c.controlPings.Load() {
		c.Send(ws.AppendFrame(nil, ws.OpPing, nil))
		return
	}
	c.Send(pingFrame)
}

// headerHasToken reports whether any of the header's lines lists token (case-insensitive),
// as gorilla's own handshake checks read them.
func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		if ws.TokenListContains([]byte(v), token) {
			return true
		}
	}
	return false
}
