package mcp

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/reverbgo/reverbgo/bridge"
)

func ptr[T any](v T) *T { return &v }

// TestMapManifest: the MCP tool mapping of protocol §11.3 / §23, entry by entry.
func TestMapManifest(t *testing.T) {
	m := &bridge.Manifest{ClientID: "p1", Rev: 4, Tools: []bridge.Tool{
		{Name: "notes.create", LLMName: "notes__create", Title: ptr("Create note"), Description: "Create a note",
			Hints: bridge.Hints{Destructive: ptr(true), Consequential: ptr(true)}},
		{Name: "notes.list", LLMName: "notes__list", Description: "List notes", Hints: bridge.Hints{ReadOnly: ptr(true)}},
		{Name: "inbox.read", LLMName: "inbox__read", Description: "Read mail", Hints: bridge.Hints{UntrustedContent: ptr(true), ReadOnly: ptr(false)}},
		{Name: "dup.one", LLMName: "dup", Description: "a"},
		{Name: "dup.two", LLMName: "dup", Description: "b"},
		{Name: "bad.name", LLMName: "has.dot", Description: "c"},
		{Name: "long.name", LLMName: strings.Repeat("x", 65), Description: "d"},
		{Name: "empty.title", LLMName: "empty_title", Title: ptr(""), Description: ""},
	}}
	schemas := map[string]json.RawMessage{"notes.create": json.RawMessage(`{"properties":{"title":{"type":"string"}},"type":"object"}`)}
	l := mapManifest(m, schemas, nil)
	if l.clientID != "p1" || l.rev != 4 {
		t.Fatalf("listing %s/%d", l.clientID, l.rev)
	}
	var names []string
	for _, tool := range l.tools {
		names = append(names, tool.Name)
	}
	if got := strings.Join(names, ","); got != "notes__create,notes__list,inbox__read,empty_title" {
		t.Fatalf("listed %s (invalid and duplicate llmNames must be left out)", got)
	}
	for _, gone := range []string{"dup", "has.dot", strings.Repeat("x", 65)} {
		if l.byName[gone] != nil {
			t.Fatalf("%s is callable", gone)
		}
	}
	want := map[string]string{
		"notes__create": `{"annotations":{"destructiveHint":true,"idempotentHint":false,"openWorldHint":false,"readOnlyHint":false},"description":"Create a note","inputSchema":{"properties":{"title":{"type":"string"}},"type":"object"},"name":"notes__create","title":"Create note"}`,
		"notes__list":   `{"annotations":{"destructiveHint":false,"idempotentHint":false,"openWorldHint":false,"readOnlyHint":true},"description":"List notes","inputSchema":{"type":"object"},"name":"notes__list","title":"notes.list"}`,
		"inbox__read":   `{"_meta":{"toolmark/untrustedContent":true},"annotations":{"destructiveHint":false,"idempotentHint":false,"openWorldHint":false,"readOnlyHint":false},"description":"Read mail ` + untrustedSentence + `","inputSchema":{"type":"object"},"name":"inbox__read","title":"inbox.read"}`,
		"empty_title":   `{"annotations":{"destructiveHint":false,"idempotentHint":false,"openWorldHint":false,"readOnlyHint":false},"inputSchema":{"type":"object"},"name":"empty_title","title":"empty.title"}`,
	}
	for name, js := range want {
		lt := l.byName[name]
		if lt == nil {
			t.Fatalf("%s missing", name)
		}
		if got := canon(t, mustJSON(lt.tool)); got != canon(t, json.RawMessage(js)) {
			t.Errorf("%s:\n got %s\nwant %s", name, got, js)
		}
	}
	if l.byName["notes__create"].name != "notes.create" || !l.byName["inbox__read"].untrusted || l.byName["notes__list"].untrusted {
		t.Fatal("bridge names / untrusted flags")
	}
}

func canon(t *testing.T, b json.RawMessage) string {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return string(mustJSON(v))
}

// TestDescribedSchema: only an ok describe with an object-rooted, well-formed inputSchema keeps
// its schema; an ok one without becomes {"type":"object"}; anything else is a failure (not cached).
func TestDescribedSchema(t *testing.T) {
	for _, tc := range []struct {
		name, result, want string
		ok                 bool
	}{
		{"full", `{"status":"ok","data":{"name":"x","inputSchema":{"type":"object","properties":{"a":{"type":"string"},"b":true},"required":["a"]}}}`,
			`{"properties":{"a":{"type":"string"},"b":true},"required":["a"],"type":"object"}`, true},
		{"type added", `{"status":"ok","data":{"inputSchema":{"properties":{}}}}`, `{"properties":{},"type":"object"}`, true},
		{"no schema", `{"status":"ok","data":{"name":"x"}}`, `{"type":"object"}`, true},
		{"no data", `{"status":"ok"}`, `{"type":"object"}`, true},
		{"array root", `{"status":"ok","data":{"inputSchema":[1]}}`, `{"type":"object"}`, true},
		{"string type", `{"status":"ok","data":{"inputSchema":{"type":"string"}}}`, `{"type":"object"}`, true},
		{"properties not an object", `{"status":"ok","data":{"inputSchema":{"type":"object","properties":[]}}}`, `{"type":"object"}`, true},
		{"property not a schema", `{"status":"ok","data":{"inputSchema":{"type":"object","properties":{"a":3}}}}`, `{"type":"object"}`, true},
		{"required not strings", `{"status":"ok","data":{"inputSchema":{"type":"object","required":[1]}}}`, `{"type":"object"}`, true},
		{"required null", `{"status":"ok","data":{"inputSchema":{"type":"object","required":null}}}`, `{"type":"object"}`, true},
		{"error", `{"status":"error","message":"x"}`, "", false},
		{"timeout", `{"status":"timeout"}`, "", false},
		{"not json", `nope`, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := describedSchema(json.RawMessage(tc.result))
			if ok != tc.ok || (ok && canon(t, got) != canon(t, json.RawMessage(tc.want))) {
				t.Fatalf("got %s %v, want %s %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

// TestToolResult: text = the ToolResult's JSON (after the marker line for untrusted tools),
// structuredContent = the ToolResult, isError unless ok, _meta marker on untrusted results.
func TestToolResult(t *testing.T) {
	for _, tc := range []struct {
		status    string
		untrusted bool
		isError   bool
	}{
		{bridge.StatusOK, false, false}, {bridge.StatusOK, true, false}, {bridge.StatusNeedsConfirmation, false, true},
		{bridge.StatusCancelled, false, true}, {bridge.StatusTimeout, true, true}, {bridge.StatusRefused, false, true},
	} {
		res := json.RawMessage(`{"status":"` + tc.status + `"}`)
		r := toolResult(res, tc.status, tc.untrusted)
		js := string(mustJSON(r))
		text := string(res)
		if tc.untrusted {
			text = untrustedMarker + "\n" + text
		}
		want := `{"content":[{"type":"text","text":` + string(mustJSON(text)) + `}],"structuredContent":` + string(res)
		if tc.isError {
			want += `,"isError":true`
		}
		if tc.untrusted {
			want = `{"_meta":{"toolmark/untrustedContent":true},` + want[1:]
		}
		if canon(t, json.RawMessage(js)) != canon(t, json.RawMessage(want+"}")) {
			t.Errorf("%s untrusted=%v:\n got %s\nwant %s}", tc.status, tc.untrusted, js, want)
		}
	}
}

func TestToolsCallID(t *testing.T) {
	for body, want := range map[string]string{
		`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{}}`:    "7",
		`{"jsonrpc":"2.0","id":"ab","method":"tools/call","params":{}}`: "ab",
		`{"jsonrpc":"2.0","id":7,"method":"tools/list"}`:                "",
		`[{"jsonrpc":"2.0","id":7,"method":"tools/call"}]`:              "",
		`{"jsonrpc":"2.0","method":"tools/call"}`:                       "",
	} {
		if got, _ := toolsCallID([]byte(body)); got != want {
			t.Errorf("%s: %q, want %q", body, got, want)
		}
	}
	if got := toolUseID(strings.Repeat("s", 300), nil); len(got) != 256 {
		t.Fatalf("tool_use_id of %d bytes", len(got))
	}
}
