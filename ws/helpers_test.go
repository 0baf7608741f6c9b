package ws

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"github.com/reverbgo/reverbgo/internal/testutil"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// waitTimeout bounds every wait for something that should happen.
const waitTimeout = 5 * time.Second

// testLimit is the echo handler's read limit.
const testLimit = 1000

// echoHandler is the protocol of these tests: it accepts GET /app/echo (any other name,
// and Origin https://evil.test, are refused with a text frame "refused" and close 4001),
// greets with the text "hello" and echoes every text message. It counts what it saw.
type echoHandler struct {
	mu        sync.Mutex
	tentative int // refusals asked on the fast path
	refused   int // final refusals
	open      map[*echoSession]struct{}
	closed    chan Cause // every OnClose
}

func newEchoHandler() *echoHandler {
	return &echoHandler{open: make(map[*echoSession]struct{}), closed: make(chan Cause, 64)}
}

func (h *echoHandler) Accept(req *Request, greeting []byte) Decision {
	if string(req.Name) != "echo" || string(req.Origin) == "https://evil.test" {
		h.mu.Lock()
		if req.Tentative {
			h.tentative++
		} else {
			h.refused++
		}
		h.mu.Unlock()
		return Decision{Refusal: append(TextFrame([]byte("refused")), CloseFrame(4001, "refused")...)}
	}
	return Decision{Session: &echoSession{h: h}, Greeting: AppendTextFrame(greeting, []byte("hello")), MaxMessageSize: testLimit}
}

// conns returns the open connections.
func (h *echoHandler) conns() []*Conn {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []*Conn
	for s := range h.open {
		out = append(out, s.c)
	}
	return out
}

type echoSession struct {
	h *echoHandler
	c *Conn
}

func (s *echoSession) OnOpen(c *Conn) bool {
	s.c = c
	s.h.mu.Lock()
	s.h.open[s] = struct{}{}
	s.h.mu.Unlock()
	return true
}

func (s *echoSession) OnFrame(op byte, payload []byte) {
	if op == OpText {
		s.c.WriteText(payload)
	}
}

func (s *echoSession) OnClose(cause Cause) {
	s.h.mu.Lock()
	delete(s.h.open, s)
	s.h.mu.Unlock()
	s.h.closed <- cause
}

// tserver is a Server behind an httptest server routing GET /app/{name} to Upgrade.
type tserver struct {
	h   *echoHandler
	s   *Server
	ts  *httptest.Server
	tls bool
}

type transport int

const (
	plainTransport     transport = iota // net/http, then a poller reads (Linux)
	fastTransport                       // FastListener: the pollers accept and upgrade
	tlsTransport                        // net/http over TLS, gorilla's reader
	fastURingTransport                  // FastListener with Options.IOUring: flushers write with io_uring
)

func (tr transport) String() string { return [...]string{"plain", "fast", "tls", "fast+io_uring"}[tr] }

// options is o for a server on tr: fastURingTransport turns IOUring on (and skips the
// test where the kernel refuses io_uring, which would only test the fallback).
func (tr transport) options(t testing.TB, o Options) Options {
	t.Helper()
	if tr == fastURingTransport {
		requireURing(t)
		o.IOUring = IOUringOn
	}
	return o
}

func newServer(t testing.TB, tr transport) *tserver {
	t.Helper()
	h := newEchoHandler()
	s := NewServer(tr.options(t, Options{Handler: h}))
	return &tserver{h: h, s: s, ts: newHTTPServer(t, s, tr), tls: tr == tlsTransport}
}

// newHTTPServer serves s on tr; the cleanup aborts what is left open and stops s.
func newHTTPServer(t testing.TB, s *Server, tr transport) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /app/{name}", func(w http.ResponseWriter, r *http.Request) { s.Upgrade(w, r, r.PathValue("name")) })
	mux.HandleFunc("GET /up", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "OK") })
	ts := httptest.NewUnstartedServer(mux)
	switch tr {
	case fastTransport, fastURingTransport:
		ts.Listener = s.FastListener(ts.Listener, "/app/")
		ts.Start()
	case tlsTransport:
		ts.StartTLS()
	default:
		ts.Start()
	}
	if tr == fastURingTransport {
		for _, f := range s.flushers {
			if f.ur == nil {
				t.Fatal("a server on fast+io_uring has a flusher without io_uring")
			}
		}
	}
	t.Cleanup(func() {
		if h, ok := s.handler.(*echoHandler); ok {
			for _, c := range h.conns() {
				c.Abort()
			}
		}
		ts.Close()
		s.Stop()
	})
	return ts
}

// allTransports are every accept and write path.
var allTransports = []transport{plainTransport, fastTransport, tlsTransport, fastURingTransport}

// transports runs fn over the poller path (plain TCP, with and without the fast listener,
// the latter also written with io_uring) and the gorilla path (TLS).
func transports(t *testing.T, fn func(t *testing.T, ts *tserver)) {
	for _, tr := range allTransports {
		t.Run(tr.String(), func(t *testing.T) { fn(t, newServer(t, tr)) })
	}
}

// serverFrame is one frame as a strict client reads it.
type serverFrame struct {
	op      byte
	payload []byte
}

// readServerFrame reads one frame strictly (testutil.ReadServerFrame).
func readServerFrame(r *bufio.Reader) (serverFrame, error) {
	f, err := testutil.ReadServerFrame(r)
	return serverFrame{op: f.Op, payload: f.Payload}, err
}

// wireConn is a hand-made client for the framing rules: it writes any bytes, in any
// pieces, and reads the server's frames strictly.
type wireConn struct {
	nc net.Conn
	br *bufio.Reader
}

// defaultHeaders are a good handshake's header lines.
const defaultHeaders = "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"

// dialWire performs the opening handshake for /app/{name} over plain TCP or TLS; headers
// overrides the handshake's header lines ("": good ones) and the response is returned
// unread if it is not a 101. After a 101 the greeting has been read.
func dialWire(t testing.TB, ts *tserver, name, headers string) (*wireConn, *http.Response) {
	t.Helper()
	addr := ts.ts.Listener.Addr().String()
	var nc net.Conn
	var err error
	if ts.tls {
		nc, err = tls.DialWithDialer(&net.Dialer{Timeout: waitTimeout}, "tcp", addr, &tls.Config{InsecureSkipVerify: true})
	} else {
		nc, err = net.DialTimeout("tcp", addr, waitTimeout)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	if headers == "" {
		headers = defaultHeaders
	}
	_ = nc.SetDeadline(time.Now().Add(waitTimeout))
	req := "GET /app/" + name + "?v=1 HTTP/1.1\r\nHost: " + addr + "\r\n" + headers + "\r\n"
	if _, err := io.WriteString(nc, req); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(nc)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		return nil, resp
	}
	w := &wireConn{nc: nc, br: br}
	if name == "echo" {
		if f := w.next(t); f.op != OpText || string(f.payload) != "hello" {
			t.Fatalf("greeting %q", f.payload)
		}
	}
	return w, resp
}

func (w *wireConn) write(t testing.TB, b []byte, piece int) {
	t.Helper()
	for len(b) > 0 {
		k := min(piece, len(b))
		if _, err := w.nc.Write(b[:k]); err != nil {
			t.Fatalf("write: %v", err)
		}
		b = b[k:]
	}
}

func (w *wireConn) next(t testing.TB) serverFrame {
	t.Helper()
	_ = w.nc.SetReadDeadline(time.Now().Add(waitTimeout))
	f, err := readServerFrame(w.br)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return f
}

// closeCode reads until the server's close frame and returns its code; the server must
// then end the TCP connection.
func (w *wireConn) closeCode(t testing.TB) int {
	t.Helper()
	for {
		f := w.next(t)
		if f.op != OpClose {
			continue
		}
		code := 1005
		if len(f.payload) >= 2 {
			code = int(binary.BigEndian.Uint16(f.payload))
		}
		_ = w.nc.SetReadDeadline(time.Now().Add(closeGrace + waitTimeout))
		if _, err := io.Copy(io.Discard, w.br); err != nil && !strings.Contains(err.Error(), "reset") {
			t.Fatalf("after the close frame: %v", err)
		}
		return code
	}
}

// awaitEcho writes frames in pieces, then a text message and waits for its echo: the
// connection is healthy. It returns the text messages that came before the echo.
func (w *wireConn) awaitEcho(t testing.TB, piece int, frames ...[]byte) []string {
	t.Helper()
	for _, f := range frames {
		w.write(t, f, piece)
	}
	mark := fmt.Sprintf("probe-%d", probeCounter.Add(1))
	w.write(t, text(mark), piece)
	var before []string
	for {
		f := w.next(t)
		if f.op == OpClose {
			t.Fatalf("closed: %x", f.payload)
		}
		if f.op == OpText {
			if string(f.payload) == mark {
				return before
			}
			before = append(before, string(f.payload))
		}
	}
}

// probeCounter makes every awaitEcho's probe unique.
var probeCounter atomic.Uint64

// waitClosed waits for the next OnClose and returns its cause.
func (ts *tserver) waitClosed(t testing.TB) Cause {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout+closeGrace)
	defer cancel()
	select {
	case c := <-ts.h.closed:
		return c
	case <-ctx.Done():
		t.Fatal("no OnClose")
		return 0
	}
}
