package httpguard

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reverbgo/reverbgo/internal/testutil"
)

// TestBodilessRequestsHoldNoSlot: long-lived GETs (streams) do not count against MaxPending,
// so with more of them open than MaxPending a POST still gets through.
func TestBodilessRequestsHoldNoSlot(t *testing.T) {
	release := make(chan struct{})
	var streaming atomic.Int32
	ts, g := server(t, Options{MaxPending: 4, MaxPendingPerClient: 4}, func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			w.WriteHeader(200)
			http.NewResponseController(w).Flush()
			streaming.Add(1)
			<-release
			return
		}
		readAll(w, r)
	})
	defer close(release)
	const streams = 10
	for range streams {
		c, err := net.Dial("tcp", ts.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		fmt.Fprintf(c, "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
	}
	testutil.WaitFor(t, "every stream open", func() bool { return streaming.Load() == streams })
	if n := g.Pending(); n != 0 {
		t.Fatalf("%d slots held by %d open GET streams", n, streams)
	}
	resp, err := http.Post(ts.URL, "application/json", strings.NewReader(`{"a":1}`))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("POST with %d streams open: %d", streams, resp.StatusCode)
	}
}

// TestPerClientShare: one client (by X-Forwarded-For behind a trusted proxy) holding its
// share of slow bodies gets 503 for one more, while another client still gets through.
// Without a trusted proxy the header is ignored and both count as the peer.
func TestPerClientShare(t *testing.T) {
	trusted, err := NewClients([]string{"127.0.0.1", "::1"})
	if err != nil {
		t.Fatal(err)
	}
	post := func(t *testing.T, ts string, client string, n int, first string) net.Conn {
		c, err := net.Dial("tcp", ts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: %s\r\nContent-Length: %d\r\n\r\n%s", client, n, first)
		return c
	}
	read := func(t *testing.T, c net.Conn) int {
		_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("no response: %v", err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	for _, tc := range []struct {
		name    string
		clients *Clients
		otherOK bool
	}{{"trusted proxy", trusted, true}, {"no trusted proxy", nil, false}} {
		t.Run(tc.name, func(t *testing.T) {
			ts, g := server(t, Options{MaxPending: 16, MaxPendingPerClient: 3, BodyTimeout: 5 * time.Second, Clients: tc.clients}, readAll)
			addr := ts.Listener.Addr().String()
			for range 3 {
				post(t, addr, "198.51.100.1", 4, "ab")
			}
			testutil.WaitFor(t, "three pending", func() bool { return g.Pending() == 3 })
			if code := read(t, post(t, addr, "198.51.100.1", 4, "abcd")); code != http.StatusServiceUnavailable {
				t.Fatalf("the slow client's fourth: %d, want 503", code)
			}
			code := read(t, post(t, addr, "198.51.100.2", 4, "abcd"))
			if tc.otherOK && code != 200 {
				t.Fatalf("another client: %d, want 200", code)
			}
			if !tc.otherOK && code != http.StatusServiceUnavailable {
				t.Fatalf("without a trusted proxy the header chose the bucket: %d", code)
			}
		})
	}
}
