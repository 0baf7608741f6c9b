package mcp

import (
	"encoding/json"
	"testing"
)

// FuzzDescribedSchema: a page's describe answer is untrusted. Whatever it is, the mapping never
// panics, and a schema it keeps is a JSON object of type "object" (what MCP clients require).
func FuzzDescribedSchema(f *testing.F) {
	for _, seed := range []string{
		`{"status":"ok","data":{"inputSchema":{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]}}}`,
		`{"status":"ok","data":{"inputSchema":{"properties":{"a":true}}}}`,
		`{"status":"ok","data":{"inputSchema":[]}}`,
		`{"status":"error","message":"x"}`,
		`{"status":"ok","data":{"inputSchema":{"type":"object","required":null}}}`,
		`nope`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		schema, ok := describedSchema(b)
		if !ok {
			return
		}
		var m map[string]any
		if err := json.Unmarshal(schema, &m); err != nil || m["type"] != "object" {
			t.Fatalf("kept schema %s from %q", schema, b)
		}
	})
}

// FuzzToolsCallID: the HTTP layer peeks at every POST body; it never panics and only reports an
// id for a tools/call request.
func FuzzToolsCallID(f *testing.F) {
	for _, seed := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}`,
		`{"jsonrpc":"2.0","id":"x","method":"tools/call"}`,
		`[{"id":1,"method":"tools/call"}]`,
		`{"id":{},"method":"tools/call"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		id, ok := toolsCallID(b)
		if ok {
			var m struct {
				Method string `json:"method"`
			}
			if json.Unmarshal(b, &m) != nil || m.Method != "tools/call" {
				t.Fatalf("id %q for %q", id, b)
			}
			_ = toolUseID("s", map[string][]string{requestIDHeader: {id}})
		}
	})
}
