package main

import (
	"bufio"
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/reverbgo/reverbgo/config"
)

// TestConsoleInCluster: two nodes on one Redis, a subscriber on node B, the console of node A.
// The console names node A and lists B's channel with its cluster-wide count, and Redis as ok.
func TestConsoleInCluster(t *testing.T) {
	mr := miniredis.RunT(t)
	var nodes []*testNode
	for i := 0; i < 2; i++ {
		cfg := &config.Config{
			Apps:    []config.App{{ID: appID, Key: appKey, Secret: secret}},
			Scaling: config.Scaling{Enabled: true, RedisURL: "redis://" + mr.Addr() + "/0", Channel: "console-test"},
			Console: config.Console{Enabled: true, Token: "tok"},
		}
		cfg.ApplyDefaults()
		nodes = append(nodes, startNode(t, cfg))
	}
	a, b := nodes[0], nodes[1]
	connect(t, b).subscribe("orders")

	cookie := consoleLogin(t, a.ts.URL, "tok")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", a.ts.URL+"/console/api/stream?app="+appID, nil)
	req.AddCookie(cookie)
	stream, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Body.Close()
	want := map[string]string{
		"hello":    `"clustered":true,"history":`,
		"node":     `"node":"` + a.n.cl.node + `"`,
		"channels": `{"name":"orders","type":"public","subscriptions":1}`,
		"redis":    `"redis":"ok"`,
	}
	r := bufio.NewReader(stream.Body)
	for len(want) > 0 {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("stream ended (%v) before %v", err, want)
		}
		for k, w := range want {
			if strings.Contains(line, w) {
				delete(want, k)
			}
		}
	}
}

// TestShutdownEndsConsoleStreams: an open console stream must not hold graceful shutdown
// until its timeout (net/http's Shutdown waits for running handlers).
func TestShutdownEndsConsoleStreams(t *testing.T) {
	cfg := &config.Config{Apps: []config.App{{ID: appID, Key: appKey, Secret: secret}}, Console: config.Console{Enabled: true, Token: "tok"}}
	cfg.ApplyDefaults()
	nd := buildNode(t, cfg, prometheus.NewRegistry())
	ts := httptest.NewServer(nd.e)
	defer ts.Close()
	req, _ := http.NewRequest("GET", ts.URL+"/console/api/stream?app="+appID, nil)
	req.AddCookie(consoleLogin(t, ts.URL, "tok"))
	stream, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Body.Close()
	if _, err := bufio.NewReader(stream.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	nd.shutdown(ctx, func(ctx context.Context) { _ = ts.Config.Shutdown(ctx) })
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("shutdown took %v with a console open", took)
	}
}

// consoleLogin logs in to the console at base with token, as the login form does (same-origin
// POST), and returns the session cookie.
func consoleLogin(t *testing.T, base, token string) *http.Cookie {
	t.Helper()
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, _ := http.NewRequest("POST", base+"/console/login", strings.NewReader(url.Values{"token": {token}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", base)
	res, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusSeeOther || len(res.Cookies()) != 1 {
		t.Fatalf("console login: %d", res.StatusCode)
	}
	return res.Cookies()[0]
}
