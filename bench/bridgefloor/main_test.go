package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reverbgo/reverbgo/bench/internal/benchkit"
	"github.com/reverbgo/reverbgo/internal/pusherclient"
)

var app = pusherclient.App{ID: "bench", Key: "bench-key", Secret: "bench-secret"}

const tool = "bench.echo"

// start serves h (the floor's handler, possibly wrapped) on a loopback port.
func start(t *testing.T, wrap func(http.Handler) http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := newServer(newFloor())
	if wrap != nil {
		srv.Handler = wrap(srv.Handler)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// testPage is one page socket answering every call of its conversation with the echo.
type testPage struct {
	conn            *pusherclient.Conn
	conv, clientID  string
	channel, socket string
}

// drive sets up pages (one conversation each) and makes calls calls, workers at a time,
// round-robin over the conversations, as bridgebench does, with bridgebench's checks: every
// answer must be 200 "ok" with the echoed input, and every call frame must reach the page of
// its conversation (channel and clientId). It returns the failed calls and page-side problems.
func drive(t *testing.T, addr string, pages, workers, calls, timeoutMS int) (failed []string, pageErrs []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: workers + pages}}
	defer hc.CloseIdleConnections()
	var mu sync.Mutex
	pageErr := func(s string) { mu.Lock(); pageErrs = append(pageErrs, s); mu.Unlock() }

	ps := make([]*testPage, pages)
	for i := range ps {
		c, err := pusherclient.Dial(ctx, addr, app, "floortest", 5*time.Second)
		if err != nil {
			t.Fatalf("page %d: %v", i, err)
		}
		p := &testPage{conn: c, conv: "conv-" + strconv.Itoa(i), clientID: "client-" + strconv.Itoa(i), socket: c.ID}
		p.channel = "private-toolmark.u." + p.conv
		if _, err := c.Subscribe(app, p.channel, ""); err != nil {
			t.Fatalf("page %d: subscribe: %v", i, err)
		}
		code, body, err := benchkit.PostPage(ctx, hc, addr, p.conv, c.ID, "", benchkit.EchoManifest(p.clientID, tool))
		if err != nil || code != http.StatusNoContent { // bridgebench's page requires 204
			t.Fatalf("page %d: manifest: %d %s %v", i, code, body, err)
		}
		ps[i] = p
	}
	var readers sync.WaitGroup
	for _, p := range ps {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for {
				f, err := p.conn.Read()
				if err != nil {
					return
				}
				id, input, ok := benchkit.Call(f)
				if !ok {
					continue
				}
				var m struct {
					Message struct {
						ClientID string `json:"clientId"`
						Tool     string `json:"tool"`
					} `json:"message"`
				}
				_ = json.Unmarshal([]byte(f.Str()), &m)
				if f.Channel != p.channel || m.Message.ClientID != p.clientID || m.Message.Tool != tool {
					pageErr(fmt.Sprintf("%s got a call for %s/%s/%s", p.conv, f.Channel, m.Message.ClientID, m.Message.Tool))
					continue
				}
				code, body, err := benchkit.PostPage(ctx, hc, addr, p.conv, p.socket, "", benchkit.OKResult(p.clientID, id, input))
				if err != nil || code != http.StatusNoContent {
					pageErr(fmt.Sprintf("%s: result POST %d %s %v", p.conv, code, body, err))
				}
			}
		}()
	}

	var next atomic.Int64
	var agents sync.WaitGroup
	for range workers {
		agents.Add(1)
		go func() {
			defer agents.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= calls {
					return
				}
				p := ps[i%pages]
				body, input := benchkit.EchoCall("u", p.conv, tool, i, timeoutMS)
				code, ans, err := pusherclient.API(ctx, hc, addr, app, http.MethodPost, "/apps/bench/toolmark/calls", nil, body)
				var a struct{ ID string }
				if err != nil || !benchkit.EchoedOK(code, ans, input) || json.Unmarshal(ans, &a) != nil || a.ID == "" {
					mu.Lock()
					failed = append(failed, fmt.Sprintf("call %d: %d %s %v", i, code, ans, err))
					mu.Unlock()
				}
			}
		}()
	}
	agents.Wait()
	for _, p := range ps {
		p.conn.Close()
	}
	readers.Wait()
	return failed, pageErrs
}

// TestCallsEndToEnd: a few hundred calls, 32 in flight over 8 conversations, every one
// answered with its own echo by its own page.
func TestCallsEndToEnd(t *testing.T) {
	addr := start(t, nil)
	failed, pageErrs := drive(t, addr, 8, 32, 400, 5000)
	if len(failed) > 0 || len(pageErrs) > 0 {
		t.Fatalf("%d failed calls, page errors %v; e.g. %v", len(failed), pageErrs, failed[:min(3, len(failed))])
	}
}

// TestHarnessCatchesDrops checks the check: a server that loses results (here every 25th
// result POST is answered 204 but never reaches the floor) fails exactly those calls, by
// their timeout.
func TestHarnessCatchesDrops(t *testing.T) {
	var n atomic.Int64
	var dropped atomic.Int64
	addr := start(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasPrefix(r.URL.Path, "/toolmark/bridge/") {
				b, _ := io.ReadAll(r.Body)
				if bytes.Contains(b, []byte(`"type":"result"`)) && n.Add(1)%25 == 0 {
					dropped.Add(1)
					w.WriteHeader(http.StatusNoContent)
					return
				}
				r.Body = io.NopCloser(bytes.NewReader(b))
			}
			h.ServeHTTP(w, r)
		})
	})
	failed, _ := drive(t, addr, 4, 16, 200, 300)
	if dropped.Load() == 0 || int64(len(failed)) != dropped.Load() {
		t.Fatalf("dropped %d results, %d calls failed: %v", dropped.Load(), len(failed), failed)
	}
	for _, f := range failed {
		if !strings.Contains(f, `"status":"timeout"`) {
			t.Fatalf("a dropped result should time out: %s", f)
		}
	}
}

// TestNoPage: a call for a conversation without a manifest is refused at once.
func TestNoPage(t *testing.T) {
	addr := start(t, nil)
	body, _ := benchkit.EchoCall("u", "nobody", tool, 1, 1000)
	code, _, err := pusherclient.API(context.Background(), http.DefaultClient, addr, app, http.MethodPost, "/apps/bench/toolmark/calls", nil, body)
	if err != nil || code != http.StatusNotFound {
		t.Fatalf("want 404, got %d %v", code, err)
	}
}
