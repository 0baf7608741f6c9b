package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// envNames are every variable Load reads; clearEnv blanks them (empty counts as unset) so the
// machine's environment cannot leak into a test.
var envNames = append([]string{
	"REVERB_SERVER_HOST", "REVERB_SERVER_PORT", "REVERB_SERVER_PATH", "REVERB_MAX_REQUEST_SIZE",
	"REVERB_SCALING_ENABLED", "REVERB_SCALING_CHANNEL",
	"REDIS_URL", "REDIS_HOST", "REDIS_PORT", "REDIS_USERNAME", "REDIS_PASSWORD", "REDIS_DB",
	"REDIS_CLUSTER", "REDIS_SENTINEL_HOST", "REDIS_SENTINEL_PORT", "REDIS_SENTINEL_SERVICE",
}, appEnvNames...)

func clearEnv(t *testing.T) {
	t.Helper()
	for _, n := range envNames {
		t.Setenv(n, "")
	}
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const minimal = `
apps:
  - app_id: "1"
    key: k1
    secret: s1
`

func TestLoadExampleFile(t *testing.T) {
	clearEnv(t)
	c, err := Load(filepath.Join("..", "config.yaml"))
	if err != nil {
		t.Fatalf("Load(config.yaml): %v", err)
	}
	a := c.AppByKey("app1-key")
	if a == nil || c.AppByID("app1") != a {
		t.Fatalf("app1 not indexed: %+v", c.Apps)
	}
	if len(c.Apps) != 1 || a.Secret != "app1-secret" || c.Server.Port != 8080 || c.Server.Path != "" {
		t.Fatalf("unexpected config: %+v", c)
	}
	if !a.Toolmark.Enabled || a.Toolmark.CallTimeoutMS != 30000 || a.Toolmark.MaxTimeoutMS != 600000 {
		t.Fatalf("toolmark: %+v", a.Toolmark)
	}
	if len(a.Webhooks) != 1 || a.Webhooks[0].EventTypes[0] != "toolmark_confirmed" {
		t.Fatalf("webhooks: %+v", a.Webhooks)
	}
	// The example spells out every default; loading it must equal defaults applied to the
	// credentials alone, so the comments in it cannot drift from the code.
	want := &Config{Apps: []App{{ID: "app1", Key: "app1-key", Secret: "app1-secret",
		Toolmark: Toolmark{Enabled: true}, Webhooks: a.Webhooks}}}
	want.ApplyDefaults()
	if err := want.Validate(); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("example differs from defaults:\n got %+v\nwant %+v", c, want)
	}
}

func TestLoadDefaults(t *testing.T) {
	clearEnv(t)
	c, err := Load(writeFile(t, minimal))
	if err != nil {
		t.Fatal(err)
	}
	s := c.Server
	if s.Host != "0.0.0.0" || s.Port != 8080 || s.Path != "" || s.MaxRequestSize != 10000 || s.ShutdownTimeoutSeconds != 10 {
		t.Errorf("server defaults: %+v", s)
	}
	if c.Scaling.Channel != "reverb" || c.Scaling.Enabled || c.Scaling.NodeTimeout != 10 {
		t.Errorf("scaling defaults: %+v", c.Scaling)
	}
	a := c.Apps[0]
	if !a.IsEnabled() || *a.Enabled != true || !reflect.DeepEqual(a.AllowedOrigins, []string{"*"}) ||
		a.PingInterval != 60 || a.ActivityTimeout != 30 || a.MaxConnections != 0 || a.MaxMessageSize != 10000 ||
		a.AcceptClientEventsFrom != "members" || !a.UserAuthentication() || *a.EnableUserAuthentication != true ||
		a.ClientEventsPerSecond() != 10 || a.MaxPresenceMembers != 100 || a.MaxBatchSize != 10 ||
		a.Toolmark.CallTimeoutMS != 30000 || a.Toolmark.MaxTimeoutMS != 600000 || a.Toolmark.Enabled ||
		a.Toolmark.MCP.Enabled || a.Toolmark.PageAuth != "token" {
		t.Errorf("app defaults: %+v", a)
	}
}

func TestLoadExplicitValues(t *testing.T) {
	clearEnv(t)
	c, err := Load(writeFile(t, minimal+`
    enabled: false
    enable_user_authentication: false
    client_event_rate_limit: 0
    allowed_origins: ["*.example.com"]
    accept_client_events_from: none
`))
	if err != nil {
		t.Fatal(err)
	}
	a := c.Apps[0]
	if a.IsEnabled() || a.UserAuthentication() || a.ClientEventRateLimit == nil || a.ClientEventsPerSecond() != 0 ||
		a.AllowedOrigins[0] != "*.example.com" || a.AcceptClientEventsFrom != ClientEventsNone {
		t.Fatalf("explicit values not kept: %+v", a)
	}
}

func TestServerPathNormalised(t *testing.T) {
	clearEnv(t)
	for in, want := range map[string]string{
		`""`: "", `"/"`: "", `"ws"`: "/ws", `"/ws/"`: "/ws", `" /a/b/ "`: "/a/b", `"//x//"`: "/x",
	} {
		c, err := Load(writeFile(t, "server: {path: "+in+"}\n"+minimal))
		if err != nil {
			t.Fatalf("path %s: %v", in, err)
		}
		if c.Server.Path != want {
			t.Errorf("path %s -> %q, want %q", in, c.Server.Path, want)
		}
	}
}

// TestLoadToolmarkMCP: toolmark.mcp.enabled is read per app (the exact keys).
func TestLoadToolmarkMCP(t *testing.T) {
	clearEnv(t)
	c, err := Load(writeFile(t, "server: {public_url: 'https://ws.example.com'}\n"+minimal+"    toolmark: {enabled: true, mcp: {enabled: true}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if tm := c.Apps[0].Toolmark; !tm.Enabled || !tm.MCP.Enabled {
		t.Fatalf("toolmark: %+v", tm)
	}
}

// TestLoadToolmarkValidate: toolmark.validate is read per app, "known" by default.
func TestLoadToolmarkValidate(t *testing.T) {
	clearEnv(t)
	for _, tc := range []struct{ yaml, want string }{
		{"    toolmark: {enabled: true}\n", ValidateKnown},
		{"    toolmark: {enabled: true, validate: describe_first}\n", ValidateDescribeFirst},
		{"    toolmark: {enabled: true, validate: \"off\"}\n", ValidateOff},
		{"    toolmark:\n      validate: off\n", ValidateOff}, // YAML 1.1 would read a bare off as false
	} {
		c, err := Load(writeFile(t, minimal+tc.yaml))
		if err != nil {
			t.Fatal(err)
		}
		if got := c.Apps[0].Toolmark.Validate; got != tc.want {
			t.Errorf("%q: validate %q, want %q", tc.yaml, got, tc.want)
		}
	}
}

func TestLoadRejectsUnknownKeys(t *testing.T) {
	clearEnv(t)
	tests := []struct{ yaml, want string }{
		{"colour: blue\n" + minimal, "unknown key(s): colour"},
		{"server: {prot: 8080}\n" + minimal, "server.prot"},
		{"server: {tls: {crt: x}}\n" + minimal, "server.tls.crt"},
		{"scaling: {redis: x}\n" + minimal, "scaling.redis"},
		{minimal + "    max_conections: 5\n", "apps[0].max_conections"},
		{minimal + "  - {app_id: '2', key: k2, secret: s2, pingInterval: 1}\n", "apps[1].pinginterval"},
		{minimal + "    toolmark: {enabled: true, timeout: 1}\n", "apps[0].toolmark.timeout"},
		{minimal + "    toolmark: {enabled: true, mcp: {enabled: true, path: x}}\n", "apps[0].toolmark.mcp.path"},
		{minimal + "    webhooks: [{url: 'http://x', events: [a]}]\n", "apps[0].webhooks[0].events"},
		// Reverb's PHP names that this server does not have are refused, not ignored.
		// (rate_limiting is Reverb's and is honoured, see ratelimit_test.go; options is the
		// Laravel side's connection info and has no meaning to a server.)
		{minimal + "    options: {host: x}\n", "apps[0].options"},
	}
	for _, tt := range tests {
		_, err := Load(writeFile(t, tt.yaml))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("yaml %q: error %v, want it to name %q", tt.yaml, err, tt.want)
		}
	}
}

func TestLoadBadFiles(t *testing.T) {
	clearEnv(t)
	tests := []struct{ name, yaml, want string }{
		{"type error", "server: {port: abc}\n" + minimal, "server.port"},
		{"apps not a list", "apps: 3\n", "apps"},
		{"invalid yaml", "apps: [\n", "config"},
	}
	for _, tt := range tests {
		_, err := Load(writeFile(t, tt.yaml))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want it to contain %q", tt.name, err, tt.want)
		}
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.yaml")); err == nil {
		t.Error("an explicit missing file must be an error")
	}
}

func TestLoadDefaultPath(t *testing.T) {
	clearEnv(t)
	dir := t.TempDir()
	t.Chdir(dir)
	// No ./config.yaml and no environment: nothing to serve.
	if _, err := Load(""); err == nil || !strings.Contains(err.Error(), "apps: at least one app") {
		t.Fatalf("Load(\"\") without file or env: %v", err)
	}
	// No ./config.yaml but Laravel's variables: runs from the environment alone.
	t.Setenv("REVERB_APP_ID", "env-id")
	t.Setenv("REVERB_APP_KEY", "env-key")
	t.Setenv("REVERB_APP_SECRET", "env-secret")
	c, err := Load("")
	if err != nil || c.AppByKey("env-key") == nil {
		t.Fatalf("env-only Load: %v %+v", err, c)
	}
	// ./config.yaml is read when present.
	clearEnv(t)
	if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(minimal), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err = Load("")
	if err != nil || c.AppByID("1") == nil {
		t.Fatalf("Load(\"\") with ./config.yaml: %v %+v", err, c)
	}
}

func TestAppLookup(t *testing.T) {
	c := &Config{Apps: []App{{ID: "1", Key: "a", Secret: "x"}, {ID: "2", Key: "b", Secret: "y"}}}
	// Before Validate the lookups scan, so hand-built configs in other packages' tests work.
	if c.AppByID("2") != &c.Apps[1] || c.AppByKey("a") != &c.Apps[0] || c.AppByID("3") != nil {
		t.Fatal("scan lookup")
	}
	c.ApplyDefaults()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.byID == nil || c.AppByID("2") != &c.Apps[1] || c.AppByKey("b") != &c.Apps[1] ||
		c.AppByKey("c") != nil || c.AppByID("") != nil {
		t.Fatal("indexed lookup")
	}
}
