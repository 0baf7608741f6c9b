package api

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/reverbgo/reverbgo/apisign/apisigntest"
	"github.com/reverbgo/reverbgo/internal/testutil"
)

// The Pusher HTTP API gives exactly the refusals of the shared signing table, mounted at
// the root and under a prefix, over a real HTTP connection.
func TestSignedAPIRefusals(t *testing.T) {
	ts := newServer(t, withPrefix("/reverb"))
	for _, prefix := range []string{"", "/reverb"} {
		t.Run("prefix="+prefix, func(t *testing.T) {
			apisigntest.Run(t, apisigntest.Surface{
				Method:         "POST",
				Prefix:         prefix,
				Path:           "/apps/" + testAppID + "/events",
				UnknownAppPath: "/apps/999/events",
				Key:            testKey,
				Secret:         testSecret,
				Body:           []byte(`{"name":"e","channel":"c","data":"x"}`),
				Accepted:       200,
				MaxBody:        ts.cfg.Server.MaxRequestSize,
				Now:            time.Now,
				Do: func(t testing.TB, method, target string, body io.Reader, n int64) (int, []byte) {
					req, err := http.NewRequest(method, ts.ts.URL+target, body)
					if err != nil {
						t.Fatal(err)
					}
					req.ContentLength = n
					return testutil.Do(t, ts.ts.Client(), req)
				},
			})
		})
	}
}

// An unauthenticated request announcing a 100 kB body (under the 256 KiB net/http would
// drain to keep the connection) and sending almost none of it is
// answered 401 at once and its connection closed: nothing waits for, or drains, the body.
func TestUnsignedSlowBodyAnsweredAndClosed(t *testing.T) {
	ts := newServer(t)
	nc, err := net.Dial("tcp", ts.ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(waitTimeout))
	head := "POST /apps/" + testAppID + "/events?auth_key=" + testKey + " HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n{"
	if _, err := nc.Write([]byte(head)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(nc), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 401 || !resp.Close {
		t.Fatalf("status %d, close %v; want 401 and the connection closed", resp.StatusCode, resp.Close)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	if _, err := nc.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("after the answer: %v, want EOF (connection closed)", err)
	}
}
