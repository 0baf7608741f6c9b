package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/reverbgo/reverbgo/auth"
	"github.com/reverbgo/reverbgo/config"
	"github.com/reverbgo/reverbgo/internal/pusherclient"
)

// servePlain runs a node the way serve does without TLS: its listener behind the pusher's
// fast WebSocket listener and newHTTPServer. It returns the node wrapped for the cluster
// tests' helpers (whose URL is the real port).
func servePlain(t *testing.T, yaml string) *testNode {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	n, err := newNode(cfg, logger, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln = n.srv.FastListener(ln, cfg.Server.Path)
	srv := newHTTPServer(n, logger, false)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		n.shutdown(ctx, func(ctx context.Context) { _ = srv.Shutdown(ctx) })
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
	// The helpers only read ts.URL.
	return &testNode{n: n, ts: &httptest.Server{URL: "http://" + addr}}
}

// h2cClient speaks only HTTP/2 with prior knowledge and counts the connections it dials.
func h2cClient(dials *atomic.Int32) *http.Client {
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	var d net.Dialer
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Protocols: p,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			return d.DialContext(ctx, network, addr)
		}}}
}

// TestH2CCallsAPI: on the plain port an agent speaking h2c gets its calls answered (200, over
// HTTP/2, all on one connection), while a WebSocket page on the same port receives them and
// answers over HTTP/1.1 and another over h2c, and plain HTTP/1.1 requests keep working.
func TestH2CCallsAPI(t *testing.T) {
	nd := servePlain(t, "apps:\n  - {app_id: "+appID+", key: "+appKey+", secret: "+secret+", toolmark: {enabled: true}}\n")
	page := connect(t, nd) // the WebSocket upgrade on the same port
	const conv, ch = "c1", "private-toolmark.u1.c1"
	page.send(pusherclient.SubscribeMessage(testApp, page.socket, ch, "", nil))
	var session struct {
		Token string `json:"token"`
	}
	_ = json.Unmarshal([]byte(page.next("toolmark.session", ch).Data), &session)
	page.next("pusher_internal:subscription_succeeded", ch)

	var dials atomic.Int32
	h2 := h2cClient(&dials)
	post := func(c *http.Client, wantProto int, path string, hdr map[string]string, body []byte) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, nd.ts.URL+path, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		res, err := c.Do(req)
		if err != nil {
			t.Errorf("POST %s: %v", path, err)
			return 0, nil
		}
		defer res.Body.Close()
		out, _ := io.ReadAll(res.Body)
		if res.ProtoMajor != wantProto {
			t.Errorf("POST %s answered over %s, want HTTP/%d", path, res.Proto, wantProto)
		}
		return res.StatusCode, out
	}
	pageHdr := map[string]string{"X-Socket-ID": page.socket, "X-Toolmark-Token": session.Token}
	manifest, _ := json.Marshal(map[string]any{"protocol": 1, "type": "manifest", "clientId": "p1", "rev": 1,
		"tools": []map[string]any{{"name": "bench.echo", "llmName": "bench_echo", "description": "Echo", "hints": map[string]any{}}}})
	if code, out := post(h2, 2, "/toolmark/bridge/"+conv, pageHdr, manifest); code != http.StatusNoContent {
		t.Fatalf("manifest over h2c: %d %s", code, out)
	}

	const calls = 8
	var wg sync.WaitGroup
	results := make(chan string, calls)
	for i := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body, _ := json.Marshal(map[string]any{"user_id": "u1", "conversation_id": conv, "tool": "bench.echo",
				"input": map[string]int{"n": i}})
			path := "/apps/" + appID + "/toolmark/calls"
			q := auth.SignRequest(http.MethodPost, path, nil, body, appKey, secret, time.Now())
			code, out := post(h2, 2, path+"?"+q.Encode(), nil, body)
			if code != http.StatusOK {
				t.Errorf("call over h2c: %d %s", code, out)
			}
			results <- string(out)
		}()
	}
	for i := range calls {
		ev := page.skipTo("toolmark.message", ch)
		var m struct {
			Message struct {
				Type, ID string
				Input    json.RawMessage
			} `json:"message"`
		}
		if err := json.Unmarshal([]byte(ev.Data), &m); err != nil || m.Message.Type != "call" {
			t.Fatalf("page got %s", ev.Data)
		}
		res, _ := json.Marshal(map[string]any{"protocol": 1, "type": "result", "clientId": "p1", "id": m.Message.ID,
			"result": map[string]any{"status": "ok", "data": m.Message.Input}})
		client, proto := http.DefaultClient, 1 // as a browser page on plain HTTP
		if i%2 == 1 {
			client, proto = h2, 2
		}
		if code, out := post(client, proto, "/toolmark/bridge/"+conv, pageHdr, res); code != http.StatusNoContent {
			t.Fatalf("result: %d %s", code, out)
		}
	}
	wg.Wait()
	close(results)
	for r := range results {
		if !strings.Contains(r, `"status":"ok"`) || !strings.Contains(r, `"data":{"n":`) {
			t.Errorf("agent got %s", r)
		}
	}
	if n := dials.Load(); n != 1 {
		t.Errorf("h2c client dialled %d connections for %d concurrent calls, want 1", n, calls)
	}

	// HTTP/1.1 on the same port is unchanged, and so is a new WebSocket upgrade.
	res, err := http.Get(nd.ts.URL + "/up")
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	if res.StatusCode != http.StatusOK || res.ProtoMajor != 1 {
		t.Fatalf("GET /up over HTTP/1.1: %d %s", res.StatusCode, res.Proto)
	}
	other := connect(t, nd)
	other.subscribe("news")
}
