//go:build unix

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/reverbgo/reverbgo/bridge"
	"github.com/reverbgo/reverbgo/channels"
	"github.com/reverbgo/reverbgo/config"
	"github.com/reverbgo/reverbgo/mcp"
	"github.com/reverbgo/reverbgo/pusher"
)

// startServer wires an in-process reverbgo the way cmd/reverbgo does (pusher server, bridge,
// echo) on a loopback port and returns that port.
func startServer(t *testing.T) int {
	t.Helper()
	zero := 0
	cfg := &config.Config{Apps: []config.App{{
		ID: "bench", Key: "bench-key", Secret: "bench-secret",
		MaxMessageSize: 100000, ClientEventRateLimit: &zero,
		Toolmark: config.Toolmark{Enabled: true, MCP: config.ToolmarkMCP{Enabled: true}},
	}}}
	cfg.Server.PublicURL = "http://mcp.invalid" // the handler below gets the real one; config only checks one is set
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv := pusher.NewServer(pusher.Options{Config: cfg, Registry: channels.NewRegistry(channels.Options{}), Logger: logger})
	br := bridge.New(bridge.Options{Publisher: srv, Sockets: srv, Apps: cfg, Logger: logger})
	e := echo.New()
	srv.Routes(e, "")
	g := e.Group("")
	br.Register(g, "")
	ts := httptest.NewUnstartedServer(e)
	// The MCP endpoint as cmd/reverbgo mounts it, with public_url the loopback address the
	// bench names in its tokens' aud.
	mcpSrv := mcp.New(mcp.Options{Bridge: br, Apps: cfg, Logger: logger,
		PublicURL: "http://" + ts.Listener.Addr().String()})
	g.Any("/toolmark/mcp", echo.WrapHandler(mcpSrv))
	ts.Config.Protocols = new(http.Protocols) // as cmd/reverbgo's plain port: HTTP/1.1 and h2c
	ts.Config.Protocols.SetHTTP1(true)
	ts.Config.Protocols.SetUnencryptedHTTP2(true)
	ts.Start()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		mcpSrv.Close()
		_ = srv.Shutdown(ctx)
		br.Close()
		ts.Close()
	})
	u, _ := url.Parse(ts.URL)
	port, _ := strconv.Atoi(u.Port())
	return port
}

func testConfig(port int) Config {
	return Config{
		Host: "127.0.0.1", Port: port, AppID: "bench", Key: "bench-key", Secret: "bench-secret",
		Pages: 3, Inflight: 4, Calls: 30, Warmup: 4,
		CallTimeout: 3 * time.Second, Timeout: 20 * time.Second,
	}
}

func TestRunAgainstInProcessServer(t *testing.T) {
	port := startServer(t)
	res, err := Run(context.Background(), testConfig(port))
	if err != nil {
		t.Fatal(err)
	}
	if res.Calls != 30 || res.OK != 30 || res.Errors != 0 {
		t.Fatalf("calls %d ok %d errors %d (%v %v %v)", res.Calls, res.OK, res.Errors,
			res.ErrorKinds, res.PageErrorKinds, res.ErrorSamples)
	}
	if res.Correlated != 30 {
		t.Fatalf("correlated %d of 30", res.Correlated)
	}
	if res.CallsPerS <= 0 || res.RoundTrip.N != 30 || res.RoundTrip.P50 <= 0 {
		t.Fatalf("bad figures: %+v", res)
	}
	// The legs are measured on one clock: overhead = dispatch + return, and none is negative.
	if res.Dispatch.Min < 0 || res.Return.Min < 0 || res.Overhead.Min < 0 || res.PageThink.Min < 0 {
		t.Fatalf("negative leg: %+v", res)
	}
	if res.ServerCPUS != -1 {
		t.Fatalf("server CPU without --pid: %v", res.ServerCPUS)
	}
}

// TestRunH2C runs the agent's calls, and then the pages' POSTs too, over HTTP/2 with prior
// knowledge.
func TestRunH2C(t *testing.T) {
	port := startServer(t)
	for _, mode := range []string{"agent", "all"} {
		cfg := testConfig(port)
		cfg.H2C = mode
		res, err := Run(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if res.OK != 30 || res.Errors != 0 || res.Correlated != 30 || res.H2C != mode {
			t.Fatalf("h2c %s: ok %d errors %d correlated %d (%v %v %v)", mode, res.OK, res.Errors, res.Correlated,
				res.ErrorKinds, res.PageErrorKinds, res.ErrorSamples)
		}
	}
	cfg := testConfig(port)
	cfg.H2C = "pages"
	if _, err := Run(context.Background(), cfg); err == nil {
		t.Fatal("an unknown --h2c mode was accepted")
	}
}

// TestRunAgents runs the same calls with the agent on either surface: every call answered
// with its echo, correlated with its page record, no error; an unknown surface is refused.
func TestRunAgents(t *testing.T) {
	port := startServer(t)
	for _, tc := range []struct {
		agent, h2c string
	}{{"calls", ""}, {"mcp", ""}, {"mcp", "agent"}} {
		t.Run(tc.agent+"/"+tc.h2c, func(t *testing.T) {
			cfg := testConfig(port)
			cfg.Agent, cfg.H2C = tc.agent, tc.h2c
			res, err := Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			if res.Agent != tc.agent || res.Calls != 30 || res.OK != 30 || res.Errors != 0 || res.Correlated != 30 {
				t.Fatalf("agent %s: calls %d ok %d errors %d correlated %d (%v %v %v)", res.Agent, res.Calls, res.OK,
					res.Errors, res.Correlated, res.ErrorKinds, res.PageErrorKinds, res.ErrorSamples)
			}
			if res.Dispatch.Min < 0 || res.Return.Min < 0 || res.Overhead.Min < 0 {
				t.Fatalf("negative leg: %+v", res)
			}
		})
	}
	cfg := testConfig(port)
	cfg.Agent = "grpc"
	if _, err := Run(context.Background(), cfg); err == nil {
		t.Fatal("an unknown --agent was accepted")
	}
}

// TestThinkTime checks that the simulated tool time is held on the page side and taken out of
// the overhead.
func TestThinkTime(t *testing.T) {
	port := startServer(t)
	cfg := testConfig(port)
	cfg.Calls, cfg.Warmup, cfg.Think = 8, 0, 30*time.Millisecond
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.OK != 8 || res.Correlated != 8 {
		t.Fatalf("ok %d correlated %d (%v)", res.OK, res.Correlated, res.ErrorSamples)
	}
	if res.RoundTrip.Min < 30 || res.PageThink.Min < 30 {
		t.Fatalf("think time not applied: rt %+v think %+v", res.RoundTrip, res.PageThink)
	}
	// Per call overhead = round trip - page time, and page time >= 30ms, so every order
	// statistic of the overhead is at least 30ms below the round trip's.
	if res.Overhead.P50 > res.RoundTrip.P50-30 || res.Overhead.Max > res.RoundTrip.Max-30 {
		t.Fatalf("overhead %+v should exclude the 30ms think time (rt %+v)", res.Overhead, res.RoundTrip)
	}
}

// TestMainOutput runs the command end to end: readable lines, then one JSON line last.
func TestMainOutput(t *testing.T) {
	port := startServer(t)
	var out, errOut bytes.Buffer
	code := run([]string{"--port", strconv.Itoa(port), "--pages", "2", "--inflight", "2",
		"--calls", "6", "--warmup", "0", "--timeout", "20s", "--quiet"}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out.String(), errOut.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var res Result
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil {
		t.Fatalf("last line is not JSON: %q", lines[len(lines)-1])
	}
	if res.Mode != "bridge" || res.OK != 6 {
		t.Fatalf("summary %+v", res)
	}
}

func TestRefusesNonLoopback(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"--host", "10.0.0.1"}, &out, &errOut); code != 1 {
		t.Fatalf("exit %d for a non-loopback host", code)
	}
	for _, h := range []string{"127.0.0.1", "::1", "localhost", "127.0.0.2"} {
		if !loopback(h) {
			t.Errorf("%s should be loopback", h)
		}
	}
	if loopback("example.com") || loopback("0.0.0.0") {
		t.Error("non-loopback host accepted")
	}
}

func TestSetupFailsFast(t *testing.T) {
	port := startServer(t)
	cfg := testConfig(port)
	cfg.Secret = "wrong"
	if _, err := Run(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "setup") {
		t.Fatalf("want a setup error with a bad secret, got %v", err)
	}
}

func TestRank(t *testing.T) {
	d := make([]time.Duration, 100)
	for i := range d {
		d[i] = time.Duration(100-i) * time.Millisecond
	}
	l := summarize(d)
	if l.P50 != 50 || l.P99 != 99 || l.Max != 100 || l.Min != 1 || l.N != 100 {
		t.Fatalf("%+v", l)
	}
	if summarize(nil).N != 0 {
		t.Fatal("empty")
	}
}
