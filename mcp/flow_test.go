package mcp

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/reverbgo/reverbgo/bridge"
	"github.com/reverbgo/reverbgo/internal/testutil"
)

func bridgeLimits() bridge.Limits {
	return bridge.Limits{CallBurst: 1 << 20, CallRate: 1 << 20, PageBurst: 1 << 20, PageRate: 1 << 20}
}

var testTools = []map[string]any{
	{"name": "notes.create", "llmName": "notes__create", "title": "Create note", "description": "Create a note", "hints": map[string]any{"destructive": true}},
	{"name": "inbox.read", "llmName": "inbox__read", "description": "Read mail", "hints": map[string]any{"untrustedContent": true, "readOnly": true}},
}

// standardPage answers describes with a schema and calls with ok {data: {tool, input, rev}}.
func standardPage(m pageMsg) json.RawMessage {
	switch m.Type {
	case bridge.TypeDescribe:
		return mustJSON(map[string]any{"status": "ok", "data": map[string]any{"name": m.Tool,
			"inputSchema": map[string]any{"type": "object", "properties": map[string]any{"title": map[string]any{"type": "string"}}}}})
	case bridge.TypeCall:
		return mustJSON(map[string]any{"status": "ok", "data": map[string]any{"tool": m.Tool, "input": m.Input, "rev": m.Rev}})
	}
	return nil
}

// TestFlow drives the endpoint with the Go SDK's client over HTTP: list (with describes), the
// cached second list, a call with its rev and tool_use_id, untrusted marking, unknown tools,
// list_changed on a new manifest, the stale rev after it, and "No page is connected".
func TestFlow(t *testing.T) {
	h := newHarness(t, bridgeLimits())
	h.page.setAnswer(standardPage)
	h.openPage("c1", "p1", 1, testTools)
	var changed atomic.Int32
	cs := h.client(token("secret1", nil), func() { changed.Add(1) })
	if caps := cs.InitializeResult().Capabilities; caps.Tools == nil || !caps.Tools.ListChanged {
		t.Fatalf("capabilities %+v", caps)
	}
	ctx := context.Background()
	list, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Tools) != 2 || list.Tools[0].Name != "notes__create" || list.Tools[1].Meta[UntrustedMetaKey] != true {
		t.Fatalf("tools %s", mustJSON(list.Tools))
	}
	if s := string(mustJSON(list.Tools[0].InputSchema)); !strings.Contains(s, `"title"`) {
		t.Fatalf("schema %s", s)
	}
	if n := len(h.page.messages(bridge.TypeDescribe)); n != 2 {
		t.Fatalf("%d describes", n)
	}
	if _, err := cs.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if n := len(h.page.messages(bridge.TypeDescribe)); n != 2 {
		t.Fatalf("the second list sent describes: %d", n)
	}

	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "notes__create", Arguments: map[string]any{"title": "Hi"}})
	if err != nil {
		t.Fatal(err)
	}
	calls := h.page.messages(bridge.TypeCall)
	if res.IsError || len(calls) != 1 || calls[0].Tool != "notes.create" || *calls[0].Rev != 1 || string(calls[0].Input) != `{"title":"Hi"}` {
		t.Fatalf("result %s, calls %+v", mustJSON(res), calls)
	}
	text := res.Content[0].(*sdk.TextContent).Text
	if string(mustJSON(res.StructuredContent)) != text {
		t.Fatalf("text %s vs structured %s", text, mustJSON(res.StructuredContent))
	}
	if !strings.Contains(h.logs.String(), `"kind":"call","surface":"mcp","subject":"u1","status":"ok"`) {
		t.Fatalf("no mcp audit line:\n%s", h.logs.String())
	}

	// An untrusted tool without arguments: input {} and the marker.
	res, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "inbox__read"})
	if err != nil {
		t.Fatal(err)
	}
	text = res.Content[0].(*sdk.TextContent).Text
	if !strings.HasPrefix(text, untrustedMarker+"\n{") || res.Meta[UntrustedMetaKey] != true {
		t.Fatalf("untrusted result %s", mustJSON(res))
	}
	if in := h.page.messages(bridge.TypeCall)[1].Input; string(in) != `{}` {
		t.Fatalf("input %s", in)
	}

	res, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "nope"})
	if err != nil || !res.IsError || !strings.Contains(res.Content[0].(*sdk.TextContent).Text, `"code":"unknown_tool"`) {
		t.Fatalf("unknown tool: %v %s", err, mustJSON(res))
	}

	// A new manifest: list_changed; the old listing still reaches the page with rev 1.
	h.openPage("c1", "p1", 2, testTools[1:])
	testutil.WaitFor(t, "list_changed", func() bool { return changed.Load() == 1 })
	h.page.setAnswer(func(m pageMsg) json.RawMessage {
		if m.Type == bridge.TypeCall && m.Rev != nil && *m.Rev < 2 {
			return json.RawMessage(`{"status":"refused","code":"stale","message":"Stale","rev":2}`)
		}
		return standardPage(m)
	})
	// notes.create left the manifest: the bridge's resolve step refuses it with the current
	// rev, without a page round trip.
	before := len(h.page.messages(bridge.TypeCall))
	res, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "notes__create"})
	if text := res.Content[0].(*sdk.TextContent).Text; err != nil || !res.IsError || !strings.Contains(text, `"code":"unknown_tool"`) ||
		!strings.Contains(text, `"rev":2`) {
		t.Fatalf("call of a tool gone from the manifest: %v %s", err, mustJSON(res))
	}
	if n := len(h.page.messages(bridge.TypeCall)); n != before {
		t.Fatalf("the page got the call of a tool it no longer has (%d calls, had %d)", n, before)
	}
	// A tool still in the manifest, called with the old listing's rev: the page refuses it.
	res, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "inbox__read"})
	if err != nil || !res.IsError || !strings.Contains(res.Content[0].(*sdk.TextContent).Text, `"code":"stale"`) {
		t.Fatalf("stale call: %v %s", err, mustJSON(res))
	}
	list, err = cs.ListTools(ctx, nil)
	if err != nil || len(list.Tools) != 1 {
		t.Fatalf("relist: %v %s", err, mustJSON(list))
	}
	if changed.Load() != 1 {
		t.Fatalf("%d list_changed", changed.Load())
	}

	h.closePage("c1")
	res, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "nope"})
	if err != nil || !res.IsError || !strings.Contains(res.Content[0].(*sdk.TextContent).Text, "No page is connected") {
		t.Fatalf("no page: %v %s", err, mustJSON(res))
	}
	list, err = cs.ListTools(ctx, nil)
	if err != nil || len(list.Tools) != 0 {
		t.Fatalf("no page list: %v %s", err, mustJSON(list))
	}
}

// TestTimeoutAndCancel: a page that never answers: the call times out ({"status":"timeout"})
// and the page gets cancel; an MCP cancellation sends cancel at once.
func TestTimeoutAndCancel(t *testing.T) {
	h := newHarness(t, bridgeLimits())
	h.openPage("c1", "p1", 1, testTools)
	h.page.setAnswer(func(pageMsg) json.RawMessage { return nil })
	cs := h.client(token("secret1", nil), nil)
	ctx := context.Background()
	start := time.Now()
	list, err := cs.ListTools(ctx, nil)
	if err != nil || len(list.Tools) != 2 || string(mustJSON(list.Tools[0].InputSchema)) != `{"type":"object"}` {
		t.Fatalf("list with unanswered describes: %v %s", err, mustJSON(list))
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("list took %v", d)
	}
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "notes__create"}) // the app's 3 s deadline
	if err != nil || !res.IsError || string(mustJSON(res.StructuredContent)) != `{"status":"timeout"}` {
		t.Fatalf("timeout: %v %s", err, mustJSON(res))
	}
	call := h.page.messages(bridge.TypeCall)[0]
	testutil.WaitFor(t, "cancel after timeout", func() bool {
		for _, m := range h.page.messages(bridge.TypeCancel) {
			if m.ID == call.ID {
				return true
			}
		}
		return false
	})

	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { _, err := cs.CallTool(cctx, &sdk.CallToolParams{Name: "notes__create"}); done <- err }()
	testutil.WaitFor(t, "second call", func() bool { return len(h.page.messages(bridge.TypeCall)) == 2 })
	cancel()
	second := h.page.messages(bridge.TypeCall)[1]
	testutil.WaitFor(t, "cancel after notifications/cancelled", func() bool {
		for _, m := range h.page.messages(bridge.TypeCancel) {
			if m.ID == second.ID {
				return true
			}
		}
		return false
	})
	<-done
	// A late result for the cancelled call: the id was claimed.
	if code := h.page.post("c1", map[string]any{"protocol": 1, "type": "result", "clientId": "p1", "id": second.ID,
		"result": map[string]any{"status": "ok"}}); code != http.StatusConflict {
		t.Fatalf("late result: %d", code)
	}
}

// TestConfirmation: needs_confirmation is returned as is (isError), and the confirmed outcome
// goes to the app's toolmark_confirmed webhook with tool_use_id mcp:{session}:{request id}.
func TestConfirmation(t *testing.T) {
	h := newHarness(t, bridgeLimits())
	h.openPage("c1", "p1", 1, testTools)
	h.page.setAnswer(func(m pageMsg) json.RawMessage {
		if m.Type == bridge.TypeCall {
			return json.RawMessage(`{"status":"needs_confirmation","confirmId":"cf1","summary":"Create it?"}`)
		}
		return nil
	})
	cs := h.client(token("secret1", nil), nil)
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "notes__create", Arguments: map[string]any{}})
	if err != nil || !res.IsError || string(mustJSON(res.StructuredContent)) != `{"confirmId":"cf1","status":"needs_confirmation","summary":"Create it?"}` {
		t.Fatalf("needs_confirmation: %v %s", err, mustJSON(res))
	}
	if code := h.page.post("c1", map[string]any{"protocol": 1, "type": "confirmed", "clientId": "p1", "confirmId": "cf1",
		"result": map[string]any{"status": "ok"}}); code != http.StatusNoContent {
		t.Fatalf("confirmed: %d", code)
	}
	testutil.WaitFor(t, "toolmark_confirmed", func() bool { return len(h.hooks.All()) == 1 })
	ev := h.hooks.All()[0].Event
	id, _ := ev["tool_use_id"].(string)
	prefix := "mcp:" + cs.ID() + ":"
	if !strings.HasPrefix(id, prefix) || strings.Trim(id[len(prefix):], "0123456789") != "" || len(id) == len(prefix) {
		t.Fatalf("tool_use_id %q, want %s{request id}", id, prefix)
	}
}

// TestSessionOwner: a session id used with a token for another user or conversation is 403;
// the owner's DELETE ends it (404 afterwards).
func TestSessionOwner(t *testing.T) {
	h := newHarness(t, bridgeLimits())
	tok := token("secret1", nil)
	post := func(tok, session, body string) *http.Response {
		req, _ := http.NewRequest(http.MethodPost, h.srv.URL+"/toolmark/mcp", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer "+tok)
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = res.Body.Close()
		return res
	}
	init := post(tok, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	sid := init.Header.Get("Mcp-Session-Id")
	if init.StatusCode != 200 || sid == "" {
		t.Fatalf("initialize: %d %q", init.StatusCode, sid)
	}
	ping := `{"jsonrpc":"2.0","id":2,"method":"ping"}`
	for name, other := range map[string]string{
		"other user":         token("secret1", map[string]any{"sub": "u2"}),
		"other conversation": token("secret1", map[string]any{"conversation_id": "c2"}),
		"other app":          token("secret4", map[string]any{"iss": "key4"}),
	} {
		if res := post(other, sid, ping); res.StatusCode != http.StatusForbidden {
			t.Errorf("%s: %d", name, res.StatusCode)
		}
	}
	if res := post(tok, sid, ping); res.StatusCode != http.StatusOK {
		t.Fatalf("owner ping: %d", res.StatusCode)
	}
	req, _ := http.NewRequest(http.MethodDelete, h.srv.URL+"/toolmark/mcp", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Mcp-Session-Id", sid)
	res, err := http.DefaultClient.Do(req)
	if err != nil || res.StatusCode != http.StatusNoContent {
		t.Fatalf("delete: %v %d", err, res.StatusCode)
	}
	_ = res.Body.Close()
	if res := post(tok, sid, ping); res.StatusCode != http.StatusNotFound {
		t.Fatalf("after delete: %d", res.StatusCode)
	}
}

// TestSessionBound: a new session over MaxSessions closes the conversation's least recently
// used one (its client then gets 404), other conversations are untouched.
func TestSessionBound(t *testing.T) {
	h := newHarness(t, bridgeLimits(), func(o *Options) { o.MaxSessions = 2 })
	ctx := context.Background()
	first := h.client(token("secret1", nil), nil)
	second := h.client(token("secret1", nil), nil)
	other := h.client(token("secret1", map[string]any{"conversation_id": "c2"}), nil)
	if err := second.Ping(ctx, nil); err != nil { // second is now more recently used than first
		t.Fatal(err)
	}
	third := h.client(token("secret1", nil), nil)
	testutil.WaitFor(t, "the least recently used session to close", func() bool {
		return h.mcp.sessionCount(bridge.ConvKey{App: "app1", User: "u1", Conversation: "c1"}) == 2
	})
	if err := first.Ping(ctx, nil); err == nil {
		t.Fatal("the evicted session still answers")
	}
	for name, cs := range map[string]*sdk.ClientSession{"second": second, "third": third, "other": other} {
		if err := cs.Ping(ctx, nil); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
}

// TestStreamEndsAtExp: the GET stream of a session ends when the token that opened it expires.
func TestStreamEndsAtExp(t *testing.T) {
	h := newHarness(t, bridgeLimits())
	// exp 29 s ago: valid for one more second thanks to the 30 s leeway.
	tok := token("secret1", map[string]any{"exp": time.Now().Add(-29 * time.Second).Unix()})
	post := func(session, body string) *http.Response {
		req, _ := http.NewRequest(http.MethodPost, h.srv.URL+"/toolmark/mcp", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer "+tok)
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
			req.Header.Set("MCP-Protocol-Version", "2025-06-18")
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = res.Body.Close()
		return res
	}
	sid := post("", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`).Header.Get("Mcp-Session-Id")
	post(sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	req, _ := http.NewRequest(http.MethodGet, h.srv.URL+"/toolmark/mcp", nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Mcp-Session-Id", sid)
	req.Header.Set("MCP-Protocol-Version", "2025-06-18")
	start := time.Now()
	res, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("GET: %v %v", err, res)
	}
	_, _ = io.Copy(io.Discard, res.Body) // returns when the server ends the stream
	_ = res.Body.Close()
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the stream outlived its token by %v", d)
	}
}

// TestCallRefusals: the calls API's rate limit and input bounds apply to MCP calls, as error
// results the model can read.
func TestCallRefusals(t *testing.T) {
	h := newHarness(t, bridge.Limits{CallBurst: 2, CallRate: 0.001, PageBurst: 1 << 20, PageRate: 1 << 20})
	h.page.setAnswer(standardPage)
	h.openPage("c1", "p1", 1, testTools)
	cs := h.client(token("secret1", nil), nil)
	ctx := context.Background()
	deep := json.RawMessage(strings.Repeat(`{"a":`, 70) + "1" + strings.Repeat("}", 70))
	for i, tc := range []struct {
		args any
		want string
	}{
		{map[string]any{}, `"status":"ok"`},
		{deep, `Invalid arguments: nesting deeper than 63`},
		{map[string]any{}, `"status":"ok"`},
		{map[string]any{}, `Too many calls`},
	} {
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "notes__create", Arguments: tc.args})
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if text := res.Content[0].(*sdk.TextContent).Text; !strings.Contains(text, tc.want) || res.IsError != (tc.want != `"status":"ok"`) {
			t.Fatalf("call %d: %s, want %s", i, text, tc.want)
		}
	}
}
