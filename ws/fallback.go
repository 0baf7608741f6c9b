package ws

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"syscall"
	"time"

	"github.com/gorilla/websocket"
)

// Upgrade is the portable path: it upgrades an HTTP request (any listener, TLS too) with
// gorilla's upgrader after asking the Handler, name being the route's parameter (what the
// fast path reports as Request.Name). A refused connection gets its Decision.Refusal after
// the 101, as the Pusher protocol wants, so that the client sees the code. The connection
// is then read by a poller where it can be (plain TCP on Linux), else by a goroutine.
func (s *Server) Upgrade(w http.ResponseWriter, r *http.Request, name string) {
	if headerHasToken(r.Header, "Upgrade", "websocket") && !headerHasToken(r.Header, "Sec-Websocket-Version", "13") {
		// RFC 6455 §4.2.2: an unsupported (or missing) version is answered with the
		// versions this server speaks; gorilla would answer 400 without saying which.
		// Every other bad handshake (a key that is not 16 bytes of base64...) gets
		// gorilla's 400.
		w.Header().Set("Sec-WebSocket-Version", "13")
		http.Error(w, "Unsupported WebSocket version: this server speaks version 13", http.StatusUpgradeRequired)
		return
	}
	req := Request{Name: []byte(name), Query: []byte(r.URL.RawQuery), Origin: []byte(r.Header.Get("Origin"))}
	d := s.handler.Accept(&req, nil)
	if d.Session == nil {
		if wc, err := s.upgrader.Upgrade(w, r, nil); err == nil {
			refuse(wc, d.Refusal)
		}
		return
	}
	// The greeting leaves in the same write as the 101 response: on loopback and LANs a
	// write costs far more than its bytes, and this saves one per connection.
	uw := &upgradeWriter{ResponseWriter: w}
	uw.conn.first = d.Greeting
	wc, err := s.upgraderFor(r.Header.Values("Sec-Websocket-Extensions")).Upgrade(uw, r, nil)
	if err != nil {
		d.Session.OnClose(CauseHandshake) // the upgrader already answered or closed the socket
		return
	}
	c := s.newConn(&d)
	if uw.conn.deflate {
		c.useDeflate()
	}
	c.ws, c.netConn = wc, uw.conn.Conn
	// A *net.TCPConn, or the fast listener's replayConn around one; never a *tls.Conn.
	var p *poller
	if sc, ok := c.netConn.(syscall.Conn); ok && haveWritev {
		if rc, err := sc.SyscallConn(); err == nil {
			c.raw = rc
			p = s.poller() // nil where epoll is unavailable
		}
	}
	// Read by a poller, else by a fresh goroutine: returning lets net/http's connection
	// goroutine end and release the 8 KiB of bufio buffers it keeps for a hijacked one.
	s.register(c, p, false)
}

// refuse sends the refusal frames, then waits briefly for the peer's close.
func refuse(wc *websocket.Conn, refusal []byte) {
	nc := wc.NetConn()
	_ = nc.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = nc.Write(refusal)
	if tc, ok := nc.(interface{ CloseWrite() error }); ok {
		_ = tc.CloseWrite()
		_ = nc.SetReadDeadline(time.Now().Add(closeGrace))
		_, _, _ = wc.ReadMessage()
	}
	_ = nc.Close()
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
	first   []byte
	wrote   bool
	deflate bool // the 101 accepted permessage-deflate
}

func (f *firstWriteConn) Write(p []byte) (int, error) {
	if !f.wrote {
		f.wrote, f.deflate = true, negotiatedIn(p)
	}
	if f.first == nil {
		return f.Conn.Write(p)
	}
	b := append(append(make([]byte, 0, len(p)+len(f.first)), p...), f.first...)
	f.first = nil
	n, err := f.Conn.Write(b)
	return min(n, len(p)), err
}

// readLoop runs on a goroutine of its own for the connection's whole life (TLS, or where
// epoll is unavailable), with the poller's semantics: every frame goes to the Session,
// pings are answered in kind and a close frame with a close.
func (c *Conn) readLoop() {
	if c.rd.deflate {
		c.readFrames() // gorilla's reader does not bound inflated messages
		return
	}
	defer c.cleanup()
	if c.limit > 0 {
		c.ws.SetReadLimit(int64(c.limit))
	}
	c.ws.SetPingHandler(func(data string) error {
		c.session.OnFrame(OpPing, []byte(data))
		c.WritePreframed(AppendFrame(nil, OpPong, []byte(data)))
		return nil
	})
	c.ws.SetPongHandler(func(data string) error { c.session.OnFrame(OpPong, []byte(data)); return nil })
	c.ws.SetCloseHandler(func(code int, text string) error {
		c.session.OnFrame(OpClose, nil)
		c.closeWith(CausePeerGone, CloseNormal, "", nil) // a no-op when we closed first
		return nil
	})

	var buf []byte
	for {
		op, msg, err := c.readMessage(buf[:0])
		if err != nil {
			switch {
			case errors.Is(err, websocket.ErrReadLimit):
				c.abort(CauseTooBig) // gorilla has sent the 1009 close frame itself
			case errors.Is(err, errInvalidUTF8):
				c.protocolError(CloseInvalidPayload)
			}
			return
		}
		c.session.OnFrame(op, msg)
		if cap(msg) <= 4<<10 {
			buf = msg // small messages reuse one buffer; the Session keeps no reference
		} else {
			buf = nil
		}
	}
}

// errInvalidUTF8 is readMessage's answer to a text message that is not UTF-8.
var errInvalidUTF8 = errors.New("ws: text message is not valid UTF-8")

// readMessage reads the next data message into dst, as gorilla's ReadMessage does, but
// validates a text message as UTF-8 while it arrives: gorilla does not, and RFC 6455 §8.1
// wants the connection failed (1007) as soon as an invalid byte is seen. gorilla itself
// enforces the other framing rules (RSV bits, masking, opcodes, control frames,
// continuation order, close codes) and the read limit, which it checks from the header.
func (c *Conn) readMessage(dst []byte) (byte, []byte, error) {
	op, r, err := c.ws.NextReader()
	if err != nil {
		return 0, nil, err
	}
	var text utf8Stream
	for {
		if len(dst) == cap(dst) {
			dst = append(dst, 0)[:len(dst)]
		}
		n, err := r.Read(dst[len(dst):cap(dst)])
		piece := dst[len(dst) : len(dst)+n]
		dst = dst[:len(dst)+n]
		final := errors.Is(err, io.EOF)
		if op == websocket.TextMessage && !text.write(piece, final) {
			return 0, nil, errInvalidUTF8
		}
		if final {
			return byte(op), dst, nil
		}
		if err != nil {
			return 0, nil, err
		}
	}
}

// headerHasToken reports whether any of the header's lines lists token (case-insensitive),
// as gorilla's own handshake checks read them.
func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		if tokenListContains([]byte(v), token) {
			return true
		}
	}
	return false
}
