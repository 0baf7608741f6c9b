//go:build linux

package pusher

import (
	"bufio"
	"bytes"
	"github.com/reverbgo/reverbgo/internal/testutil"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/reverbgo/reverbgo/config"
)

// rawHead sends head in pieces and returns the response head and first frame
// (testutil.RawHead).
func rawHead(t *testing.T, addr string, pieces ...string) (string, []byte, net.Conn) {
	t.Helper()
	return testutil.RawHead(t, addr, waitTimeout, pieces...)
}

// goodHead is an upgrade as Go's WebSocket clients send it.
const goodHead = "GET /app/app-key?protocol=7&client=js&version=8.4.0 HTTP/1.1\r\n" +
	"Host: 127.0.0.1:6001\r\n" +
	"User-Agent: Go-http-client/1.1\r\n" +
	"Connection: Upgrade\r\n" +
	"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n" +
	"Sec-WebSocket-Version: 13\r\n" +
	"Upgrade: websocket\r\n" +
	"\r\n"

func wsHead(key string) string {
	return strings.Replace(goodHead, "app-key", key, 1)
}

// The Pusher side of the fast path (the transport's own tests are in package ws): the
// fast path answers byte for byte as gorilla does, with the same connection_established
// in the response, and the socket then speaks the protocol.
func TestFastListenerSameResponse(t *testing.T) {
	slow := newServer(t, withStdListener())
	fast := newServer(t, withFastListener())
	slowHead, slowFrame, _ := rawHead(t, slow.ts.Listener.Addr().String(), wsHead(testKey))
	fastHead, fastFrame, nc := rawHead(t, fast.ts.Listener.Addr().String(), wsHead(testKey))
	if slowHead != fastHead || !strings.HasPrefix(fastHead, "HTTP/1.1 101 ") {
		t.Fatalf("fast response head\n%q\nslow\n%q", fastHead, slowHead)
	}
	sid := func(f []byte) []byte { // socket ids (and so lengths) differ; nothing else may
		f = f[2:]
		i := bytes.Index(f, []byte(`socket_id\":\"`))
		j := bytes.Index(f, []byte(`\",\"activity`))
		if i < 0 || j < i {
			t.Fatalf("no socket id in %q", f)
		}
		return append(append([]byte(nil), f[:i]...), f[j:]...)
	}
	if !bytes.Equal(sid(slowFrame), sid(fastFrame)) || len(slowFrame) == 0 {
		t.Fatalf("fast first frame %q, slow %q", fastFrame, slowFrame)
	}
	if fast.s.ConnectionCount(testAppID) != 1 {
		t.Fatalf("ConnectionCount %d", fast.s.ConnectionCount(testAppID))
	}
	// A masked pusher:ping gets a pong through the poller.
	ping := []byte(`{"event":"pusher:ping","data":{}}`)
	frame := append([]byte{0x81, 0x80 | byte(len(ping)), 0, 0, 0, 0}, ping...)
	if _, err := nc.Write(frame); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, err := nc.Read(buf)
	if err != nil || !bytes.Contains(buf[:n], []byte("pusher:pong")) {
		t.Fatalf("pong: %q %v", buf[:n], err)
	}
}

// Refusals on the fast path go the portable way and keep their Pusher codes; /up and
// keep-alive requests are net/http's.
func TestFastListenerFallbacks(t *testing.T) {
	fast := newServer(t, withFastListener(), withApp(func(a *config.App) { a.AllowedOrigins = []string{"example.com"} }))
	addr := fast.ts.Listener.Addr().String()

	if st, body := fast.rawAPI(t, "GET", "/up", nil); st != 200 || !bytes.Contains(body, []byte("OK")) {
		t.Fatalf("/up: %d %s", st, body)
	}
	// Refusals go the slow way and keep their codes.
	for _, tc := range []struct {
		name, head string
		code       int
	}{
		{"unknown app", wsHead("nope"), 4001},
		{"origin", strings.Replace(wsHead(testKey), "\r\n\r\n", "\r\nOrigin: https://evil.test\r\n\r\n", 1), 4009},
		{"protocol", strings.Replace(wsHead(testKey), "protocol=7", "protocol=4", 1), 4007},
	} {
		head, frame, _ := rawHead(t, addr, tc.head)
		if !strings.HasPrefix(head, "HTTP/1.1 101 ") || !bytes.Contains(frame, []byte(`\"code\":`+strconv.Itoa(tc.code))) {
			t.Errorf("%s: %q %q", tc.name, head, frame)
		}
	}
	// The fast path's refusal is tentative: each refusal is counted once, by the portable
	// path that sends it.
	app := fast.s.apps.Load().byKey[testKey]
	if n, m := fast.s.stats.unknownRefused[CloseAppNotFound].Load(), app.stats.refused[CloseOriginNotAllowed].Load()+app.stats.refused[CloseUnsupportedProtocol].Load(); n != 1 || m != 2 {
		t.Errorf("refusals counted: %d unknown app (want 1), %d origin+protocol (want 2)", n, m)
	}
	// A version the server does not speak gets ServeWS's 426 with the version it does.
	head, frame, _ := rawHead(t, addr, strings.Replace(wsHead(testKey), "Sec-WebSocket-Version: 13", "Sec-WebSocket-Version: 8", 1))
	if _ = frame; !strings.HasPrefix(head, "HTTP/1.1 426 ") || !strings.Contains(head, "Sec-Websocket-Version: 13") {
		t.Errorf("version 8: %q", head)
	}
	// An allowed Origin takes the fast path.
	head, frame, _ = rawHead(t, addr, strings.Replace(wsHead(testKey), "\r\n\r\n", "\r\nOrigin: https://example.com\r\n\r\n", 1))
	if !strings.HasPrefix(head, "HTTP/1.1 101 ") || !bytes.Contains(frame, []byte("connection_established")) {
		t.Errorf("allowed origin: %q %q", head, frame)
	}
	// Keep-alive requests after the first one are net/http's as well.
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	br := bufio.NewReader(nc)
	for range 2 {
		_, _ = io.WriteString(nc, "GET /up HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("keep-alive /up: %v %v", resp, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}
