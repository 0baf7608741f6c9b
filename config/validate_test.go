package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestValidationErrors loads each bad file and checks the error names the key.
func TestValidationErrors(t *testing.T) {
	clearEnv(t)
	app2 := "  - {app_id: '2', key: k2, secret: s2"
	tests := []struct {
		name string
		yaml string
		want string
	}{
		{"no apps", "server: {port: 8080}\n", "apps: at least one app is required"},
		{"empty apps", "apps: []\n", "apps: at least one app is required"},
		{"duplicate app id", minimal + "  - {app_id: '1', key: k2, secret: s2}\n", `apps[1].app_id: duplicate of apps[0].app_id "1"`},
		{"duplicate key", minimal + "  - {app_id: '2', key: k1, secret: s2}\n", "apps[1].key: duplicate of apps[0].key"},
		{"empty app_id", "apps: [{key: k, secret: s}]\n", "apps[0].app_id: must not be empty"},
		{"empty key", "apps: [{app_id: a, secret: s}]\n", "apps[0].key: must not be empty"},
		{"empty secret", "apps: [{app_id: a, key: k}]\n", "apps[0].secret: must not be empty"},
		{"key with colon", "apps: [{app_id: a, key: 'k:1', secret: s}]\n", "apps[0].key: must be printable ASCII"},
		{"app_id with slash", "apps: [{app_id: 'a/b', key: k, secret: s}]\n", "apps[0].app_id: must be printable ASCII"},
		{"bad enum", minimal + app2 + ", accept_client_events_from: everyone}\n",
			"apps[1].accept_client_events_from: must be one of members, all, none"},
		{"enum is case-sensitive", minimal + "    accept_client_events_from: Members\n", "apps[0].accept_client_events_from"},
		{"origin glob in the middle", minimal + "    allowed_origins: [\"app-*.example.com\"]\n", "apps[0].allowed_origins[0]: origin pattern"},
		{"bad page_auth", minimal + "    toolmark: {page_auth: none}\n", "apps[0].toolmark.page_auth: must be one of token, socket_id"},
		{"bad validate", minimal + "    toolmark: {validate: always}\n", "apps[0].toolmark.validate: must be one of known, describe_first, off"},
		{"public_url with a path", "server: {public_url: 'https://ws.example.com/x'}\n" + minimal, "server.public_url: must be an absolute http(s) URL without path"},
		{"public_url without scheme", "server: {public_url: 'ws.example.com'}\n" + minimal, "server.public_url"},
		{"trusted proxy not a CIDR", "server: {trusted_proxies: ['10.0.0.0/33']}\n" + minimal, "server.trusted_proxies[0]: must be an IP address or a CIDR"},
		{"mcp issuer without keys", minimal + "    toolmark: {mcp: {issuer: 'https://a.example'}}\n", "apps[0].toolmark.mcp.jwks_url: one of jwks_url and jwks_file"},
		{"mcp keys without issuer", minimal + "    toolmark: {mcp: {jwks_file: /k.json}}\n", "apps[0].toolmark.mcp.issuer: must be set with jwks_url or jwks_file"},
		{"mcp two key sources", minimal + "    toolmark: {mcp: {issuer: 'https://a', jwks_url: 'https://a/j', jwks_file: /k.json}}\n", "apps[0].toolmark.mcp.jwks_file: must not be set with jwks_url"},
		{"mcp jwks_url relative", minimal + "    toolmark: {mcp: {issuer: 'https://a', jwks_url: /j}}\n", "apps[0].toolmark.mcp.jwks_url: must be an absolute http(s) URL"},
		{"mcp issuer is the app key", minimal + "    toolmark: {mcp: {issuer: k1, jwks_file: /k.json}}\n", "apps[0].toolmark.mcp.issuer: must differ from the app key"},
		{"mcp duplicate issuer", minimal + "    toolmark: {mcp: {issuer: 'https://a', jwks_file: /k.json}}\n" + app2 + ", toolmark: {mcp: {issuer: 'https://a', jwks_file: /k.json}}}\n", `apps[1].toolmark.mcp.issuer: duplicate of apps[0].toolmark.mcp.issuer "https://a"`},
		{"mcp authorization server relative", minimal + "    toolmark: {mcp: {authorization_servers: [/as]}}\n", "apps[0].toolmark.mcp.authorization_servers[0]: must be an absolute http(s) URL"},
		{"mcp negative lifetime", minimal + "    toolmark: {mcp: {max_token_lifetime_s: -1}}\n", "apps[0].toolmark.mcp.max_token_lifetime_s: must be > 0"},
		{"negative max_connections", minimal + "    max_connections: -1\n", "apps[0].max_connections: must be >= 0"},
		{"negative max_message_size", minimal + "    max_message_size: -1\n", "apps[0].max_message_size: must be > 0"},
		{"negative rate limit", minimal + "    client_event_rate_limit: -1\n", "apps[0].client_event_rate_limit: must be >= 0"},
		{"negative presence members", minimal + "    max_presence_members: -5\n", "apps[0].max_presence_members: must be > 0"},
		{"negative batch size", minimal + "    max_batch_size: -1\n", "apps[0].max_batch_size: must be > 0"},
		{"negative request size", "server: {max_request_size: -1}\n" + minimal, "server.max_request_size: must be > 0"},
		{"negative shutdown", "server: {shutdown_timeout: -1}\n" + minimal, "server.shutdown_timeout: must be >= 0"},
		{"write_coalesce_ms negative", "server: {write_coalesce_ms: -1}\n" + minimal,
			"server.write_coalesce_ms: must be between 0 (off) and 1000 milliseconds, got -1"},
		{"max_connections below -1", "server: {max_connections: -2}\n" + minimal, "server.max_connections: must be -1 (no cap), 0"},
		{"write_coalesce_ms too long", "server: {write_coalesce_ms: 1001}\n" + minimal, "server.write_coalesce_ms: must be between 0 (off) and 1000"},
		{"trusted_proxies not an address", "server: {trusted_proxies: [\"10.0.0.0/8\", \"proxy.local\"]}\n" + minimal,
			"server.trusted_proxies[1]: must be an IP address or a CIDR prefix, got \"proxy.local\""},
		{"port too big", "server: {port: 65536}\n" + minimal, "server.port: must be between 1 and 65535"},
		{"port negative", "server: {port: -1}\n" + minimal, "server.port: must be between 1 and 65535"},
		{"activity_timeout negative", minimal + "    activity_timeout: -1\n", "apps[0].activity_timeout: must be > 0"},
		{"ping_interval negative", minimal + "    ping_interval: -5\n", "apps[0].ping_interval: must be > 0"},
		{"tls cert only", "server: {tls: {cert: c.pem}}\n" + minimal, "server.tls.key: must be set when server.tls.cert is set"},
		{"tls key only", "server: {tls: {key: k.pem}}\n" + minimal, "server.tls.cert: must be set when server.tls.key is set"},
		{"webhook timeout negative", minimal + "    webhooks: [{url: 'https://x', timeout: -1}]\n", "apps[0].webhooks[0].timeout: must be > 0"},
		{"webhook retry_for negative", minimal + "    webhooks: [{url: 'https://x', retry_for: -5}]\n", "apps[0].webhooks[0].retry_for: must be > 0"},
		// lease 15 s, renewed every 3.75 s: a POST may take up to 11 s, not 12.
		{"webhook timeout not shorter than the lease minus its renewal", "scaling: {enabled: true, redis_url: 'redis://127.0.0.1:6379'}\n" + minimal +
			"    webhooks: [{url: 'https://x', timeout: 11}, {url: 'https://y', timeout: 12}]\n",
			"apps[0].webhooks[1].timeout: must be shorter than scaling.webhook_lease (15 s) minus its renewal interval"},
		{"webhook lease raised too little", "scaling: {enabled: true, redis_url: 'redis://127.0.0.1:6379', webhook_lease: 20}\n" + minimal +
			"    webhooks: [{url: 'https://x', timeout: 15}]\n", "apps[0].webhooks[0].timeout: must be shorter than scaling.webhook_lease (20 s)"},
		{"webhook lease negative", "scaling: {enabled: true, redis_url: 'redis://127.0.0.1:6379', webhook_lease: -1}\n" + minimal,
			"scaling.webhook_lease: must be > 0"},
		{"webhook ftp", minimal + "    webhooks: [{url: 'ftp://x/y'}]\n", "apps[0].webhooks[0].url: must be an absolute http(s) URL"},
		{"webhook relative", minimal + "    webhooks: [{url: 'http://ok'}, {url: '/hook'}]\n", "apps[0].webhooks[1].url"},
		{"webhook empty", minimal + "    webhooks: [{url: ''}]\n", "apps[0].webhooks[0].url"},
		{"webhook header reserved", minimal + "    webhooks: [{url: 'https://x', headers: {X-Pusher-Signature: forged}}]\n",
			"apps[0].webhooks[0].headers.x-pusher-signature: is set by the server"},
		{"webhook header bad name", minimal + "    webhooks: [{url: 'https://x', headers: {'a b': v}}]\n",
			`apps[0].webhooks[0].headers: "a b" is not a valid header name`},
		{"webhook header newline", minimal + "    webhooks: [{url: 'https://x', headers: {X-Token: \"a\\r\\nX-Evil: 1\"}}]\n",
			"apps[0].webhooks[0].headers.x-token: value must not contain control characters"},
		{"webhook event type", minimal + "    webhooks: [{url: 'https://x', event_types: [channel_ocupied]}]\n",
			`apps[0].webhooks[0].event_types[0]: unknown event type "channel_ocupied"`},
		{"toolmark call > max", minimal + "    toolmark: {call_timeout_ms: 700000}\n",
			"apps[0].toolmark.call_timeout_ms: must not exceed toolmark.max_timeout_ms (600000)"},
		{"toolmark both set", minimal + "    toolmark: {call_timeout_ms: 2000, max_timeout_ms: 1000}\n",
			"apps[0].toolmark.call_timeout_ms: must not exceed"},
		{"toolmark negative", minimal + "    toolmark: {max_timeout_ms: -1}\n", "apps[0].toolmark.max_timeout_ms: must be > 0"},
		{"scaling without url", "scaling: {enabled: true}\n" + minimal, "scaling.redis_url: required when scaling.enabled is true"},
		{"redis url scheme", "scaling: {redis_url: 'http://x'}\n" + minimal, `scaling.redis_url: scheme must be redis, rediss or unix, got "http"`},
		{"two topologies", "scaling: {enabled: true, redis_url: 'redis://x', redis_cluster: {addrs: ['h:7000']}}\n" + minimal,
			"scaling.redis_cluster: set exactly one of scaling.redis_url, scaling.redis_sentinel, scaling.redis_cluster (got scaling.redis_url and scaling.redis_cluster)"},
		{"sentinel without master", "scaling: {enabled: true, redis_sentinel: {addrs: ['h:26379']}}\n" + minimal,
			"scaling.redis_sentinel.master_name: must not be empty"},
		{"sentinel bad addr", "scaling: {enabled: true, redis_sentinel: {master_name: m, addrs: ['h']}}\n" + minimal,
			`scaling.redis_sentinel.addrs[0]: must be host:port, got "h"`},
		{"cluster no addrs", "scaling: {enabled: true, redis_cluster: {password: p}}\n" + minimal,
			"scaling.redis_cluster.addrs: must list at least one host:port"},
		{"node_timeout", "scaling: {node_timeout: 1}\n" + minimal, "scaling.node_timeout: must be between 2 and 3600 seconds, got 1"},
		{"routing", "scaling: {routing: fanout}\n" + minimal, `scaling.routing: must be "interest" or "broadcast", got "fanout"`},
		{"channel with brace", "scaling: {channel: 'a{b'}\n" + minimal, "scaling.channel: must not contain { or }"},
		{"console without token", "console: {enabled: true}\n" + minimal, "console.token: is required when console.enabled is true"},
		{"console blank token", "console: {enabled: true, token: '  '}\n" + minimal, "console.token: is required"},
		{"empty origin", minimal + "    allowed_origins: ['*', '']\n", "apps[0].allowed_origins[1]: must not be empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(writeFile(t, tt.yaml))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v\nwant it to contain %q", err, tt.want)
			}
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v is not a *FieldError", err)
			}
		})
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	c := &Config{Apps: []App{{ID: "1", Key: "k", Secret: "s", AcceptClientEventsFrom: "x"}}}
	c.ApplyDefaults()
	c.Server.Port = 0
	c.Apps[0].Secret = ""
	err := c.Validate()
	for _, want := range []string{"server.port", "apps[0].secret", "apps[0].accept_client_events_from"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not mention %s", err, want)
		}
	}
	if c.byID != nil {
		t.Error("indexes must only be built for a valid config")
	}
}

func TestValidateDoesNotApplyDefaults(t *testing.T) {
	// Validate alone sees the zeros that ApplyDefaults would have replaced.
	c := &Config{Server: Server{Port: 8080, MaxRequestSize: 1}, Apps: []App{{ID: "1", Key: "k", Secret: "s"}}}
	err := c.Validate()
	for _, want := range []string{"apps[0].ping_interval", "apps[0].activity_timeout", "apps[0].accept_client_events_from"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not mention %s", err, want)
		}
	}
	c.ApplyDefaults()
	if err := c.Validate(); err != nil {
		t.Fatalf("after ApplyDefaults: %v", err)
	}
}

func TestValidateAcceptsGoodValues(t *testing.T) {
	clearEnv(t)
	yaml := `
server: {port: 443, path: /ws, tls: {cert: c.pem, key: k.pem}}
scaling: {enabled: true, redis_url: "rediss://u:p@redis:6380/2"}
console: {enabled: true, token: s3cret-console-token}
apps:
  - app_id: "1"
    key: k1
    secret: s1
    accept_client_events_from: all
    max_connections: 0
    client_event_rate_limit: 0
    toolmark: {call_timeout_ms: 600000}
    webhooks:
      - {url: "https://hooks.example.com/pusher", headers: {Authorization: "Bearer t0k", X-Tenant: acme}}
      - {url: "https://slow.example.com/x", timeout: 11, retry_for: 30}
      - {url: "http://127.0.0.1:9/x", event_types: [channel_occupied, channel_vacated, member_added, member_removed, client_event, cache_miss, subscription_count, toolmark_confirmed]}
  - {app_id: "2", key: k2, secret: s2, accept_client_events_from: none}
`
	c, err := Load(writeFile(t, yaml))
	if err != nil {
		t.Fatal(err)
	}
	if c.AppByID("2").AcceptClientEventsFrom != ClientEventsNone || c.Server.Path != "/ws" || !c.Console.Enabled || c.Console.Token != "s3cret-console-token" {
		t.Fatalf("%+v", c)
	}
	// Webhook settings: explicit, or the defaults; the lease defaults to 15 s.
	hooks := c.AppByID("1").Webhooks
	if hooks[1].Timeout != 11 || hooks[1].RetryFor != 30 || hooks[0].Timeout != DefaultWebhookTimeout ||
		hooks[0].RetryFor != DefaultWebhookRetryFor || c.Scaling.WebhookLease != DefaultWebhookLease {
		t.Fatalf("webhooks %+v, lease %d", hooks, c.Scaling.WebhookLease)
	}
}

// server.write_coalesce_ms: absent is the adaptive default, an explicit 0 is off (not the
// default), and a value is the window in milliseconds.
func TestWriteCoalesce(t *testing.T) {
	clearEnv(t)
	tests := []struct {
		name   string
		server string
		want   time.Duration
	}{
		{"absent: default", "", DefaultWriteCoalesceMS * time.Millisecond},
		{"0: off", "server: {write_coalesce_ms: 0}\n", 0},
		{"5 ms", "server: {write_coalesce_ms: 5}\n", 5 * time.Millisecond},
		{"the maximum", "server: {write_coalesce_ms: 1000}\n", time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Load(writeFile(t, tt.server+minimal))
			if err != nil {
				t.Fatal(err)
			}
			if got := c.Server.WriteCoalesce(); got != tt.want {
				t.Fatalf("WriteCoalesce() = %v, want %v", got, tt.want)
			}
		})
	}
	if _, err := Load(writeFile(t, "server: {write_coalesce_ms: soon}\n"+minimal)); err == nil || !strings.Contains(err.Error(), "write_coalesce_ms") {
		t.Fatalf("a non-number: error %v, want it to name write_coalesce_ms", err)
	}
	// A Config built by hand without ApplyDefaults (as tests and embedders do) gets the default too.
	if got := (&Server{}).WriteCoalesce(); got != DefaultWriteCoalesceMS*time.Millisecond {
		t.Fatalf("zero Server: %v", got)
	}
}

// TestMCPDefaults: public_url loses a trailing slash, the token lifetime defaults to a day and
// authorization_servers to [issuer].
func TestMCPDefaults(t *testing.T) {
	c := Config{Server: Server{PublicURL: " https://ws.example.com/ "}, Apps: []App{
		{ID: "a", Key: "k", Secret: "s", Toolmark: Toolmark{MCP: ToolmarkMCP{Issuer: "https://as.example", JWKSURL: "https://as.example/jwks"}}},
		{ID: "b", Key: "k2", Secret: "s"},
	}}
	c.ApplyDefaults()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	m := c.Apps[0].Toolmark.MCP
	if c.Server.PublicURL != "https://ws.example.com" || m.MaxTokenLifetimeS != DefaultMaxTokenLifetimeS ||
		len(m.AuthorizationServers) != 1 || m.AuthorizationServers[0] != "https://as.example" ||
		len(c.Apps[1].Toolmark.MCP.AuthorizationServers) != 0 {
		t.Fatalf("%+v %+v", c.Server, c.Apps)
	}
}

// TestPublicOrigin (issue 24): with MCP enabled, the resource every token must name is never
// left to the request's Host: server.public_url or server.public_hosts is required, and
// public_hosts holds plain host[:port] names only.
func TestPublicOrigin(t *testing.T) {
	clearEnv(t)
	const mcpApp = minimal + "    toolmark: {enabled: true, mcp: {enabled: true}}\n"
	tests := []struct {
		name string
		yaml string
		want string // "" = valid
	}{
		{"mcp without public_url or public_hosts", mcpApp,
			"server.public_url: or server.public_hosts is required when MCP is enabled (apps[0].toolmark.mcp.enabled)"},
		{"mcp on the second app", minimal + "  - {app_id: '2', key: k2, secret: s2, toolmark: {enabled: true, mcp: {enabled: true}}}\n",
			"server.public_url: or server.public_hosts is required when MCP is enabled (apps[1].toolmark.mcp.enabled)"},
		{"mcp with public_url", "server: {public_url: 'https://ws.example.com'}\n" + mcpApp, ""},
		{"mcp with public_hosts", "server: {public_hosts: ['ws.example.com', 'WS.example.com:8443', '127.0.0.1:8080', '[::1]:8080']}\n" + mcpApp, ""},
		{"mcp enabled but toolmark off", minimal + "    toolmark: {mcp: {enabled: true}}\n", ""},
		{"no mcp, no public origin", minimal, ""},
		{"public_hosts with a scheme", "server: {public_hosts: ['https://ws.example.com']}\n" + mcpApp,
			`server.public_hosts[0]: must be a host or host:port as clients send it in Host, like "ws.example.com" or "ws.example.com:8443", got "https://ws.example.com"`},
		{"public_hosts with a path", "server: {public_hosts: ['ok.example.com', 'ws.example.com/x']}\n" + mcpApp, "server.public_hosts[1]: must be a host or host:port"},
		{"public_hosts with user info", "server: {public_hosts: ['u@ws.example.com']}\n" + mcpApp, "server.public_hosts[0]"},
		{"public_hosts port out of range", "server: {public_hosts: ['ws.example.com:70000']}\n" + mcpApp, "server.public_hosts[0]"},
		{"public_hosts empty port", "server: {public_hosts: ['ws.example.com:']}\n" + mcpApp, "server.public_hosts[0]"},
		{"public_hosts empty", "server: {public_hosts: ['']}\n" + mcpApp, "server.public_hosts[0]"},
		{"public_hosts and public_url", "server: {public_url: 'https://ws.example.com', public_hosts: ['ws.example.com']}\n" + mcpApp,
			"server.public_hosts: must be empty when server.public_url is set"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(writeFile(t, tt.yaml))
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("want valid, got %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("error %v\nwant it to contain %q", err, tt.want)
			}
		})
	}
	c, err := Load(writeFile(t, "server: {public_hosts: [' WS.Example.com:8443 ']}\n"+mcpApp))
	if err != nil || len(c.Server.PublicHosts) != 1 || c.Server.PublicHosts[0] != "ws.example.com:8443" {
		t.Fatalf("public_hosts %q, %v: want trimmed and lower-cased", c.Server.PublicHosts, err)
	}
}

func TestNodeConnectionCap(t *testing.T) {
	tests := []struct {
		name   string
		max    int
		nofile uint64
		want   int
	}{
		{"explicit", 500, 20000, 500},
		{"no cap", -1, 20000, 0},
		{"limit unknown", 0, 0, 0},
		{"this machine: 5 % kept", 0, 20000, 19000},
		{"small limit: 512 kept", 0, 1024, 512},
		{"large limit: 4096 kept", 0, 1 << 20, 1<<20 - 4096},
		{"limit below the reserve", 0, 256, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := Server{MaxConnections: tc.max}
			if got := s.NodeConnectionCap(tc.nofile); got != tc.want {
				t.Errorf("NodeConnectionCap(%d) with max_connections %d = %d, want %d", tc.nofile, tc.max, got, tc.want)
			}
		})
	}
}

// server.io_uring: on unless set to false, a bool (a typo'd value is refused, naming the
// key), and absent stays nil: whether it was set decides how a refusing kernel is logged.
func TestIOUringConfig(t *testing.T) {
	clearEnv(t)
	tests := []struct {
		name     string
		server   string
		want     bool
		explicit bool
	}{
		{"absent: on", "", true, false},
		{"true", "server: {io_uring: true}\n", true, true},
		{"false", "server: {io_uring: false}\n", false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Load(writeFile(t, tt.server+minimal))
			if err != nil {
				t.Fatal(err)
			}
			if got := c.Server.IOUringEnabled(); got != tt.want {
				t.Fatalf("IOUringEnabled() = %v, want %v", got, tt.want)
			}
			if got := c.Server.IOUring != nil; got != tt.explicit {
				t.Fatalf("IOUring set = %v, want %v", got, tt.explicit)
			}
		})
	}
	if _, err := Load(writeFile(t, "server: {io_uring: sometimes}\n"+minimal)); err == nil || !strings.Contains(err.Error(), "io_uring") {
		t.Fatalf("a non-bool: error %v, want it to name io_uring", err)
	}
	if !(&Server{}).IOUringEnabled() {
		t.Fatal("a zero Server has io_uring off, want on (the default)")
	}
}
