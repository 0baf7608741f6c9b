package bridge

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"
)

const noteSchema = `{"type":"object","properties":{"title":{"type":"string","minLength":2},
"tags":{"type":"array","items":{"type":"string"}},"pair":{"type":"array","prefixItems":[{"type":"integer"},{"type":"string"}]},
"meta":{"$ref":"#/$defs/meta"},"a/b":{"type":"boolean"}},
"required":["title"],"additionalProperties":false,
"$defs":{"meta":{"type":"object","properties":{"n":{"type":"integer"}}}}}`

// TestSchemaIssues: the first failing keyword becomes one issue whose path points into the
// input (JSON Pointer), as the page's own invalid results do.
func TestSchemaIssues(t *testing.T) {
	s := compileSchema(json.RawMessage(noteSchema))
	if s.rs == nil {
		t.Fatal("schema not compiled")
	}
	for _, tc := range []struct {
		input, path, message string // message: a substring; path "-" = valid
	}{
		{`{"title":"Hi"}`, "-", ""},
		{`{"title":"Hi","tags":["a"],"pair":[1,"x"],"meta":{"n":2},"a/b":true}`, "-", ""},
		{`{"title":3}`, "/title", "type"},
		{`{"title":"x"}`, "/title", "minLength"},
		{`{}`, "/title", "required"},
		{`{"title":"Hi","zz":1}`, "/zz", "additional"},
		{`{"title":"Hi","tags":["a",2]}`, "/tags", "type"}, // the library does not name the item
		{`{"title":"Hi","pair":[1,2]}`, "/pair/1", "type"},
		{`{"title":"Hi","meta":{"n":"q"}}`, "/meta/n", "type"},
		{`{"title":"Hi","a/b":1}`, "/a~1b", "type"},
		{`null`, "", "type"},
		{`[1]`, "", "type"},
	} {
		issues := s.validate(json.RawMessage(tc.input))
		if tc.path == "-" {
			if issues != nil {
				t.Errorf("%s: %+v, want valid", tc.input, issues)
			}
			continue
		}
		if len(issues) != 1 || issues[0].Path != tc.path || !strings.Contains(issues[0].Message, tc.message) {
			t.Errorf("%s: %+v, want path %q and a message with %q", tc.input, issues, tc.path, tc.message)
		}
	}
}

// TestSchemaNotValidated: schemas the server will not validate with compile to "described,
// not validated" (rs nil), quickly: a recursive $ref would otherwise never return (the library
// recurses without end on it) and an exponential unfolding would burn a core.
func TestSchemaNotValidated(t *testing.T) {
	chain := `{"$defs":{` // d0 → d1 twice → ... : 2^20 unfolded nodes
	for i := 0; i < 20; i++ {
		chain += `"d` + strconv.Itoa(i) + `":{"allOf":[{"$ref":"#/$defs/d` + strconv.Itoa(i+1) + `"},{"$ref":"#/$defs/d` + strconv.Itoa(i+1) + `"}]},`
	}
	chain += `"d20":{"type":"string"}},"$ref":"#/$defs/d0"}`
	for _, tc := range []struct{ name, schema string }{
		{"self reference", `{"$ref":"#"}`},
		{"reference cycle", `{"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"}`},
		{"recursion through properties", `{"type":"object","properties":{"child":{"$ref":"#"}}}`},
		{"exponential unfolding", chain},
		{"remote reference", `{"type":"object","properties":{"x":{"$ref":"https://example.com/s.json"}}}`},
		{"anchor reference", `{"$defs":{"a":{"$anchor":"x","type":"string"}},"$ref":"#x"}`},
		{"nested $id", `{"properties":{"x":{"$id":"https://example.com/x","type":"string"}}}`},
		{"dynamic reference", `{"$dynamicRef":"#meta"}`},
		{"draft 4", `{"$schema":"http://json-schema.org/draft-04/schema#","type":"object"}`},
		{"not an object", `true`},
		{"not JSON schema", `{"type":12}`},
		{"too large", `{"description":"` + strings.Repeat("x", maxSchemaBytes) + `"}`},
	} {
		start := time.Now()
		s := compileSchema(json.RawMessage(tc.schema))
		if s == nil || s.rs != nil {
			t.Errorf("%s: compiled for validation", tc.name)
		}
		if issues := s.validate(json.RawMessage(`{"child":{"child":{}}}`)); issues != nil {
			t.Errorf("%s: validated: %+v", tc.name, issues)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("%s: took %v", tc.name, d)
		}
	}
}

// TestSchemaCache: entries are per manifest (clientId, rev); a newer rev replaces the
// conversation's entry, a late describe of an older rev does not; bounded per conversation.
func TestSchemaCache(t *testing.T) {
	c := newSchemaCache()
	k := ConvKey{App: "a", User: "u", Conversation: "c"}
	s1, s2 := &inputSchema{}, &inputSchema{}
	c.put(k, "p1", 1, "t", &described{schema: s1, ok: true}, 10)
	if got, ok := c.get(k, "p1", 1, "t"); !ok || got != s1 {
		t.Fatal("not cached")
	}
	for _, miss := range []struct {
		client string
		rev    int64
		tool   string
	}{{"p1", 2, "t"}, {"p2", 1, "t"}, {"p1", 1, "u"}} {
		if _, ok := c.get(k, miss.client, miss.rev, miss.tool); ok {
			t.Fatalf("hit for %+v", miss)
		}
	}
	c.put(k, "p1", 2, "t", &described{schema: s2, ok: true}, 10)
	c.put(k, "p1", 1, "t", &described{schema: s1, ok: true}, 10) // late, older rev
	if got, ok := c.get(k, "p1", 2, "t"); !ok || got != s2 {
		t.Fatal("newer rev lost")
	}
	if _, ok := c.get(k, "p1", 1, "t"); ok || c.bytes != 10 {
		t.Fatalf("older rev kept; %d bytes", c.bytes)
	}
	for i := 0; i < MaxTools+10; i++ {
		c.put(k, "p1", 2, "t"+strconv.Itoa(i), &described{schema: s2, ok: true}, 1)
	}
	if n := len(c.convs[k].tools); n != MaxTools {
		t.Fatalf("%d tools cached, want at most %d", n, MaxTools)
	}
}

// TestSchemaCacheDescribed: what MCP lists (described) is the ok describes only; a tool whose
// describe failed is upgraded by a later ok one (for validation too), and one recorded with
// validation off by a compiled one; an ok entry is not replaced by a later failure.
func TestSchemaCacheDescribed(t *testing.T) {
	c := newSchemaCache()
	k := ConvKey{App: "a", User: "u", Conversation: "c"}
	raw := json.RawMessage(`{"type":"object"}`)
	c.put(k, "p1", 1, "t", &described{schema: &inputSchema{}}, 1) // a refusal
	if d := c.described(k, "p1", 1); len(d) != 0 {
		t.Fatalf("a refusal is listed: %v", d)
	}
	ok := &inputSchema{}
	c.put(k, "p1", 1, "t", &described{schema: ok, raw: raw, ok: true}, 20)
	if d := c.described(k, "p1", 1); string(d["t"]) != string(raw) {
		t.Fatalf("described %v", d)
	}
	if s, _ := c.get(k, "p1", 1, "t"); s != ok || c.bytes != 20 || c.convs[k].bytes != 20 {
		t.Fatalf("not upgraded: %d bytes", c.bytes)
	}
	c.put(k, "p1", 1, "t", &described{schema: &inputSchema{}}, 1)
	if s, _ := c.get(k, "p1", 1, "t"); s != ok || len(c.described(k, "p1", 1)) != 1 {
		t.Fatal("a later failure replaced an ok describe")
	}
	c.put(k, "p1", 1, "v", &described{raw: raw, ok: true}, 20) // validation off
	if _, known := c.get(k, "p1", 1, "v"); known || len(c.described(k, "p1", 1)) != 2 {
		t.Fatal("validation off: compiled, or not listed")
	}
	c.put(k, "p1", 1, "v", &described{schema: ok, raw: raw, ok: true}, 20)
	if s, _ := c.get(k, "p1", 1, "v"); s != ok || c.bytes != 40 {
		t.Fatalf("not compiled later: %d bytes", c.bytes)
	}
	if d := c.described(k, "p1", 2); len(d) != 0 {
		t.Fatal("another rev's describes listed")
	}
}

// TestSchemaCacheBounds: over schemaCacheConversations or schemaCacheBytes another
// conversation's entry is dropped, never the one being written.
func TestSchemaCacheBounds(t *testing.T) {
	c := newSchemaCache()
	ok := func() *described { return &described{schema: &inputSchema{}, ok: true} }
	for i := 0; i < schemaCacheConversations+5; i++ {
		c.put(ConvKey{App: "a", User: "u", Conversation: strconv.Itoa(i)}, "p", 1, "t", ok(), 1)
	}
	if len(c.convs) != schemaCacheConversations || c.bytes != schemaCacheConversations {
		t.Fatalf("%d conversations, %d bytes", len(c.convs), c.bytes)
	}
	last := ConvKey{App: "a", User: "u", Conversation: strconv.Itoa(schemaCacheConversations + 4)}
	if len(c.described(last, "p", 1)) != 1 {
		t.Fatal("the newest conversation was dropped")
	}
	big := ConvKey{App: "a", User: "u", Conversation: "big"}
	c.put(big, "p", 1, "t", ok(), schemaCacheBytes-10)
	c.put(big, "p", 1, "u", ok(), 10)
	if c.bytes > schemaCacheBytes || len(c.convs) != 1 || len(c.described(big, "p", 1)) != 2 {
		t.Fatalf("bytes %d over %d; %d conversations", c.bytes, schemaCacheBytes, len(c.convs))
	}
}
