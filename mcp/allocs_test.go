package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/reverbgo/reverbgo/auth"
	"github.com/reverbgo/reverbgo/internal/testutil"
)

// inProcess drives the harness's handler (echo with the bridge and the MCP endpoint) without a
// connection: requests go to ServeHTTP and answers to a recorder, and the page answers in
// process too, so an allocation count is the server's work plus a fixed, small cost of
// building each request (the same for both surfaces).
type inProcess struct {
	t       testing.TB
	handler http.Handler
	tok     string
	session string
}

func newInProcess(t testing.TB, h *harness) *inProcess {
	h.page.handler = h.srv.Config.Handler
	return &inProcess{t: t, handler: h.srv.Config.Handler, tok: "Bearer " + token("secret1", nil)}
}

// mcpPost sends one JSON-RPC message to the MCP endpoint and returns the recorder.
func (p *inProcess) mcpPost(body []byte) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "/toolmark/mcp", bytes.NewReader(body))
	req.Host = "mcp.test"
	h := req.Header
	h["Content-Type"] = []string{"application/json"}
	h["Accept"] = []string{"application/json, text/event-stream"}
	h["Authorization"] = []string{p.tok}
	if p.session != "" {
		h["Mcp-Session-Id"] = []string{p.session}
		h["Mcp-Protocol-Version"] = []string{"2025-11-25"}
	}
	rec := httptest.NewRecorder()
	p.handler.ServeHTTP(rec, req)
	return rec
}

// initialize opens the session every later mcpPost uses.
func (p *inProcess) initialize() {
	p.t.Helper()
	rec := p.mcpPost([]byte(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"allocs","version":"1"}}}`))
	if rec.Code != http.StatusOK || rec.Header().Get("Mcp-Session-Id") == "" {
		p.t.Fatalf("initialize: %d %s", rec.Code, rec.Body)
	}
	p.session = rec.Header().Get("Mcp-Session-Id")
	if rec := p.mcpPost([]byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)); rec.Code != http.StatusAccepted {
		p.t.Fatalf("initialized: %d %s", rec.Code, rec.Body)
	}
}

var mcpCallBody = []byte(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"notes__create","arguments":{"title":"Hi"}}}`)

// mcpCall is one tools/call round trip on the session.
func (p *inProcess) mcpCall() {
	rec := p.mcpPost(mcpCallBody)
	if rec.Code != http.StatusOK || !bytes.Contains(rec.Body.Bytes(), []byte(`\"status\":\"ok\"`)) &&
		!bytes.Contains(rec.Body.Bytes(), []byte(`"status":"ok"`)) {
		p.t.Fatalf("tools/call: %d %s", rec.Code, rec.Body)
	}
}

var apiCallBody = []byte(`{"user_id":"u1","conversation_id":"c1","tool":"notes.create","input":{"title":"Hi"},"rev":1}`)

// apiCall is one POST /apps/app1/toolmark/calls round trip.
func (p *inProcess) apiCall() {
	const path = "/apps/app1/toolmark/calls"
	q := auth.SignRequest(http.MethodPost, path, nil, apiCallBody, "key1", "secret1", time.Now())
	req := httptest.NewRequest(http.MethodPost, path+"?"+q.Encode(), bytes.NewReader(apiCallBody))
	req.Header["Content-Type"] = []string{"application/json"}
	rec := httptest.NewRecorder()
	p.handler.ServeHTTP(rec, req)
	var out struct {
		Result struct {
			Status string `json:"status"`
		} `json:"result"`
	}
	if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &out) != nil || out.Result.Status != "ok" {
		p.t.Fatalf("calls API: %d %s", rec.Code, rec.Body)
	}
}

// TestToolCallAllocs counts the allocations of one tool call round trip in process through
// each surface, on one session for MCP (as a client reuses it), against the same bridge and
// page: MCP tools/call must stay within its bound and within 1.5× of the calls API's count
// (issue 25). The bounds are the counts when the guard was written.
func TestToolCallAllocs(t *testing.T) {
	if testutil.RaceEnabled {
		t.Skip("the race detector changes allocation counts")
	}
	h := newHarness(t, bridgeLimits())
	h.page.setAnswer(standardPage)
	h.openPage("c1", "p1", 1, testTools)
	p := newInProcess(t, h)
	p.initialize()
	p.mcpCall()
	p.apiCall()
	mcp := testing.AllocsPerRun(200, p.mcpCall)
	api := testing.AllocsPerRun(200, p.apiCall)
	t.Logf("allocations per round trip: MCP tools/call %v, calls API %v (%.2f×)", mcp, api, mcp/api)
	const mcpBound, apiBound = 227, 162
	if mcp > mcpBound || api > apiBound {
		t.Fatalf("MCP tools/call %v allocations (at most %v), calls API %v (at most %v)", mcp, mcpBound, api, apiBound)
	}
}

// TestJSONAnswers: over real HTTP, initialize and tools/call are answered with one
// application/json object carrying Content-Length (one write), not an SSE stream.
func TestJSONAnswers(t *testing.T) {
	h := newHarness(t, bridgeLimits())
	h.page.setAnswer(standardPage)
	h.openPage("c1", "p1", 1, testTools)
	tok := "Bearer " + token("secret1", nil)
	session := ""
	post := func(body string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, h.srv.URL+"/toolmark/mcp", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", tok)
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
			req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = res.Body.Close() })
		return res
	}
	for _, tc := range []struct{ name, body string }{
		{"initialize", `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`},
		{"tools/call", string(mcpCallBody)},
	} {
		res := post(tc.body)
		var msg struct {
			ID     int             `json:"id"`
			Result json.RawMessage `json:"result"`
		}
		err := json.NewDecoder(res.Body).Decode(&msg)
		if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "application/json" ||
			res.ContentLength <= 0 || len(res.TransferEncoding) != 0 || err != nil || msg.Result == nil {
			t.Fatalf("%s: %d %q length %d %v: %v %s", tc.name, res.StatusCode, res.Header.Get("Content-Type"),
				res.ContentLength, res.TransferEncoding, err, msg.Result)
		}
		if session == "" {
			session = res.Header.Get("Mcp-Session-Id")
			if res := post(`{"jsonrpc":"2.0","method":"notifications/initialized"}`); res.StatusCode != http.StatusAccepted {
				t.Fatalf("initialized: %d", res.StatusCode)
			}
		}
	}
}

// TestSDKRoundTripAllocs logs (no bound: a real connection's counts vary by a few) the
// allocations of the two round trips BenchmarkToolCallRoundTrip and
// BenchmarkCallsAPIRoundTrip time, client included: the Go SDK client's tools/call and a
// signed calls API POST, over loopback HTTP.
func TestSDKRoundTripAllocs(t *testing.T) {
	if testutil.RaceEnabled {
		t.Skip("the race detector changes allocation counts")
	}
	h := newHarness(t, bridgeLimits())
	h.page.setAnswer(standardPage)
	h.openPage("c1", "p1", 1, testTools)
	cs := h.client(token("secret1", nil), nil)
	ctx := context.Background()
	params := &sdk.CallToolParams{Name: "notes__create", Arguments: map[string]any{"title": "Hi"}}
	sdkCall := func() {
		if res, err := cs.CallTool(ctx, params); err != nil || res.IsError {
			t.Fatalf("call: %v %+v", err, res)
		}
	}
	const path = "/apps/app1/toolmark/calls"
	apiCall := func() {
		q := auth.SignRequest(http.MethodPost, path, nil, apiCallBody, "key1", "secret1", time.Now())
		res, err := http.Post(h.srv.URL+path+"?"+q.Encode(), "application/json", bytes.NewReader(apiCallBody))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		_ = res.Body.Close()
	}
	sdkCall()
	apiCall()
	t.Logf("allocations per round trip, client included: MCP tools/call (Go SDK client) %v, calls API %v",
		testing.AllocsPerRun(100, sdkCall), testing.AllocsPerRun(100, apiCall))
}
