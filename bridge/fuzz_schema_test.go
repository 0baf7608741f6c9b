package bridge

import (
	"encoding/json"
	"testing"
	"time"
)

// FuzzSchema: a page's describe answer is untrusted. Whatever inputSchema it sends, compiling
// and validating a few inputs against it returns, quickly, and never panics (a recursive $ref
// the library would follow without end is refused at compile time); an issue's path is a
// JSON Pointer. Run longer with: go test ./bridge -run '^$' -fuzz FuzzSchema
func FuzzSchema(f *testing.F) {
	for _, s := range []string{noteSchema, titleSchema, `{}`, `true`, `{"$ref":"#"}`, `{"properties":{"a":{"$ref":"#"}}}`,
		`{"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"}`,
		`{"anyOf":[{"$ref":"#/$defs/x"},{"not":{}}],"$defs":{"x":{"type":"integer"}}}`,
		`{"type":"array","items":{"type":"object","required":["a"]},"uniqueItems":true}`,
		`{"$ref":"#/%24defs/a","$defs":{"a":{"type":"string","pattern":"^a+$"}}}`,
		`{"allOf":[{"$ref":"#/allOf/1"},{"$ref":"#/allOf/0"}]}`,
		`{"if":{"$ref":"#"},"then":{}}`,
	} {
		f.Add([]byte(s), []byte(`{"title":"x","a":[1,{"a":2}]}`))
	}
	f.Fuzz(func(t *testing.T, schema, input []byte) {
		start := time.Now()
		s := compileSchema(schema)
		if s == nil {
			t.Fatal("compileSchema returned nil")
		}
		if json.Valid(input) && CheckDepth(input, MaxDepth) == nil && len(input) <= 10000 {
			for _, is := range s.validate(input) {
				if is.Path != "" && is.Path[0] != '/' {
					t.Fatalf("issue path %q is not a JSON Pointer", is.Path)
				}
				if len(is.Message) > maxIssueMessage {
					t.Fatalf("issue message of %d bytes", len(is.Message))
				}
			}
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("compile and validate took %v", d)
		}
	})
}
