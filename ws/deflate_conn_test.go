package ws

import (
	"bufio"
	"crypto/tls"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// zipHandler accepts every connection with a read limit of zipLimit and echoes each data
// message through WriteCompressible, so what it sends is compressed exactly when the
// connection negotiated permessage-deflate.
type zipHandler struct {
	mu     sync.Mutex
	conns  []*Conn
	closed chan Cause
}

const zipLimit = 100 << 10

func (h *zipHandler) Accept(*Request, []byte) Decision {
	return Decision{Session: &zipSession{h: h}, MaxMessageSize: zipLimit}
}

type zipSession struct {
	h *zipHandler
	c *Conn
}

func (s *zipSession) OnOpen(c *Conn) bool {
	s.c = c
	s.h.mu.Lock()
	s.h.conns = append(s.h.conns, c)
	s.h.mu.Unlock()
	return true
}

func (s *zipSession) OnFrame(op byte, p []byte) {
	if op == OpText {
		s.c.WriteCompressible(TextFrame(p))
	}
}

func (s *zipSession) OnClose(cause Cause) { s.h.closed <- cause }

// zipServer serves a zipHandler on tr with compression on or off.
func zipServer(t *testing.T, tr transport, on bool) (*zipHandler, string) {
	h := &zipHandler{closed: make(chan Cause, 16)}
	s := NewServer(tr.options(t, Options{Handler: h, Compression: Compression{Enabled: on, MinBytes: 256, Level: 1}}))
	ts := newHTTPServer(t, s, tr)
	t.Cleanup(func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, c := range h.conns {
			c.Abort()
		}
	})
	scheme := "ws://"
	if tr == tlsTransport {
		scheme = "wss://"
	}
	return h, scheme + ts.Listener.Addr().String() + "/app/echo"
}

// Every accept path negotiates permessage-deflate with a client that offers it (gorilla's,
// which inflates what it reads), answers without context takeover, and sends messages of
// at least min_bytes compressed; a client that does not offer it, or a server with
// compression off, sees no extension and plain frames.
func TestDeflateNegotiatedOnEveryPath(t *testing.T) {
	big := `{"event":"big","data":"` + strings.Repeat(`{\"id\":12345,\"name\":\"reverb\"},`, 6000) + `"}` // ~200 KiB
	for _, tr := range allTransports {
		for _, tc := range []struct {
			name          string
			server, offer bool
		}{{"on", true, true}, {"client does not offer", true, false}, {"server off", false, true}} {
			t.Run(tr.String()+"/"+tc.name, func(t *testing.T) {
				_, url := zipServer(t, tr, tc.server)
				d := websocket.Dialer{EnableCompression: tc.offer, TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, HandshakeTimeout: waitTimeout}
				wc, resp, err := d.Dial(url, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer wc.Close()
				ext := resp.Header.Get("Sec-WebSocket-Extensions")
				want := ""
				if tc.server && tc.offer {
					want = ExtensionResponse
				}
				if ext != want {
					t.Fatalf("Sec-WebSocket-Extensions %q, want %q", ext, want)
				}
				wc.EnableWriteCompression(tc.offer)
				_ = wc.SetReadDeadline(time.Now().Add(waitTimeout))
				for _, msg := range []string{"small", strings.Repeat("x", 1024), big[:zipLimit-1]} {
					if err := wc.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
						t.Fatal(err)
					}
					_, got, err := wc.ReadMessage()
					if err != nil {
						t.Fatalf("%d bytes: %v", len(msg), err)
					}
					if string(got) != msg {
						t.Fatalf("%d bytes echoed as %d", len(msg), len(got))
					}
				}
			})
		}
	}
}

// rawDeflateConn dials with a permessage-deflate offer and reads the server's frames with
// RSV1 allowed (and checked: only where negotiated, only on data frames).
type rawDeflateConn struct {
	nc net.Conn
	br *bufio.Reader
}

func dialRawDeflate(t *testing.T, url string, offer bool) (*rawDeflateConn, http.Header) {
	t.Helper()
	addr := strings.TrimPrefix(strings.TrimPrefix(url, "ws://"), "wss://")
	addr = addr[:strings.IndexByte(addr, '/')]
	var nc net.Conn
	var err error
	if strings.HasPrefix(url, "wss://") {
		nc, err = tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true})
	} else {
		nc, err = net.Dial("tcp", addr)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(waitTimeout + closeGrace))
	hdr := defaultHeaders
	if offer {
		hdr += "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n"
	}
	if _, err := io.WriteString(nc, "GET /app/echo HTTP/1.1\r\nHost: "+addr+"\r\n"+hdr+"\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(nc)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("handshake: %v %v", err, resp)
	}
	return &rawDeflateConn{nc: nc, br: br}, resp.Header
}

// next reads one frame: its first byte and payload (inflated when RSV1 is set).
func (r *rawDeflateConn) next(t *testing.T) (byte, []byte) {
	t.Helper()
	var h [2]byte
	if _, err := io.ReadFull(r.br, h[:]); err != nil {
		t.Fatalf("read: %v", err)
	}
	n := uint64(h[1] & 0x7F)
	switch n {
	case 126:
		var b [2]byte
		_, _ = io.ReadFull(r.br, b[:])
		n = uint64(binary.BigEndian.Uint16(b[:]))
	case 127:
		var b [8]byte
		_, _ = io.ReadFull(r.br, b[:])
		n = binary.BigEndian.Uint64(b[:])
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(r.br, p); err != nil {
		t.Fatalf("read: %v", err)
	}
	if h[0]&0x40 != 0 {
		if h[0]&0x0F >= OpClose {
			t.Fatalf("RSV1 on opcode %#x", h[0]&0x0F)
		}
		p = inflateMsg(t, p)
	}
	return h[0], p
}

// closeCode reads up to the close frame and returns its code.
func (r *rawDeflateConn) closeCode(t *testing.T) int {
	t.Helper()
	for {
		b0, p := r.next(t)
		if b0&0x0F == OpClose {
			if len(p) < 2 {
				return 1005
			}
			return int(binary.BigEndian.Uint16(p))
		}
	}
}

// The raw wire on every path: a compressed frame over min_bytes, a plain one under it; a
// deflate bomb closes 1009; RSV1 misuse closes 1002.
func TestDeflateWireRules(t *testing.T) {
	msg := strings.Repeat(`{"id":1,"name":"reverb"},`, 40)
	for _, tr := range allTransports {
		t.Run(tr.String(), func(t *testing.T) {
			h, url := zipServer(t, tr, true)
			t.Run("compressed and plain", func(t *testing.T) {
				w, hdr := dialRawDeflate(t, url, true)
				if got := hdr.Get("Sec-WebSocket-Extensions"); got != ExtensionResponse {
					t.Fatalf("extension %q", got)
				}
				_, _ = w.nc.Write(clientFrame(0xC0|OpText, deflateMsg(t, []byte(msg)), true))
				if b0, p := w.next(t); b0 != 0xC1 || string(p) != msg {
					t.Fatalf("big echo: first byte %#x, %d bytes", b0, len(p))
				}
				_, _ = w.nc.Write(text("tiny"))
				if b0, p := w.next(t); b0 != 0x81 || string(p) != "tiny" {
					t.Fatalf("small echo: first byte %#x, %q", b0, p)
				}
				_ = w.nc.Close()
				<-h.closed // so that the next subtests see their own causes
			})
			misuse := []struct {
				name  string
				offer bool
				frame []byte
				want  int
				cause Cause
			}{
				{"bomb", true, clientFrame(0xC0|OpText, bomb(t), true), CloseTooBig, CauseTooBig},
				{"RSV1 without the extension", false, clientFrame(0xC0|OpText, deflateMsg(t, []byte(msg)), true), CloseProtocolError, CauseProtocol},
				{"RSV1 on a ping", true, clientFrame(0xC0|OpPing, nil, true), CloseProtocolError, CauseProtocol},
				{"RSV1 on a continuation", true, cat(clientFrame(0x40|OpText, []byte{0x4a}, true), clientFrame(0xC0|OpContinuation, []byte{0x00}, true)), CloseProtocolError, CauseProtocol},
			}
			for _, m := range misuse {
				t.Run(m.name, func(t *testing.T) {
					w, _ := dialRawDeflate(t, url, m.offer)
					_, _ = w.nc.Write(m.frame)
					if got := w.closeCode(t); got != m.want {
						t.Fatalf("close %d, want %d", got, m.want)
					}
					select {
					case cause := <-h.closed:
						// gorilla's reader (no offer, TLS) reports its own violations as
						// the peer gone, as in TestRFC6455Rules.
						if cause != m.cause && !(tr == tlsTransport && !m.offer && cause == CausePeerGone) {
							t.Fatalf("cause %d, want %d", cause, m.cause)
						}
					case <-time.After(waitTimeout + closeGrace):
						t.Fatal("no OnClose")
					}
				})
			}
		})
	}
}
