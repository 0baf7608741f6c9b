package mcp

import (
	"net/http"
	"strings"
	"testing"

	"github.com/reverbgo/reverbgo/config"
	"github.com/reverbgo/reverbgo/internal/testutil"
)

// TestCORS: preflights are admitted by any app serving MCP (the app is unknown before the
// token), real requests by the token's own app (any other present Origin: 403, as the spec
// asks), a request without a valid token by any serving app (else 403, before the 401);
// every match goes through the origin package, the matcher of the WebSocket and the page
// endpoint.
func TestCORS(t *testing.T) {
	apps := testutil.Apps{
		{ID: "app1", Key: "key1", Secret: "secret1", AllowedOrigins: []string{"https://agent.example.com"},
			Toolmark: config.Toolmark{Enabled: true, MCP: config.ToolmarkMCP{Enabled: true}}},
		{ID: "app2", Key: "key2", Secret: "secret2", AllowedOrigins: []string{"https://bridge-only.example"},
			Toolmark: config.Toolmark{Enabled: true}}, // MCP off: its origins admit no MCP preflight
		{ID: "app4", Key: "key4", Secret: "secret4", AllowedOrigins: []string{"*.tools.example"},
			Toolmark: config.Toolmark{Enabled: true, MCP: config.ToolmarkMCP{Enabled: true}}},
	}
	h := newHarness(t, bridgeLimits(), func(o *Options) { o.Apps = apps })
	const initBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	tests := []struct {
		name, method, origin, token string
		code                        int
		allowed                     bool // Access-Control-Allow-Origin echoes the Origin
	}{
		{"preflight, allowed by app1", http.MethodOptions, "https://agent.example.com", "", 204, true},
		{"preflight, allowed by app4's glob", http.MethodOptions, "https://a.tools.example:8443", "", 204, true},
		{"preflight, wrong scheme", http.MethodOptions, "http://agent.example.com", "", 403, false},
		{"preflight, only an app without MCP allows it", http.MethodOptions, "https://bridge-only.example", "", 403, false},
		{"preflight, refused origin", http.MethodOptions, "https://evil.example", "", 403, false},
		{"preflight without Origin", http.MethodOptions, "", "", 403, false},
		{"POST, token's app allows", http.MethodPost, "https://agent.example.com", token("secret1", nil), 200, true},
		{"POST, only another app allows", http.MethodPost, "https://a.tools.example", token("secret1", nil), 403, false},
		{"POST, valid token, evil origin", http.MethodPost, "http://evil.example", token("secret1", nil), 403, false},
		{"POST, other app's token", http.MethodPost, "https://a.tools.example", token("secret4", map[string]any{"iss": "key4"}), 200, true},
		{"POST without Origin", http.MethodPost, "", token("secret1", nil), 200, false},
		{"401, a serving app allows", http.MethodPost, "https://agent.example.com", "", 401, true},
		{"no token, refused origin", http.MethodPost, "https://evil.example", "", 403, false},
		{"bad token, refused origin", http.MethodPost, "https://evil.example", "x.y.z", 403, false},
		{"bad token, a serving app allows", http.MethodPost, "https://a.tools.example", "x.y.z", 401, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var body *strings.Reader
			if tc.method == http.MethodPost {
				body = strings.NewReader(initBody)
			} else {
				body = strings.NewReader("")
			}
			req, _ := http.NewRequest(tc.method, h.srv.URL+"/toolmark/mcp", body)
			if tc.origin != "" {
				req.Header.Set("Origin", tc.origin)
			}
			if tc.method == http.MethodOptions {
				req.Header.Set("Access-Control-Request-Method", "POST")
				req.Header.Set("Access-Control-Request-Headers", "authorization, content-type, mcp-protocol-version")
			} else {
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Accept", "application/json, text/event-stream")
			}
			if tc.token != "" {
				req.Header.Set("Authorization", "Bearer "+tc.token)
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_ = res.Body.Close()
			if res.StatusCode != tc.code {
				t.Fatalf("status %d, want %d", res.StatusCode, tc.code)
			}
			acao := res.Header.Get("Access-Control-Allow-Origin")
			if want := map[bool]string{true: tc.origin}[tc.allowed]; acao != want {
				t.Fatalf("Access-Control-Allow-Origin %q, allowed %v", acao, tc.allowed)
			}
			if tc.origin != "" && !strings.Contains(strings.Join(res.Header.Values("Vary"), ","), "Origin") {
				t.Errorf("no Vary: Origin: %v", res.Header)
			}
			if !tc.allowed {
				return
			}
			want := map[string]string{"Access-Control-Expose-Headers": "Mcp-Session-Id, WWW-Authenticate"}
			if tc.method == http.MethodOptions {
				want = map[string]string{
					"Access-Control-Allow-Methods": "GET, POST, DELETE, OPTIONS",
					"Access-Control-Allow-Headers": "Authorization, Content-Type, Mcp-Session-Id, Mcp-Protocol-Version, Last-Event-ID, Mcp-Method, Mcp-Name",
				}
			}
			for k, v := range want {
				if got := res.Header.Get(k); got != v {
					t.Errorf("%s = %q, want %q", k, got, v)
				}
			}
			if res.Header.Get("Access-Control-Allow-Credentials") != "" {
				t.Error("credentials allowed: the bearer token is the only credential")
			}
		})
	}
}
