//go:build linux

package ws

import (
	"bufio"
	"bytes"
	"github.com/reverbgo/reverbgo/internal/testutil"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// rawHead sends head in pieces and returns the response head and first frame
// (testutil.RawHead).
func rawHead(t *testing.T, addr string, pieces ...string) (string, []byte, net.Conn) {
	t.Helper()
	return testutil.RawHead(t, addr, waitTimeout, pieces...)
}

// wsHead is goodHead (head_test.go) for /app/{name}.
func wsHead(name string) string {
	return strings.Replace(goodHead, "app-key", name, 1)
}

// The fast path answers byte for byte as gorilla does, with the greeting in the same
// response, and the socket then works like any other.
func TestFastListenerSameResponse(t *testing.T) {
	slow := newServer(t, plainTransport)
	fast := newServer(t, fastTransport)
	slowHead, slowFrame, _ := rawHead(t, slow.ts.Listener.Addr().String(), wsHead("echo"))
	fastHead, fastFrame, nc := rawHead(t, fast.ts.Listener.Addr().String(), wsHead("echo"))
	if slowHead != fastHead || !strings.HasPrefix(fastHead, "HTTP/1.1 101 ") {
		t.Fatalf("fast response head\n%q\nslow\n%q", fastHead, slowHead)
	}
	if !bytes.Equal(slowFrame, fastFrame) || string(fastFrame[2:]) != "hello" {
		t.Fatalf("fast first frame %q, slow %q", fastFrame, slowFrame)
	}
	// A masked text message is echoed through the poller.
	msg := []byte(`echo me`)
	frame := append([]byte{0x81, 0x80 | byte(len(msg)), 0, 0, 0, 0}, msg...)
	if _, err := nc.Write(frame); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, err := nc.Read(buf)
	if err != nil || !bytes.Equal(buf[:n], append([]byte{0x81, byte(len(msg))}, msg...)) {
		t.Fatalf("echo: %q %v", buf[:n], err)
	}
}

// A head that arrives in pieces is completed on the poller.
func TestFastListenerSplitHead(t *testing.T) {
	fast := newServer(t, fastTransport)
	h := wsHead("echo")
	head, frame, _ := rawHead(t, fast.ts.Listener.Addr().String(), h[:20], h[20:100], h[100:])
	if !strings.HasPrefix(head, "HTTP/1.1 101 ") || !bytes.Contains(frame, []byte("hello")) {
		t.Fatalf("split head: %q %q", head, frame)
	}
}

// Everything the fast path does not take reaches net/http with its bytes intact; a
// refusal there is tentative, and the portable path asks again and refuses for good.
func TestFastListenerFallbacks(t *testing.T) {
	fast := newServer(t, fastTransport)
	addr := fast.ts.Listener.Addr().String()

	resp, err := http.Get(fast.ts.URL + "/up")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "OK" {
		t.Fatalf("/up: %d %s", resp.StatusCode, body)
	}
	for _, tc := range []struct{ name, head string }{
		{"unknown name", wsHead("nope")},
		{"origin", strings.Replace(wsHead("echo"), "\r\n\r\n", "\r\nOrigin: https://evil.test\r\n\r\n", 1)},
	} {
		head, frame, _ := rawHead(t, addr, tc.head)
		if !strings.HasPrefix(head, "HTTP/1.1 101 ") || !bytes.Contains(frame, []byte("refused")) {
			t.Errorf("%s: %q %q", tc.name, head, frame)
		}
	}
	fast.h.mu.Lock()
	tentative, refused := fast.h.tentative, fast.h.refused
	fast.h.mu.Unlock()
	if tentative != 2 || refused != 2 {
		t.Errorf("refusals: %d tentative, %d final; want 2 and 2", tentative, refused)
	}
	// A version the server does not speak gets Upgrade's 426 with the version it does.
	head, _, _ := rawHead(t, addr, strings.Replace(wsHead("echo"), "Sec-WebSocket-Version: 13", "Sec-WebSocket-Version: 8", 1))
	if !strings.HasPrefix(head, "HTTP/1.1 426 ") || !strings.Contains(head, "Sec-Websocket-Version: 13") {
		t.Errorf("version 8: %q", head)
	}
	// An Origin the handler accepts takes the fast path.
	head, frame, _ := rawHead(t, addr, strings.Replace(wsHead("echo"), "\r\n\r\n", "\r\nOrigin: https://example.com\r\n\r\n", 1))
	if !strings.HasPrefix(head, "HTTP/1.1 101 ") || !bytes.Contains(frame, []byte("hello")) {
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

// Accepted sockets get TCP_NODELAY: without it, Nagle holds back every small frame that
// follows an unacknowledged one.
func TestFastListenerNoDelay(t *testing.T) {
	fast := newServer(t, fastTransport)
	rawHead(t, fast.ts.Listener.Addr().String(), wsHead("echo"))
	// The 101 leaves a moment before the socket is registered.
	testutil.WaitFor(t, "socket registered", func() bool { return len(fast.h.conns()) > 0 })
	var nodelay int
	var err error
	for _, c := range fast.h.conns() {
		_ = c.Control(func(fd uintptr) { nodelay, err = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_NODELAY) })
	}
	if err != nil || nodelay != 1 {
		t.Fatalf("TCP_NODELAY %d, %v", nodelay, err)
	}
}
