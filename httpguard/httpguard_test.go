package httpguard

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/reverbgo/reverbgo/internal/testutil"
)

// server runs h behind Guard on a real listener, as cmd/reverbgo does.
func server(t *testing.T, o Options, h http.HandlerFunc) (*httptest.Server, *Guard) {
	t.Helper()
	g := Wrap(h, o)
	ts := httptest.NewUnstartedServer(g)
	ts.Config.ReadHeaderTimeout = 2 * time.Second
	ts.Start()
	t.Cleanup(ts.Close)
	return ts, g
}

// rawPost opens a connection and sends a POST's headers announcing n body bytes plus the
// first part of the body.
func rawPost(t *testing.T, ts *httptest.Server, path string, n int, first string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", path, n, first)
	return c
}

func status(t *testing.T, c net.Conn, within time.Duration) int {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(within))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no response within %v: %v", within, err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

// readAll is a handler that reads the body and answers 200 with its length.
func readAll(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusRequestTimeout)
		return
	}
	fmt.Fprint(w, len(b))
}

// TestSlowBodyIsCut: a body that does not arrive within BodyTimeout fails its read.
func TestSlowBodyIsCut(t *testing.T) {
	errs := make(chan error, 1)
	ts, g := server(t, Options{BodyTimeout: 300 * time.Millisecond}, func(w http.ResponseWriter, r *http.Request) {
		_, err := io.ReadAll(r.Body)
		errs <- err
	})
	start := time.Now()
	rawPost(t, ts, "/", 1<<20, "{")
	select {
	case err := <-errs:
		if err == nil {
			t.Fatal("a body that never arrived read without error")
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Fatalf("cut after %v", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the slow body was never cut")
	}
	testutil.WaitFor(t, "the slot to be free", func() bool { return g.Pending() == 0 })
}

// TestLongHandlerAfterBody: once the body is read, a handler may wait far longer than
// BodyTimeout without its context being cancelled (what http.Server.ReadTimeout would do).
func TestLongHandlerAfterBody(t *testing.T) {
	var g *Guard
	ts, g := server(t, Options{BodyTimeout: 200 * time.Millisecond}, func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			t.Error(err)
		}
		if g.Pending() != 0 {
			t.Errorf("pending %d after the body was read", g.Pending())
		}
		select {
		case <-r.Context().Done():
			http.Error(w, "cancelled", http.StatusGatewayTimeout)
		case <-time.After(800 * time.Millisecond):
			fmt.Fprint(w, "done")
		}
	})
	resp, err := http.Post(ts.URL, "application/json", strings.NewReader(`{"a":1}`))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: the long wait was cancelled", resp.StatusCode)
	}
}

// TestPendingCap: MaxPending requests with unfinished bodies hold their slots; one more is
// 503 at once; finishing a body frees its slot; a body rejected unread frees it at once.
func TestPendingCap(t *testing.T) {
	ts, g := server(t, Options{MaxPending: 2, MaxPendingPerClient: 2, BodyTimeout: 5 * time.Second}, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/reject" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		readAll(w, r)
	})
	a := rawPost(t, ts, "/", 4, "ab")
	rawPost(t, ts, "/", 4, "ab")
	testutil.WaitFor(t, "two pending", func() bool { return g.Pending() == 2 })
	if code := status(t, rawPost(t, ts, "/", 4, "abcd"), 2*time.Second); code != http.StatusServiceUnavailable {
		t.Fatalf("third request: %d, want 503", code)
	}
	if _, err := a.Write([]byte("cd")); err != nil {
		t.Fatal(err)
	}
	if code := status(t, a, 2*time.Second); code != 200 {
		t.Fatalf("first request after its body: %d", code)
	}
	testutil.WaitFor(t, "one pending", func() bool { return g.Pending() == 1 })
	if code := status(t, rawPost(t, ts, "/reject", 1<<20, "x"), 2*time.Second); code != http.StatusUnauthorized {
		t.Fatalf("rejected request: %d", code)
	}
	testutil.WaitFor(t, "the rejected request's slot to be free", func() bool { return g.Pending() == 1 })
	// WebSocket upgrades are not counted.
	req, _ := http.NewRequest(http.MethodGet, ts.URL+"/", nil)
	req.Header.Set("Upgrade", "websocket")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode == http.StatusServiceUnavailable {
		t.Fatal("an upgrade was refused by the pending cap")
	}
}
