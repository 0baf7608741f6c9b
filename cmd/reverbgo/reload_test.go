package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/reverbgo/reverbgo/config"
	"github.com/reverbgo/reverbgo/internal/pusherclient"
	"github.com/reverbgo/reverbgo/internal/testutil"
)

// reloadApps are the apps every reload case starts with.
const reloadApps = `apps:
  - {app_id: keep, key: keep-key, secret: keep-secret}
  - {app_id: gone, key: gone-key, secret: gone-secret}
  - {app_id: off, key: off-key, secret: off-secret}
  - {app_id: rekey, key: rekey-key, secret: old-secret}
  - {app_id: lim, key: lim-key, secret: lim-secret, max_connections: 1}
`

// reloadNode is a node started from a file that a case rewrites before sending SIGHUP.
type reloadNode struct {
	*servedNode
	file string
	logs *testutil.SyncBuffer
	head string // the server: line
	port int
}

func startReloadNode(t *testing.T) *reloadNode {
	t.Helper()
	host, port, _ := net.SplitHostPort(testutil.FreeAddr(t))
	r := &reloadNode{file: filepath.Join(t.TempDir(), "config.yaml"), logs: &testutil.SyncBuffer{}}
	r.port, _ = strconv.Atoi(port)
	r.head = fmt.Sprintf("server: {host: %s, port: %d, drain_delay: 0, drain_period: 0}\n", host, r.port)
	r.write(t, r.head+reloadApps)
	load := func() (*config.Config, error) { return config.Load(r.file) }
	cfg, err := load()
	if err != nil {
		t.Fatal(err)
	}
	r.servedNode = startServing(t, cfg, load, r.logs)
	return r
}

func (r *reloadNode) write(t *testing.T, body string) {
	t.Helper()
	if err := os.WriteFile(r.file, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

// reload rewrites the file, sends SIGHUP and waits for reverbgo_config_reloads_total{result}
// to count it.
func (r *reloadNode) reload(t *testing.T, body, result string) {
	t.Helper()
	before := r.reloads(t, result)
	r.write(t, body)
	r.hup <- syscall.SIGHUP
	testutil.WaitFor(t, "the reload counted as "+result, func() bool { return r.reloads(t, result) == before+1 })
}

func (r *reloadNode) reloads(t *testing.T, result string) float64 {
	t.Helper()
	mfs, err := r.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "reverbgo_config_reloads_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == result {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no reverbgo_config_reloads_total{result=%q}", result)
	return 0
}

func (r *reloadNode) dial(t *testing.T, key string) (*pusherclient.Listener, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := pusherclient.DialListener(ctx, r.base, key, pusherclient.Options{}, nil)
	if err == nil {
		t.Cleanup(func() { _ = c.Close() })
	}
	return c, err
}

func (r *reloadNode) mustDial(t *testing.T, key string) *pusherclient.Listener {
	t.Helper()
	c, err := r.dial(t, key)
	if err != nil {
		t.Fatalf("dial %s: %v", key, err)
	}
	return c
}

// refused asserts that a connection to key is refused with code.
func (r *reloadNode) refused(t *testing.T, key string, code int) {
	t.Helper()
	if _, err := r.dial(t, key); err == nil || !strings.Contains(err.Error(), strconv.Itoa(code)) {
		t.Fatalf("dial %s: %v, want a refusal %d", key, err, code)
	}
}

// trigger publishes through the HTTP API signed with secret and answers the status.
func (r *reloadNode) trigger(t *testing.T, app, secret string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := pusherclient.Trigger(ctx, http.DefaultClient, r.base, pusherclient.App{ID: app, Key: app + "-key", Secret: secret}, "ch", "ev", "{}")
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// closedWith waits for c to be closed by the server with code.
func closedWith(t *testing.T, c *pusherclient.Listener, code int) {
	t.Helper()
	testutil.WaitFor(t, fmt.Sprintf("close %d", code), func() bool { return c.Err() != nil })
	if got := closeCode(c.Err()); got != code {
		t.Fatalf("closed with %v, want %d", c.Err(), code)
	}
}

func subscribeWith(c *pusherclient.Listener, key, secret, channel string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return c.Subscribe(ctx, pusherclient.App{Key: key, Secret: secret}, channel, "")
}

// TestReloadApps: SIGHUP applies each change of apps at once, and leaves the sockets of
// the apps it does not change open.
func TestReloadApps(t *testing.T) {
	tests := []struct {
		name   string
		after  string // the apps of the new file; "" = unchanged
		result string
		before func(t *testing.T, r *reloadNode) any
		check  func(t *testing.T, r *reloadNode, state any)
	}{
		{name: "added app accepts connections and API calls",
			after:  reloadApps + "  - {app_id: new, key: new-key, secret: new-secret}\n",
			before: func(t *testing.T, r *reloadNode) any { r.refused(t, "new-key", 4001); return nil },
			check: func(t *testing.T, r *reloadNode, _ any) {
				r.mustDial(t, "new-key")
				if st := r.trigger(t, "new", "new-secret"); st != 200 {
					t.Fatalf("API of the added app: %d", st)
				}
			}},
		{name: "removed app: sockets 4001, API 404",
			after:  strings.Replace(reloadApps, "  - {app_id: gone, key: gone-key, secret: gone-secret}\n", "", 1),
			before: func(t *testing.T, r *reloadNode) any { return r.mustDial(t, "gone-key") },
			check: func(t *testing.T, r *reloadNode, s any) {
				closedWith(t, s.(*pusherclient.Listener), 4001)
				if st := r.trigger(t, "gone", "gone-secret"); st != 404 {
					t.Fatalf("API of the removed app: %d, want 404", st)
				}
				r.refused(t, "gone-key", 4001)
			}},
		{name: "disabled app: sockets 4003",
			after:  strings.Replace(reloadApps, "secret: off-secret}", "secret: off-secret, enabled: false}", 1),
			before: func(t *testing.T, r *reloadNode) any { return r.mustDial(t, "off-key") },
			check: func(t *testing.T, r *reloadNode, s any) {
				closedWith(t, s.(*pusherclient.Listener), 4003)
				r.refused(t, "off-key", 4003)
			}},
		{name: "changed secret signs and verifies with the new one",
			after:  strings.Replace(reloadApps, "old-secret", "new-secret", 1),
			before: func(t *testing.T, r *reloadNode) any { return r.mustDial(t, "rekey-key") },
			check: func(t *testing.T, r *reloadNode, s any) {
				if st := r.trigger(t, "rekey", "old-secret"); st != 401 {
					t.Fatalf("API signed with the old secret: %d, want 401", st)
				}
				if st := r.trigger(t, "rekey", "new-secret"); st != 200 {
					t.Fatalf("API signed with the new secret: %d", st)
				}
				c := s.(*pusherclient.Listener) // connected before the reload
				if err := subscribeWith(c, "rekey-key", "new-secret", "private-a"); err != nil {
					t.Fatalf("channel auth with the new secret: %v", err)
				}
				if err := subscribeWith(c, "rekey-key", "old-secret", "private-b"); err == nil {
					t.Fatal("channel auth with the old secret accepted")
				}
			}},
		{name: "changed limit applies to new connections",
			after: strings.Replace(reloadApps, "max_connections: 1", "max_connections: 2", 1),
			before: func(t *testing.T, r *reloadNode) any {
				c := r.mustDial(t, "lim-key")
				r.refused(t, "lim-key", 4004)
				return c
			},
			check: func(t *testing.T, r *reloadNode, s any) {
				r.mustDial(t, "lim-key")
				r.refused(t, "lim-key", 4004)
				if s.(*pusherclient.Listener).Dropped() {
					t.Fatal("the first socket was closed")
				}
			}},
		{name: "a file that does not pass config check keeps the running config",
			after:  reloadApps + "  - {app_id: bad, key: bad-key, secret: bad-secret, max_connections: -1}\n",
			result: "error",
			check: func(t *testing.T, r *reloadNode, _ any) {
				if !strings.Contains(r.logs.String(), "apps[5].max_connections") {
					t.Fatalf("no error naming the key:\n%s", r.logs.String())
				}
				r.refused(t, "bad-key", 4001)
				r.mustDial(t, "gone-key")
				if st := r.trigger(t, "rekey", "old-secret"); st != 200 {
					t.Fatalf("API after a failed reload: %d", st)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := startReloadNode(t)
			kept := r.mustDial(t, "keep-key")
			var state any
			if tt.before != nil {
				state = tt.before(t, r)
			}
			result := tt.result
			if result == "" {
				result = "ok"
			}
			r.reload(t, r.head+tt.after, result)
			tt.check(t, r, state)
			if kept.Dropped() {
				t.Fatalf("a socket of the unchanged app was closed: %v", kept.Err())
			}
			if st := r.trigger(t, "keep", "keep-secret"); st != 200 {
				t.Fatalf("API of the unchanged app: %d", st)
			}
		})
	}
}

// TestReloadNeedsRestart: keys outside apps are not applied; one line names them, and the
// apps of the same file are applied.
func TestReloadNeedsRestart(t *testing.T) {
	r := startReloadNode(t)
	kept := r.mustDial(t, "keep-key")
	head := strings.Replace(r.head, "port: "+strconv.Itoa(r.port), "port: "+strconv.Itoa(r.port+1), 1)
	body := head + "scaling: {channel: other}\n" + reloadApps + "  - {app_id: new, key: new-key, secret: new-secret, recovery: {enabled: true}}\n"
	r.reload(t, body, "ok")
	logs := r.logs.String()
	var line string
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, `"needs a restart"`) {
			line = l
		}
	}
	// apps[5].recovery: the node keeps no history (no app had recovery at start).
	if !strings.Contains(line, `"keys":"server.port, scaling.channel, apps[5].recovery"`) {
		t.Fatalf("needs a restart line %q:\n%s", line, logs)
	}
	r.mustDial(t, "new-key") // the apps applied, on the port as started
	if kept.Dropped() {
		t.Fatal("socket of the unchanged app closed")
	}
}

// TestRestartKeys names each changed key outside apps by its config path, and nothing for
// a change of apps alone.
func TestRestartKeys(t *testing.T) {
	base := func() *config.Config {
		c := &config.Config{Apps: []config.App{{ID: "a", Key: "k", Secret: "s"}}}
		c.ApplyDefaults()
		return c
	}
	tests := []struct {
		name   string
		change func(c *config.Config)
		want   string
	}{
		{"nothing", func(*config.Config) {}, ""},
		{"apps only", func(c *config.Config) { c.Apps[0].Secret = "t"; c.Apps = append(c.Apps, config.App{ID: "b"}) }, ""},
		{"port", func(c *config.Config) { c.Server.Port = 9 }, "server.port"},
		{"host and tls cert", func(c *config.Config) { c.Server.Host = "127.0.0.1"; c.Server.TLS.Cert = "c.pem" }, "server.host, server.tls.cert"},
		{"drain", func(c *config.Config) { n := 0; c.Server.DrainDelay = &n }, "server.drain_delay"},
		{"scaling", func(c *config.Config) { c.Scaling.Enabled = true; c.Scaling.Channel = "x" }, "scaling.enabled, scaling.channel"},
		{"metrics and console", func(c *config.Config) { c.Metrics.Enabled = true; c.Console.Enabled = true }, "console.enabled, metrics.enabled"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			next := base()
			tt.change(next)
			if got := strings.Join(restartKeys(base(), next), ", "); got != tt.want {
				t.Fatalf("restartKeys = %q, want %q", got, tt.want)
			}
		})
	}
}
