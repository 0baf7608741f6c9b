package pusher

import (
	"bufio"
	"crypto/tls"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/reverbgo/reverbgo/config"
	"github.com/reverbgo/reverbgo/ws"
)

// wireConn is a hand-made client for the framing rules: it writes any bytes, in any
// pieces, and reads the server's frames strictly.
type wireConn struct {
	nc net.Conn
	br *bufio.Reader
}

// dialWire performs the opening handshake over plain TCP or TLS; head overrides the
// handshake's header lines (nil: a good one) and the response is returned unread if it
// is not a 101.
func dialWire(t *testing.T, ts *tserver, headers string) (*wireConn, *http.Response) {
	t.Helper()
	addr := ts.ts.Listener.Addr().String()
	var nc net.Conn
	var err error
	if strings.HasPrefix(ts.ts.URL, "https") {
		nc, err = tls.DialWithDialer(&net.Dialer{Timeout: waitTimeout}, "tcp", addr, &tls.Config{InsecureSkipVerify: true})
	} else {
		nc, err = net.DialTimeout("tcp", addr, waitTimeout)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	if headers == "" {
		headers = "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
	}
	_ = nc.SetDeadline(time.Now().Add(waitTimeout))
	req := "GET /app/" + ts.app.Key + "?protocol=7 HTTP/1.1\r\nHost: " + addr + "\r\n" + headers + "\r\n"
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
	if f := w.next(t); f.op != ws.OpText || !strings.Contains(string(f.payload), "connection_established") {
		t.Fatalf("first frame %q", f.payload)
	}
	return w, resp
}

func (w *wireConn) write(t *testing.T, b []byte, piece int) {
	t.Helper()
	for len(b) > 0 {
		k := min(piece, len(b))
		if _, err := w.nc.Write(b[:k]); err != nil {
			t.Fatalf("write: %v", err)
		}
		b = b[k:]
	}
}

func (w *wireConn) next(t *testing.T) serverFrame {
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
func (w *wireConn) closeCode(t *testing.T) int {
	t.Helper()
	for {
		f := w.next(t)
		if f.op != ws.OpClose {
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

// awaitPong sends a pusher:ping and waits for the pong: the connection is healthy.
func (w *wireConn) awaitPong(t *testing.T, piece int, frames ...[]byte) {
	t.Helper()
	for _, f := range frames {
		w.write(t, f, piece)
	}
	for {
		f := w.next(t)
		if f.op == ws.OpClose {
			t.Fatalf("closed: %x", f.payload)
		}
		if f.op == ws.OpText && strings.Contains(string(f.payload), "pusher:pong") {
			return
		}
	}
}

// transports runs a test over the poller path (plain TCP, with and without the fast
// listener) and the gorilla path (TLS).
func transports(t *testing.T, fn func(t *testing.T, ts *tserver)) {
	for _, tr := range []struct {
		name string
		opts []serverOpt
	}{{"plain", nil}, {"fast", []serverOpt{withFastListener()}}, {"tls", []serverOpt{withTLS()}}} {
		t.Run(tr.name, func(t *testing.T) {
			fn(t, newServer(t, append(tr.opts, withApp(func(a *config.App) { a.MaxMessageSize = 1000 }))...))
		})
	}
}

func TestRFC6455Rules(t *testing.T) {
	ping := `{"event":"pusher:ping","data":{}}`
	pingBytes := []byte(ping)
	closeBody := func(code int, reason string) []byte {
		return append(binary.BigEndian.AppendUint16(nil, uint16(code)), reason...)
	}
	violations := []struct {
		name   string
		frames [][]byte
		want   int
	}{
		{"invalid UTF-8", [][]byte{text(`{"event":"client-x","channel":"private-a","data":"` + "\xff" + `"}`)}, 1007},
		{"invalid UTF-8 in a middle fragment", [][]byte{clientFrame(ws.OpText, []byte(`{"event":`), true), clientFrame(ws.OpContinuation, []byte("\xed\xa0\x80"), true)}, 1007},
		{"code point cut at message end", [][]byte{clientFrame(ws.OpText, []byte(`"\xe2`), true), clientFrame(0x80|ws.OpContinuation, []byte("\x82"), true)}, 1007},
		{"unmasked", [][]byte{clientFrame(0x80|ws.OpText, pingBytes, false)}, 1002},
		{"RSV1", [][]byte{clientFrame(0xC0|ws.OpText, pingBytes, true)}, 1002},
		{"RSV2", [][]byte{clientFrame(0xA0|ws.OpText, pingBytes, true)}, 1002},
		{"reserved opcode 3", [][]byte{clientFrame(0x83, nil, true)}, 1002},
		{"reserved control opcode 0xB", [][]byte{clientFrame(0x8B, nil, true)}, 1002},
		{"control frame over 125 bytes", [][]byte{clientFrame(0x80|ws.OpPing, []byte(strings.Repeat("p", 126)), true)}, 1002},
		{"fragmented ping", [][]byte{clientFrame(ws.OpPing, nil, true)}, 1002},
		{"continuation without a start", [][]byte{clientFrame(0x80|ws.OpContinuation, pingBytes, true)}, 1002},
		{"new start inside a fragmented message", [][]byte{clientFrame(ws.OpText, []byte("{"), true), text(ping)}, 1002},
		{"close code 1005", [][]byte{clientFrame(0x80|ws.OpClose, closeBody(1005, ""), true)}, 1002},
		{"close code 999", [][]byte{clientFrame(0x80|ws.OpClose, closeBody(999, ""), true)}, 1002},
		{"close reason not UTF-8", [][]byte{clientFrame(0x80|ws.OpClose, closeBody(1000, "\xff"), true)}, 1002},
		{"header announcing too much", [][]byte{{0x81, 0xFF, 0, 0, 0, 0, 0x40, 0, 0, 0, 1, 2, 3, 4}}, 1009},
		{"fragments over the limit", [][]byte{clientFrame(ws.OpText, []byte(strings.Repeat(" ", 600)), true), clientFrame(0x80|ws.OpContinuation, []byte(strings.Repeat(" ", 600)), true)}, 1009},
	}
	transports(t, func(t *testing.T, ts *tserver) {
		for _, v := range violations {
			t.Run(v.name, func(t *testing.T) {
				w, _ := dialWire(t, ts, "")
				for _, f := range v.frames { // the server may close before all is written
					for b := f; len(b) > 0; b = b[min(3, len(b)):] {
						if _, err := w.nc.Write(b[:min(3, len(b))]); err != nil {
							break
						}
					}
				}
				if got := w.closeCode(t); got != v.want {
					t.Fatalf("close %d, want %d", got, v.want)
				}
			})
		}
		t.Run("valid frames, one byte per write", func(t *testing.T) {
			w, _ := dialWire(t, ts, "")
			split := []byte(`{"event":"pusher:ping","data":{"s":"h€😀"}}`)
			cut := strings.Index(string(split), "€") + 1 // inside the euro sign
			w.awaitPong(t, 1,
				clientFrame(ws.OpText, split[:cut], true),
				clientFrame(0x80|ws.OpPing, []byte("mid"), true),
				clientFrame(0x80|ws.OpContinuation, split[cut:], true))
			w.awaitPong(t, 1, clientFrame(0x80|ws.OpText, []byte(`{"event":"pusher:ping","data":{"x":"`+strings.Repeat("\u00e9", 400)+`"}}`), true))
		})
		t.Run("close handshake", func(t *testing.T) {
			w, _ := dialWire(t, ts, "")
			w.write(t, clientFrame(0x80|ws.OpClose, closeBody(1000, "bye"), true), 1)
			if got := w.closeCode(t); got != 1000 {
				t.Fatalf("close answered with %d", got)
			}
		})
		handshakes := []struct {
			name, headers string
			status        int
		}{
			{"no version", "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n", http.StatusUpgradeRequired},
			{"version 8", "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 8\r\n", http.StatusUpgradeRequired},
			{"short key", "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZQ==\r\nSec-WebSocket-Version: 13\r\n", http.StatusBadRequest},
			{"no key", "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n", http.StatusBadRequest},
		}
		for _, h := range handshakes {
			t.Run("handshake "+h.name, func(t *testing.T) {
				w, resp := dialWire(t, ts, h.headers)
				if w != nil {
					t.Fatal("upgraded")
				}
				if resp.StatusCode != h.status {
					t.Fatalf("status %d, want %d", resp.StatusCode, h.status)
				}
				if v := resp.Header.Get("Sec-WebSocket-Version"); v != "13" {
					t.Fatalf("Sec-WebSocket-Version %q, want 13", v)
				}
			})
		}
	})
}
