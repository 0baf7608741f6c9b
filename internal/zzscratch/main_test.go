package zzscratch

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
)

func TestX(t *testing.T) {
	for _, schema := range []string{`{"$ref":"#"}`, `{"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"}`, `{"properties":{"a":{"$ref":"#"}}}`, `{"type":"object","properties":{"a/b":{"type":"string"}}}`, `true`, `{"$schema":"http://json-schema.org/draft-04/schema#"}`, `{"type":"object","properties":{"x":{"$ref":"https://example.com/s.json"}}}`} {
		var s jsonschema.Schema
		if err := json.Unmarshal([]byte(schema), &s); err != nil {
			t.Logf("%s unmarshal: %v", schema, err)
			continue
		}
		rs, err := s.Resolve(nil)
		if err != nil {
			t.Logf("%s resolve: %v", schema, err)
			continue
		}
		done := make(chan error, 1)
		go func() {
			var v any
			json.Unmarshal([]byte(`{"a":{"a":{"a/b":1}},"a/b":3}`), &v)
			done <- rs.Validate(v)
		}()
		select {
		case err := <-done:
			t.Logf("%s => %v", schema, err)
		case <-time.After(2 * time.Second):
			t.Logf("%s => HANG", schema)
		}
	}
}
