package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/reverbgo/reverbgo/config"
)

func writeTemp(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const secretsYAML = `
server: {host: 127.0.0.1, port: 9000}
metrics: {enabled: true, token: metrics-tok}
scaling: {redis_url: "redis://user:redis-pw@127.0.0.1:6379/0"}
apps:
  - {app_id: a1, key: public-key, secret: app-secret}
`

func TestConfigCheck(t *testing.T) {
	for _, v := range []string{"REVERB_APP_SECRET", "REVERB_SERVER_PORT", "REDIS_URL", "REDIS_PASSWORD"} {
		t.Setenv(v, "")
	}
	t.Setenv("REVERB_SERVER_PORT", "9100") // environment overrides apply as in start
	var out, errb bytes.Buffer
	if rc := run([]string{"config", "check", "--config", writeTemp(t, "c.yaml", secretsYAML)}, &out, &errb); rc != 0 {
		t.Fatalf("rc = %d, stderr %s", rc, errb.String())
	}
	s := out.String()
	for _, secret := range []string{"metrics-tok", "redis-pw", "app-secret"} {
		if strings.Contains(s, secret) {
			t.Errorf("output leaks %q:\n%s", secret, s)
		}
	}
	var back struct {
		Server  struct{ Port int }
		Apps    []map[string]any
		Scaling struct {
			RedisURL string `yaml:"redis_url"`
		}
		Metrics map[string]any
	}
	if err := yaml.Unmarshal(out.Bytes(), &back); err != nil {
		t.Fatalf("output is not YAML: %v\n%s", err, s)
	}
	if back.Server.Port != 9100 || back.Apps[0]["key"] != "public-key" || back.Apps[0]["secret"] != mask ||
		back.Metrics["token"] != mask || back.Scaling.RedisURL != "redis://user:"+mask+"@127.0.0.1:6379/0" {
		t.Errorf("effective config wrong:\n%s", s)
	}

	out.Reset()
	errb.Reset()
	bad := writeTemp(t, "bad.yaml", "server: {log: {format: xml}}\napps: [{app_id: a, key: k, secret: s}]\n")
	if rc := run([]string{"config", "check", "--config", bad}, &out, &errb); rc != 1 {
		t.Fatalf("bad file: rc = %d", rc)
	}
	if !strings.Contains(errb.String(), "server.log.format") || out.Len() != 0 {
		t.Errorf("bad file: stdout %q stderr %q", out.String(), errb.String())
	}
	errb.Reset()
	noCert := writeTemp(t, "tls.yaml", "server: {tls: {cert: /nonexistent/c.pem, key: /nonexistent/k.pem}}\napps: [{app_id: a, key: k, secret: s}]\n")
	if rc := run([]string{"config", "check", "--config", noCert}, io.Discard, &errb); rc != 1 || !strings.Contains(errb.String(), "server.tls") {
		t.Errorf("missing TLS files: rc = %d, stderr %q", rc, errb.String())
	}
	if rc := run([]string{"config", "lint"}, io.Discard, io.Discard); rc != 2 {
		t.Errorf("unknown config subcommand: rc = %d", rc)
	}
}

func TestMaskURL(t *testing.T) {
	for in, want := range map[string]string{
		"redis://127.0.0.1:6379":            "redis://127.0.0.1:6379",
		"redis://:pw@h:1/0":                 "redis://:" + mask + "@h:1/0",
		"rediss://u:p%40ss@h:1":             "rediss://u:" + mask + "@h:1",
		"redis://user@h":                    "redis://" + mask + "@h",
		"http://example.com/x?a=b":          "http://example.com/x?a=" + mask,
		"unix://u:secret@/tmp/redis.sock%%": mask,
		"https://example.com/hook":          "https://example.com/hook",
		"https://gw-token-1@example.com/h":  "https://" + mask + "@example.com/h",
		"https://u:p@example.com/h?a":       "https://u:" + mask + "@example.com/h?a=" + mask,
		"https://h/x?token=abc&sig=d%20e":   "https://h/x?token=" + mask + "&sig=" + mask,
		"https://h/x?token=abc#frag-secret": "https://h/x?token=" + mask + "#" + mask,
		"https://h/x#p@ss":                  "https://h/x#" + mask,
		"https://h:bad-port/?t=1":           mask,
		"not a url":                         "not a url",
	} {
		if got := maskURL(in); got != want {
			t.Errorf("maskURL(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestMetricsToken(t *testing.T) {
	reg := newMetricsRegistry()
	h := metricsHandler(reg, "s3cret", slog.New(slog.NewTextHandler(io.Discard, nil)))
	for _, tc := range []struct {
		header string
		want   int
	}{{"", 401}, {"Bearer wrong", 401}, {"Basic s3cret", 401}, {"Bearer s3cre", 401}, {"Bearer s3cret", 200}} {
		req := httptest.NewRequest("GET", "/metrics", nil)
		if tc.header != "" {
			req.Header.Set("Authorization", tc.header)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != tc.want {
			t.Errorf("Authorization %q: %d, want %d", tc.header, rec.Code, tc.want)
		}
		if tc.want == 200 && !strings.Contains(rec.Body.String(), "# HELP reverbgo_build_info") {
			t.Errorf("body lacks build info:\n%s", rec.Body.String())
		}
	}
}

func TestUpURL(t *testing.T) {
	for _, tc := range []struct {
		host, path, cert string
		want             string
	}{
		{"0.0.0.0", "", "", "http://127.0.0.1:8080/up"},
		{"127.0.0.2", "/ws", "", "http://127.0.0.2:8080/ws/up"},
		{"::", "", "c.pem", "https://[::1]:8080/up"},
	} {
		cfg := &config.Config{Server: config.Server{Host: tc.host, Port: 8080, Path: tc.path, TLS: config.TLS{Cert: tc.cert, Key: tc.cert}}}
		if got := upURL(cfg); got != tc.want {
			t.Errorf("upURL(%+v) = %q, want %q", tc, got, tc.want)
		}
	}
}

func TestNewLogger(t *testing.T) {
	var b bytes.Buffer
	l, err := newLogger(&b, config.Log{Format: "text", Level: "warn"}, "")
	if err != nil {
		t.Fatal(err)
	}
	l.Info("hidden")
	l.Warn("shown")
	if s := b.String(); strings.Contains(s, "hidden") || !strings.Contains(s, "level=WARN msg=shown") {
		t.Errorf("text/warn output %q", s)
	}
	b.Reset()
	l, _ = newLogger(&b, config.Log{Format: "json", Level: "warn"}, "debug") // the flag wins
	l.Debug("dbg")
	if s := b.String(); !strings.Contains(s, `"msg":"dbg"`) {
		t.Errorf("json/debug output %q", s)
	}
	if _, err := newLogger(&b, config.Log{Format: "json", Level: "info"}, "loud"); err == nil {
		t.Error("bad level accepted")
	}
}

// writeCert writes a fresh self-signed certificate for cn and its key.
func writeCert(t *testing.T, dir, cn string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), DNSNames: []string{cn}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

func TestCertReloader(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := writeCert(t, dir, "a.test")
	r, err := newCertReloader(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	cn := func() string {
		c, _ := r.getCertificate(nil)
		leaf, err := x509.ParseCertificate(c.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		return leaf.Subject.CommonName
	}
	if cn() != "a.test" {
		t.Fatalf("cn %q", cn())
	}
	writeCert(t, dir, "b.test")
	if err := r.reload(); err != nil || cn() != "b.test" {
		t.Fatalf("after reload: %v, cn %q", err, cn())
	}
	if err := os.WriteFile(certFile, []byte("-----BEGIN CERTIFICATE-----\ntruncated"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := r.reload(); err == nil || !strings.Contains(err.Error(), "server.tls") {
		t.Fatalf("bad pair: err %v", err)
	}
	if cn() != "b.test" {
		t.Fatalf("a bad pair replaced the certificate: cn %q", cn())
	}
}

func TestHealthcheckPinsTheConfiguredCert(t *testing.T) {
	dir := t.TempDir()
	certFile, _ := writeCert(t, dir, "other.test")
	tc, err := pinnedTLS(certFile)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}
	if _, err := client.Get(srv.URL); err == nil {
		t.Fatal("a server with another certificate was accepted")
	}
}

// Keys other packages add later are masked by name: a header map's credentials, a console
// token, nested passwords.
func TestMaskByName(t *testing.T) {
	type hook struct {
		URL     string            `mapstructure:"url"`
		Headers map[string]string `mapstructure:"headers"`
	}
	type cfg struct {
		ConsoleToken string `mapstructure:"console_token"`
		Hooks        []hook `mapstructure:"hooks"`
		Plain        string `mapstructure:"plain"`
		Empty        string `mapstructure:"api_secret"`
	}
	v := cfg{ConsoleToken: "tok-1", Plain: "visible", Hooks: []hook{{URL: "https://x/y", Headers: map[string]string{
		"Authorization": "Bearer hdr-secret", "X-Api-Key": "k-secret", "X-Trace": "trace-on"}}}}
	out, err := yaml.Marshal(toNode(reflect.ValueOf(v), ""))
	if err != nil {
		t.Fatal(err)
	}
	s := string(out)
	// Every header value is masked, even under a harmless-looking name: a gateway token can
	// sit under any header. The names stay readable.
	for _, leak := range []string{"tok-1", "hdr-secret", "k-secret", "trace-on"} {
		if strings.Contains(s, leak) {
			t.Errorf("%q leaked:\n%s", leak, s)
		}
	}
	for _, keep := range []string{"visible", "X-Trace: '" + mask + "'", "https://x/y", "api_secret: \"\""} {
		if !strings.Contains(s, keep) {
			t.Errorf("%q missing:\n%s", keep, s)
		}
	}
}

// TestConfigCheckMasksWebhooks: every webhook header value is masked whatever the header's
// name (a gateway token can hide under any of them), and so are the user info and query
// values of a webhook URL; header names (lower-cased by the loader), hosts and paths stay readable.
func TestConfigCheckMasksWebhooks(t *testing.T) {
	for _, v := range []string{"REVERB_APP_SECRET", "REVERB_SERVER_PORT", "REDIS_URL", "REDIS_PASSWORD"} {
		t.Setenv(v, "")
	}
	for _, tc := range []struct {
		name, webhook string
		hidden, shown []string
	}{
		{"secret-looking header", `{url: "https://h.example/w", headers: {Authorization: "Bearer tok-1"}}`,
			[]string{"tok-1"}, []string{"authorization: '" + mask + "'", "url: https://h.example/w"}},
		{"innocent header name", `{url: "https://h.example/w", headers: {X-Gateway: gw-value-2, X-Hook: hook-value-3}}`,
			[]string{"gw-value-2", "hook-value-3"}, []string{"x-gateway: '" + mask + "'", "x-hook: '" + mask + "'"}},
		{"query token", `{url: "https://h.example/w?token=query-tok-4&v=1"}`,
			[]string{"query-tok-4"}, []string{"url: https://h.example/w?token=" + mask + "&v=" + mask}},
		{"user info token", `{url: "https://userinfo-tok-5@h.example/w"}`,
			[]string{"userinfo-tok-5"}, []string{"url: https://" + mask + "@h.example/w"}},
		{"user and password", `{url: "https://hookuser:hook-pw-6@h.example/w"}`,
			[]string{"hook-pw-6"}, []string{"url: https://hookuser:" + mask + "@h.example/w"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := writeTemp(t, "w.yaml", "apps:\n  - {app_id: a1, key: public-key, secret: app-secret, webhooks: ["+tc.webhook+"]}\n")
			var out, errb bytes.Buffer
			if rc := run([]string{"config", "check", "--config", file}, &out, &errb); rc != 0 {
				t.Fatalf("rc = %d, stderr %s", rc, errb.String())
			}
			s := out.String()
			for _, h := range tc.hidden {
				if strings.Contains(s, h) {
					t.Errorf("output leaks %q:\n%s", h, s)
				}
			}
			for _, w := range tc.shown {
				if !strings.Contains(s, w) {
					t.Errorf("output lacks %q:\n%s", w, s)
				}
			}
		})
	}
}
