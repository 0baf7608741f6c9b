package mcp

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/reverbgo/reverbgo/bridge"
)

// recorder remembers the status and WWW-Authenticate of the last response to a request.
type recorder struct {
	base http.RoundTripper
	mu   sync.Mutex
	code int
	www  string
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := r.base.RoundTrip(req)
	if err == nil && req.Method == http.MethodPost {
		r.mu.Lock()
		r.code, r.www = res.StatusCode, res.Header.Get("WWW-Authenticate")
		r.mu.Unlock()
	}
	return res, err
}

func (r *recorder) last() (int, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.code, r.www
}

// scopedClient connects with tok at protocol version ("" = the SDK's choice) through a recorder.
func (h *harness) scopedClient(t *testing.T, tok, version string) (*sdk.ClientSession, *recorder) {
	rec := &recorder{base: bearer{tok, http.DefaultTransport}}
	c := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil)
	cs, err := c.Connect(context.Background(), &sdk.StreamableClientTransport{Endpoint: h.srv.URL + "/toolmark/mcp",
		HTTPClient: &http.Client{Transport: rec}, DisableStandaloneSSE: true}, &sdk.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	if version != "" && cs.InitializeResult().ProtocolVersion != version {
		t.Fatalf("negotiated %s, want %s", cs.InitializeResult().ProtocolVersion, version)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs, rec
}

func listedNames(t *testing.T, cs *sdk.ClientSession) []string {
	t.Helper()
	list, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range list.Tools {
		names = append(names, tool.Name)
	}
	return names
}

// TestScopes: a token's scope and toolmark_tools decide what tools/list shows and what
// tools/call may call; a call outside them is answered HTTP 403 with the step-up challenge
// (scope="toolmark:write" when that scope would allow it) and never reaches the page. At
// 2025-11-25 (sessions) and 2026-07-28 (stateless requests).
func TestScopes(t *testing.T) {
	for _, version := range []string{"2025-11-25", "2026-07-28"} {
		t.Run(version, func(t *testing.T) { testScopes(t, version) })
	}
}

func testScopes(t *testing.T, version string) {
	for _, tc := range []struct {
		name      string
		claims    map[string]any
		listed    string // comma separated
		refused   string // an MCP tool name refused with 403
		challenge string
	}{
		{"read scope", map[string]any{"scope": "openid toolmark:read"}, "inbox__read", "notes__create",
			`Bearer error="insufficient_scope", scope="toolmark:write"`},
		{"write scope", map[string]any{"scope": "toolmark:write"}, "notes__create,inbox__read", "", ""},
		{"no scope claim", nil, "notes__create,inbox__read", "", ""},
		{"tool globs", map[string]any{"toolmark_tools": []string{"inbox.*"}}, "inbox__read", "notes__create",
			`Bearer error="insufficient_scope"`},
		{"tool globs as a string", map[string]any{"toolmark_tools": "notes.* other"}, "notes__create", "inbox__read",
			`Bearer error="insufficient_scope"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, bridgeLimits())
			h.page.setAnswer(standardPage)
			h.openPage("c1", "p1", 1, testTools)
			cs, rec := h.scopedClient(t, token("secret1", tc.claims), version)
			if got := strings.Join(listedNames(t, cs), ","); got != tc.listed {
				t.Fatalf("listed %q, want %q", got, tc.listed)
			}
			for _, d := range h.page.messages(bridge.TypeDescribe) {
				if tc.refused != "" && strings.ReplaceAll(d.Tool, ".", "__") == tc.refused {
					t.Fatalf("the page was asked to describe %s, which the token may not call", d.Tool)
				}
			}
			for _, name := range strings.Split(tc.listed, ",") {
				if res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: name, Arguments: map[string]any{"title": "x"}}); err != nil || res.IsError {
					t.Fatalf("call %s: %v %s", name, err, mustJSON(res))
				}
			}
			if tc.refused == "" {
				return
			}
			calls := len(h.page.messages(bridge.TypeCall))
			_, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: tc.refused, Arguments: map[string]any{"title": "SECRET_VALUE"}})
			code, www := rec.last()
			if err == nil || code != http.StatusForbidden || www != tc.challenge {
				t.Fatalf("refused call: err %v, %d %q\nwant 403 %q", err, code, www, tc.challenge)
			}
			if n := len(h.page.messages(bridge.TypeCall)); n != calls {
				t.Fatal("the refused call reached the page")
			}
			logs := h.logs.String()
			if !strings.Contains(logs, `"surface":"mcp","subject":"u1","status":"refused"`) || !strings.Contains(logs, `"reason":"insufficient_scope"`) ||
				strings.Contains(logs, "SECRET_VALUE") {
				t.Fatalf("audit:\n%s", logs)
			}
		})
	}
}

// TestScopeClaimInvalid: a toolmark_tools claim that is not a list of globs makes the token
// invalid (401), never "all tools".
func TestScopeClaimInvalid(t *testing.T) {
	h := newHarness(t, bridgeLimits())
	for _, bad := range []any{[]string{"a?"}, "notes.* a/b", 5, []any{1}} {
		req, _ := http.NewRequest(http.MethodPost, h.srv.URL+"/toolmark/mcp", strings.NewReader(`{}`))
		req.Header.Set("Authorization", "Bearer "+token("secret1", map[string]any{"toolmark_tools": bad}))
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = res.Body.Close()
		if res.StatusCode != http.StatusUnauthorized {
			t.Errorf("toolmark_tools %v: %d", bad, res.StatusCode)
		}
	}
}

// TestDryRunAndValidation: _meta toolmark/dryRun answers without reaching the page; an input
// that does not match the listed schema is invalid, also without reaching the page.
func TestDryRunAndValidation(t *testing.T) {
	h := newHarness(t, bridgeLimits())
	h.page.setAnswer(standardPage)
	h.openPage("c1", "p1", 1, testTools)
	cs, _ := h.scopedClient(t, token("secret1", nil), "")
	listedNames(t, cs) // describes: the schemas are known from here on
	ctx := context.Background()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "notes__create", Arguments: map[string]any{"title": "x"},
		Meta: sdk.Meta{DryRunMetaKey: true}})
	want := `{"data":{"dryRun":true,"hints":{"destructive":true},"tool":"notes.create","wouldConfirm":true},"status":"ok"}`
	if err != nil || res.IsError || string(mustJSON(res.StructuredContent)) != want {
		t.Fatalf("dry run: %v %s", err, mustJSON(res))
	}
	res, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "notes__create", Arguments: map[string]any{"title": 5}})
	if err != nil || !res.IsError || !strings.Contains(string(mustJSON(res.StructuredContent)), `"issues":[{"message":`) ||
		!strings.Contains(string(mustJSON(res.StructuredContent)), `"path":"/title"`) {
		t.Fatalf("invalid: %v %s", err, mustJSON(res))
	}
	if n := len(h.page.messages(bridge.TypeCall)); n != 0 {
		t.Fatalf("%d calls reached the page", n)
	}
}
