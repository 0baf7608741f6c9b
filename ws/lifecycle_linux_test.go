//go:build linux

package ws

import (
	"context"
	"testing"

	"github.com/reverbgo/reverbgo/internal/testutil"
)

// openHandler accepts every upgrade with a Session that runs act on its connection inside
// OnOpen: after the Session has published the connection (as the protocol's socket table
// does) and before the transport reads it, the window a shutdown sweep's Abort can hit.
type openHandler struct {
	act    func(c *Conn)
	closed chan Cause
}

func (h *openHandler) Accept(_ *Request, greeting []byte) Decision {
	return Decision{Session: &openSession{h: h}, Greeting: AppendTextFrame(greeting, []byte("hello"))}
}

type openSession struct{ h *openHandler }

func (s *openSession) OnOpen(c *Conn) bool  { s.h.act(c); return true }
func (s *openSession) OnFrame(byte, []byte) {}
func (s *openSession) OnClose(cause Cause)  { s.h.closed <- cause }

// An Abort or a Close while the Session's OnOpen runs, on every accept path (the fast
// path with the head in one read and in pieces, whose socket is in the epoll set already;
// the portable path, plain and TLS): OnClose runs exactly once, and no poller keeps an
// entry for the socket. The peer never answers the close frame, so the close handshake's
// grace must end it. The fast path used to store "polled" after OnOpen: an Abort there
// closed the descriptor behind the poller's back and OnClose never ran.
func TestAbortWhileOpening(t *testing.T) {
	acts := []struct {
		name string
		act  func(c *Conn)
	}{
		{"abort", func(c *Conn) { c.Abort() }},
		{"abort from another goroutine", func(c *Conn) {
			done := make(chan struct{})
			go func() { c.Abort(); close(done) }()
			<-done
		}},
		{"close", func(c *Conn) { c.Close(4200, "bye", nil) }},
	}
	paths := []struct {
		name   string
		tr     transport
		pieces int // the request head is sent in this many pieces (raw TCP); 0: TLS
	}{
		{"plain", plainTransport, 1},
		{"fast", fastTransport, 1},
		{"fast split head", fastTransport, 3},
		{"fast io_uring", fastURingTransport, 1},
		{"tls", tlsTransport, 0},
	}
	for _, a := range acts {
		for _, p := range paths {
			t.Run(a.name+"/"+p.name, func(t *testing.T) {
				h := &openHandler{act: a.act, closed: make(chan Cause, 4)}
				s := NewServer(p.tr.options(t, Options{Handler: h}))
				ts := &tserver{s: s, ts: newHTTPServer(t, s, p.tr), tls: p.tr == tlsTransport}
				if p.pieces == 0 {
					dialWire(t, ts, "x", "")
				} else {
					head := wsHead("x")
					pieces := []string{head}
					if p.pieces == 3 {
						pieces = []string{head[:20], head[20:100], head[100:]}
					}
					rawHead(t, ts.ts.Listener.Addr().String(), pieces...)
				}
				ctx, cancel := context.WithTimeout(context.Background(), closeGrace+waitTimeout)
				defer cancel()
				select {
				case cause := <-h.closed:
					if cause != CauseLocal {
						t.Errorf("cause %d, want CauseLocal", cause)
					}
				case <-ctx.Done():
					t.Fatal("OnClose never ran")
				}
				testutil.WaitFor(t, "no poller keeps the socket", func() bool {
					for _, pl := range s.pollers.all {
						pl.mu.Lock()
						n := len(pl.conns)
						pl.mu.Unlock()
						if n != 0 {
							return false
						}
					}
					return true
				})
				if n := len(h.closed); n != 0 {
					t.Fatalf("OnClose ran %d more times", n)
				}
			})
		}
	}
}
