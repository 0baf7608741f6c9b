package ws

import (
	"encoding/binary"
	"net/http"
	"strings"
	"testing"
)

// RFC 6455 on every path (poller, fast listener, gorilla over TLS): framing violations fail
// the connection with the right code and cause, valid frames split at every byte work, the
// close handshake completes, and a bad handshake gets 400 / 426 with the version spoken.
func TestRFC6455Rules(t *testing.T) {
	ping := `{"event":"ping"}`
	pingBytes := []byte(ping)
	closeBody := func(code int, reason string) []byte {
		return append(binary.BigEndian.AppendUint16(nil, uint16(code)), reason...)
	}
	violations := []struct {
		name   string
		frames [][]byte
		want   int
	}{
		{"invalid UTF-8", [][]byte{text(`{"data":"` + "\xff" + `"}`)}, 1007},
		{"invalid UTF-8 in a middle fragment", [][]byte{clientFrame(OpText, []byte(`{"event":`), true), clientFrame(OpContinuation, []byte("\xed\xa0\x80"), true)}, 1007},
		{"code point cut at message end", [][]byte{clientFrame(OpText, []byte(`"\xe2`), true), clientFrame(0x80|OpContinuation, []byte("\x82"), true)}, 1007},
		{"unmasked", [][]byte{clientFrame(0x80|OpText, pingBytes, false)}, 1002},
		{"RSV1", [][]byte{clientFrame(0xC0|OpText, pingBytes, true)}, 1002},
		{"RSV2", [][]byte{clientFrame(0xA0|OpText, pingBytes, true)}, 1002},
		{"reserved opcode 3", [][]byte{clientFrame(0x83, nil, true)}, 1002},
		{"reserved control opcode 0xB", [][]byte{clientFrame(0x8B, nil, true)}, 1002},
		{"control frame over 125 bytes", [][]byte{clientFrame(0x80|OpPing, []byte(strings.Repeat("p", 126)), true)}, 1002},
		{"fragmented ping", [][]byte{clientFrame(OpPing, nil, true)}, 1002},
		{"continuation without a start", [][]byte{clientFrame(0x80|OpContinuation, pingBytes, true)}, 1002},
		{"new start inside a fragmented message", [][]byte{clientFrame(OpText, []byte("{"), true), text(ping)}, 1002},
		{"close code 1005", [][]byte{clientFrame(0x80|OpClose, closeBody(1005, ""), true)}, 1002},
		{"close code 999", [][]byte{clientFrame(0x80|OpClose, closeBody(999, ""), true)}, 1002},
		{"close reason not UTF-8", [][]byte{clientFrame(0x80|OpClose, closeBody(1000, "\xff"), true)}, 1002},
		{"header announcing too much", [][]byte{{0x81, 0xFF, 0, 0, 0, 0, 0x40, 0, 0, 0, 1, 2, 3, 4}}, 1009},
		{"fragments over the limit", [][]byte{clientFrame(OpText, []byte(strings.Repeat(" ", 600)), true), clientFrame(0x80|OpContinuation, []byte(strings.Repeat(" ", 600)), true)}, 1009},
	}
	wantCause := map[int]Cause{1002: CauseProtocol, 1007: CauseInvalidUTF8, 1009: CauseTooBig}
	transports(t, func(t *testing.T, ts *tserver) {
		for _, v := range violations {
			t.Run(v.name, func(t *testing.T) {
				w, _ := dialWire(t, ts, "echo", "")
				// One byte per write: the server meets every frame split at every byte, and
				// may close before all is written.
				for _, f := range v.frames {
					for b := f; len(b) > 0; b = b[1:] {
						if _, err := w.nc.Write(b[:1]); err != nil {
							break
						}
					}
				}
				if got := w.closeCode(t); got != v.want {
					t.Fatalf("close %d, want %d", got, v.want)
				}
				cause := ts.waitClosed(t)
				// gorilla (TLS) enforces the framing rules itself and reports them as the
				// peer gone; ours name the violation.
				if want := wantCause[v.want]; cause != want && !(ts.tls && v.want == 1002 && cause == CausePeerGone) {
					t.Fatalf("cause %d, want %d", cause, want)
				}
			})
		}
		t.Run("valid frames, one byte per write", func(t *testing.T) {
			w, _ := dialWire(t, ts, "echo", "")
			split := []byte(`{"s":"h€😀"}`)
			cut := strings.Index(string(split), "€") + 1 // inside the euro sign
			got := w.awaitEcho(t, 1,
				clientFrame(OpText, split[:cut], true),
				clientFrame(0x80|OpPing, []byte("mid"), true),
				clientFrame(0x80|OpContinuation, split[cut:], true))
			if len(got) != 1 || got[0] != string(split) {
				t.Fatalf("echoed %q, want the reassembled message", got)
			}
			long := `{"x":"` + strings.Repeat("\u00e9", 400) + `"}`
			if got := w.awaitEcho(t, 1, clientFrame(0x80|OpText, []byte(long), true)); len(got) != 1 || got[0] != long {
				t.Fatalf("echoed %d messages", len(got))
			}
		})
		t.Run("close handshake", func(t *testing.T) {
			w, _ := dialWire(t, ts, "echo", "")
			w.write(t, clientFrame(0x80|OpClose, closeBody(1000, "bye"), true), 1)
			if got := w.closeCode(t); got != 1000 {
				t.Fatalf("close answered with %d", got)
			}
			if cause := ts.waitClosed(t); cause != CausePeerGone {
				t.Fatalf("cause %d, want CausePeerGone", cause)
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
				w, resp := dialWire(t, ts, "echo", h.headers)
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
