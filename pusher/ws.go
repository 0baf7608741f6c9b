package pusher

import (
	"net"
	"net/http"
	"time"

	"github.com/reverbgo/reverbgo/origin"
	"github.com/reverbgo/reverbgo/ws"
)

// ServeWS handles GET {path}/app/{key} on the portable path (net/http: TLS, non-Linux, and
// whatever the fast listener hands over). Refusals (unknown app, origin, quota) are sent
// after the upgrade as pusher:error plus a close frame with the same code, as Pusher does,
// so pusher-js sees the code and knows whether to reconnect.
func (s *Server) ServeWS(w http.ResponseWriter, r *http.Request, appKey string) {
	s.transport.Upgrade(w, r, appKey)
}

// FastListener serves WebSocket upgrades of GET {prefix}/app/{key} on the transport's
// pollers and hands every other connection to whoever calls Accept on the returned
// listener (http.Server); see ws.Server.FastListener. Plain TCP only.
func (s *Server) FastListener(ln net.Listener, prefix string) net.Listener {
	return s.transport.FastListener(ln, prefix+"/app/")
}

// wsHandler is the Server as the transport's ws.Handler.
type wsHandler Server

// Accept admits an upgrade (ws.Handler): connection_established is the greeting, written
// with the 101. A refusal is counted and logged only when final (not Tentative).
func (h *wsHandler) Accept(req *ws.Request, greeting []byte) ws.Decision {
	s := (*Server)(h)
	// The table's map read inline: the []byte to string conversion then does not allocate.
	app := s.apps.Load().byKey[string(req.Name)]
	org := "" // converted only when an app has origins to check
	if app != nil && len(app.cfg().AllowedOrigins) > 0 {
		org = string(req.Origin)
	}
	if reason := s.admitRaw(app, org, func() bool { return protocolSupportedRaw(req.Query) }); reason != CloseNone {
		if req.Tentative {
			return ws.Decision{}
		}
		s.countRefused(app, reason)
		s.log.Debug("connection refused", "reason", reason.String(), "code", reason.Code())
		refusal := append(errorFrame(reason.Code(), reason.Message()), ws.CloseFrame(reason.Code(), reason.Message())...)
		return ws.Decision{Refusal: refusal}
	}
	socketID := s.unusedSocketID()
	c := &Conn{srv: s, app: app, socketID: socketID}
	return ws.Decision{
		Session:        c,
		Greeting:       appendEstablished(greeting, socketID, app.cfg().ActivityTimeout),
		MaxMessageSize: app.cfg().MaxMessageSize,
	}
}

// OnOpen implements ws.Session: the socket enters the socket table and the active count.
func (c *Conn) OnOpen(wc *ws.Conn) bool {
	c.ws = wc
	if !c.srv.register(c) {
		return false
	}
	c.opened = true
	return true
}

// register enters an upgraded connection in the socket table and the active count. It
// reports false, having released the app's quota, if the connection must be dropped (the
// transport then closes the socket).
func (s *Server) register(c *Conn) bool {
	app := c.app
	if !s.sockets.add(c) {
		// Another socket took this random 80-bit id since unusedSocketID looked: the
		// client was already told the id, so drop it and let it reconnect.
		app.conns.Add(-1)
		return false
	}
	// draining is checked and active counted under one lock that Shutdown also takes to
	// set draining, so no connection is counted after Shutdown starts waiting and none
	// added before the check escapes Shutdown's walk of the socket table.
	s.activeMu.Lock()
	if s.draining.Load() {
		s.activeMu.Unlock()
		s.sockets.remove(c) // pusher-js reconnects at once after the abnormal close
		app.conns.Add(-1)
		return false
	}
	s.active.Add(1)
	s.activeMu.Unlock()
	if !s.admitted(app) { // removed or disabled by a reload during the handshake (apps.go)
		s.sockets.remove(c)
		app.conns.Add(-1)
		s.active.Done()
		return false
	}
	c.lastActivity.Store(s.now().UnixNano())
	c.observeOpen()
	app.stats.opened.Add(1)
	return true
}

// admitRaw runs the checks that may refuse a connection and counts an admitted one
// against the app's quota: origin is the Origin header and protocolOK checks the query,
// called only if the earlier checks pass.
func (s *Server) admitRaw(app *appState, origin string, protocolOK func() bool) CloseReason {
	switch {
	case s.draining.Load():
		return CloseServerShutdown
	case app == nil:
		return CloseAppNotFound
	case !app.cfg().IsEnabled():
		return CloseAppDisabled
	case !originAllowed(origin, app.cfg().AllowedOrigins):
		return CloseOriginNotAllowed
	case !protocolOK():
		return CloseUnsupportedProtocol
	}
	// The node's cap: checked before the app's count is taken, so many handshakes at once
	// may pass it together; it keeps a reserve of descriptors, not an exact bound.
	if s.maxConns > 0 && s.totalConns() >= s.maxConns {
		return CloseOverCapacity
	}
	if max := app.cfg().MaxConnections; max > 0 && app.conns.Add(1) > int64(max) {
		app.conns.Add(-1)
		return CloseOverQuota
	} else if max <= 0 {
		app.conns.Add(1)
	}
	return CloseNone
}

// unusedSocketID draws socket ids until one is not taken.
func (s *Server) unusedSocketID() string {
	for {
		if id := newSocketID(); s.sockets.get(id) == nil {
			return id
		}
	}
}

// OnFrame implements ws.Session with the protocol's semantics: every frame is activity,
// every data message goes to handle (binary too), and a client that pings with control
// frames is pinged in kind; the transport answers pings and close frames itself.
func (c *Conn) OnFrame(op byte, payload []byte) {
	c.touch()
	switch op {
	case ws.OpText, ws.OpBinary:
		c.handle(payload)
	case ws.OpPing:
		c.controlPings.Store(true)
	}
}

func (c *Conn) touch() {
	c.lastActivity.Store(c.srv.now().UnixNano())
	c.pingSentAt.Store(0)
}

// OnClose implements ws.Session: it leaves every channel and forgets the socket once the
// transport has ended it.
func (c *Conn) OnClose(cause ws.Cause) {
	s := c.srv
	reason := c.reasonFor(cause)
	c.final.Store(int32(reason))
	if !c.opened { // the handshake failed before OnOpen: only the quota was taken
		c.app.conns.Add(-1)
		return
	}
	s.sockets.remove(c)
	if s.remote {
		// Presence leaves wait on Redis: they run on the connection's task goroutine, after
		// any work still queued there (a join in flight is then left, not forgotten), and
		// Shutdown waits for them before the node reaps itself.
		c.enqueue(c.leaveAll, true)
	} else {
		c.leaveAll(c.localTask())
	}
	c.app.conns.Add(-1)
	c.observeClose()
	c.app.stats.closed[reason].Add(1)
	s.log.Debug("connection closed", "app", c.app.cfg().ID, "socket_id", c.socketID, "reason", reason.String())
	s.active.Done()
}

// leaveAll leaves every channel of a closed socket and drops its user bindings.
func (c *Conn) leaveAll(t onTask) {
	s := c.srv
	c.subsMu.Lock()
	subs := c.subs
	c.subs = subSet{}
	user := c.userID
	c.subsMu.Unlock()
	for name, sub := range subs.all() {
		c.leave(t, name, sub)
		if sub.userID != "" {
			s.sockets.unbindUser(c.app.cfg().ID, sub.userID, c)
		}
	}
	if user != "" {
		s.sockets.unbindUser(c.app.cfg().ID, user, c)
	}
	s.watch.closed(t, c) // online state and watchlist (watchlist.go)
}

// originAllowed is the shared matcher (package origin), as on the Toolmark page endpoint.
func originAllowed(o string, allowed []string) bool { return origin.Allowed(allowed, o) }

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

var (
	pingFrame        = EventFrame("pusher:ping", "", "{}")
	pingControlFrame = ws.AppendFrame(nil, ws.OpPing, nil)
)

func (c *Conn) checkActivity(now int64) {
	cfg := c.app.cfg()
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
		c.Send(pingControlFrame)
		return
	}
	c.Send(pingFrame)
}
