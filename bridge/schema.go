package bridge

import (
	"encoding/json"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/reverbgo/reverbgo/config"
)

// Validate modes (the app's toolmark.validate).
const (
	// ValidateKnown validates a call's input when its tool's input schema is known on this node
	// (a describe of the page's current clientId and rev was answered here, by any surface); a
	// call to a tool not yet described goes to the page unchecked, as before. The default.
	ValidateKnown = config.ValidateKnown
	// ValidateDescribeFirst describes a tool before its first call of a manifest, then validates.
	ValidateDescribeFirst = config.ValidateDescribeFirst
	// ValidateOff never validates (the behaviour before validation existed).
	ValidateOff = config.ValidateOff
)

// Bounds of the schema cache and of what the server validates. A schema the server does not
// validate still reaches the page, which validates with its own schema.
const (
	// maxSchemaBytes: a larger inputSchema is not compiled (the call is not validated here).
	maxSchemaBytes = 64 << 10
	// maxSchemaNodes bounds the subschemas one validation may visit, $refs unfolded: a schema
	// over it, or with a recursive $ref, is not validated here (a hostile page could otherwise
	// make one validation unbounded, or recurse without end).
	maxSchemaNodes = 4096
	// maxIssueMessage bounds one issue's message (an anyOf message prints its schemas).
	maxIssueMessage = 512
	// schemaCacheConversations and schemaCacheBytes bound the cache; over them an arbitrary
	// conversation's schemas are dropped (its tools are described again when needed).
	schemaCacheConversations = 10000
	schemaCacheBytes         = 64 << 20
)

// inputSchema is a compiled input schema; rs nil means the tool is described but the server
// does not validate its input (no usable schema, or one over the bounds above).
type inputSchema struct {
	rs *jsonschema.Resolved
}

// Issue is one entry of an invalid result: a JSON Pointer into the input and a message.
type Issue struct {
	Path    string `json:"path"`
	Message string `json:"message"`
}

// compileSchema compiles the inputSchema of a describe's ok data. Anything the server will not
// validate compiles to an inputSchema with rs nil: not an object, too large, a $schema other
// than draft-07 or 2020-12, a remote, anchor or dynamic reference, an $id below the root, a
// recursive $ref, or more than maxSchemaNodes subschemas once $refs are unfolded.
func compileSchema(raw json.RawMessage) *inputSchema {
	none := &inputSchema{}
	if kind(raw) != 'o' || len(raw) > maxSchemaBytes {
		return none
	}
	var s jsonschema.Schema
	if json.Unmarshal(raw, &s) != nil {
		return none
	}
	switch s.Schema {
	case "", "http://json-schema.org/draft-07/schema#", "https://json-schema.org/draft-07/schema#",
		"https://json-schema.org/draft/2020-12/schema":
	default:
		return none
	}
	if !boundedSchema(&s) {
		return none
	}
	rs, err := s.Resolve(nil) // no Loader: a remote $ref fails here, never fetched
	if err != nil {
		return none
	}
	return &inputSchema{rs: rs}
}

// validate checks input (valid JSON) and returns the first issue, or nil. The library stops at
// the first failing keyword, so an invalid result carries one issue.
func (s *inputSchema) validate(input json.RawMessage) []Issue {
	if s == nil || s.rs == nil {
		return nil
	}
	var v any
	if json.Unmarshal(input, &v) != nil {
		return []Issue{{Path: "", Message: "input is not JSON"}}
	}
	err := s.rs.Validate(v)
	if err == nil {
		return nil
	}
	return []Issue{issueOf(err.Error())}
}

// issueOf turns the library's error ("validating root: validating /properties/title: type:
// ...") into an instance path and the innermost message. The library names schema locations;
// each step from one schema to its child names the keyword that moved into the instance
// (properties/NAME, items/N, prefixItems/N), so the instance path is rebuilt from them. A step
// into an element the library does not name (items of a list, additionalProperties) stops
// the path at the container.
func issueOf(text string) Issue {
	var segs []string
	msg := text
	for strings.HasPrefix(msg, "validating ") {
		rest := msg[len("validating "):]
		i := strings.Index(rest, ": ")
		if i < 0 {
			break
		}
		segs = append(segs, rest[:i])
		msg = rest[i+2:]
	}
	var path strings.Builder
	frozen := false
	for i := 1; i < len(segs) && !frozen; i++ {
		rel, ok := strings.CutPrefix(segs[i], segs[i-1])
		if segs[i-1] == "root" {
			rel, ok = segs[i], true
		}
		if !ok || !strings.HasPrefix(rel, "/") {
			continue // a $ref jumped elsewhere: the same instance
		}
		kw, arg, _ := strings.Cut(rel[1:], "/")
		switch kw {
		case "properties":
			path.WriteString("/" + arg) // already escaped as a JSON Pointer token by the library
		case "items", "prefixItems":
			if _, err := strconv.Atoi(arg); err == nil {
				path.WriteString("/" + arg)
			} else {
				frozen = true
			}
		case "additionalProperties", "patternProperties", "additionalItems", "contains",
			"unevaluatedItems", "unevaluatedProperties", "propertyNames":
			frozen = true
		}
	}
	// A missing or unexpected member is named in the message: point at it.
	if !frozen {
		for _, prefix := range []string{"required: missing properties: [", "unexpected additional properties ["} {
			if rest, ok := strings.CutPrefix(msg, prefix); ok {
				if name, err := strconv.QuotedPrefix(rest); err == nil {
					if n, err := strconv.Unquote(name); err == nil {
						path.WriteString("/" + escapePointer(n))
					}
				}
			}
		}
	}
	if len(msg) > maxIssueMessage {
		msg = msg[:maxIssueMessage]
		for len(msg) > 0 && !utf8.ValidString(msg) {
			msg = msg[:len(msg)-1]
		}
	}
	return Issue{Path: path.String(), Message: msg}
}

func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// boundedSchema reports whether validating with s visits at most maxSchemaNodes subschemas
// with $refs unfolded, and whether every $ref is local ("#" or "#/json/pointer") and none is
// recursive. Subschemas with their own $id and $dynamicRef are refused: their references
// resolve differently.
func boundedSchema(root *jsonschema.Schema) bool {
	index := map[string]*jsonschema.Schema{}
	ok := true
	var walk func(s *jsonschema.Schema, ptr string, depth int)
	walk = func(s *jsonschema.Schema, ptr string, depth int) {
		if s == nil || !ok {
			return
		}
		if depth > MaxDepth || len(index) > maxSchemaNodes || (s.ID != "" && s != root) || s.DynamicRef != "" {
			ok = false
			return
		}
		index[ptr] = s
		eachChild(s, true, func(name string, c *jsonschema.Schema) { walk(c, ptr+"/"+name, depth+1) })
	}
	walk(root, "", 0)
	if !ok {
		return false
	}
	// size(s) = 1 + the sizes of what validating s applies (children, the $ref's target),
	// memoized; a node met again on its own path is a recursive $ref.
	const visiting = -1
	size := map[*jsonschema.Schema]int{}
	var count func(s *jsonschema.Schema) int
	count = func(s *jsonschema.Schema) int {
		if s == nil {
			return 0
		}
		switch n, seen := size[s]; {
		case seen && n == visiting:
			return maxSchemaNodes + 1
		case seen:
			return n
		}
		size[s] = visiting
		n := 1
		if s.Ref != "" {
			target, found := refTarget(index, s.Ref)
			if !found {
				n = maxSchemaNodes + 1
			} else {
				n += count(target)
			}
		}
		eachChild(s, false, func(_ string, c *jsonschema.Schema) {
			if n <= maxSchemaNodes {
				n += count(c)
			}
		})
		n = min(n, maxSchemaNodes+1)
		size[s] = n
		return n
	}
	return count(root) <= maxSchemaNodes
}

// refTarget resolves a local $ref against the index of subschemas by JSON Pointer.
func refTarget(index map[string]*jsonschema.Schema, ref string) (*jsonschema.Schema, bool) {
	frag, ok := strings.CutPrefix(ref, "#")
	if !ok || (frag != "" && !strings.HasPrefix(frag, "/")) {
		return nil, false
	}
	frag, err := url.PathUnescape(frag)
	if err != nil {
		return nil, false
	}
	s, found := index[frag]
	return s, found
}

// eachChild calls f with every subschema of s and its JSON Pointer token(s) below s; defs
// includes $defs and definitions, which only a $ref applies.
func eachChild(s *jsonschema.Schema, defs bool, f func(name string, c *jsonschema.Schema)) {
	one := func(name string, c *jsonschema.Schema) {
		if c != nil {
			f(name, c)
		}
	}
	list := func(name string, cs []*jsonschema.Schema) {
		for i, c := range cs {
			one(name+"/"+strconv.Itoa(i), c)
		}
	}
	dict := func(name string, cs map[string]*jsonschema.Schema) {
		for k, c := range cs {
			one(name+"/"+escapePointer(k), c)
		}
	}
	if defs {
		dict("$defs", s.Defs)
		dict("definitions", s.Definitions)
	}
	dict("dependencies", s.DependencySchemas)
	list("prefixItems", s.PrefixItems)
	one("items", s.Items)
	list("items", s.ItemsArray)
	one("additionalItems", s.AdditionalItems)
	one("contains", s.Contains)
	one("unevaluatedItems", s.UnevaluatedItems)
	dict("properties", s.Properties)
	dict("patternProperties", s.PatternProperties)
	one("additionalProperties", s.AdditionalProperties)
	one("propertyNames", s.PropertyNames)
	one("unevaluatedProperties", s.UnevaluatedProperties)
	list("allOf", s.AllOf)
	list("anyOf", s.AnyOf)
	list("oneOf", s.OneOf)
	one("not", s.Not)
	one("if", s.If)
	one("then", s.Then)
	one("else", s.Else)
	dict("dependentSchemas", s.DependentSchemas)
	one("contentSchema", s.ContentSchema)
}

// describedInputSchema returns data.inputSchema of an ok describe result, or nil.
func describedInputSchema(result json.RawMessage) (json.RawMessage, bool) {
	var r struct {
		Status string `json:"status"`
		Data   struct {
			InputSchema json.RawMessage `json:"inputSchema"`
		} `json:"data"`
	}
	if json.Unmarshal(result, &r) != nil {
		return nil, false
	}
	return r.Data.InputSchema, r.Status == StatusOK
}

// schemaCache is the node's one record of what describes answered, per conversation for one
// manifest (clientId, rev): the compiled input schema validation uses and the raw inputSchema
// MCP lists (mcp asks DescribedSchemas; it keeps no cache of its own, so the two never
// disagree about a tool). A new clientId or rev starts afresh. Bounded by conversations and
// bytes.
type schemaCache struct {
	mu    sync.Mutex
	bytes int
	convs map[ConvKey]*convSchemas
}

type convSchemas struct {
	clientID string
	rev      int64
	bytes    int
	tools    map[string]*described
}

// described is what one describe answered. schema nil: recorded while validation was off (not
// compiled, so not known to validation). ok: the page answered ok, raw being its
// data.inputSchema (nil when absent); a refusal or error is recorded for validation (no
// schema, not described again by describe_first) but is not a description MCP lists.
type described struct {
	schema *inputSchema
	raw    json.RawMessage
	ok     bool
	size   int // counted in the cache's bytes
}

func newSchemaCache() *schemaCache { return &schemaCache{convs: map[ConvKey]*convSchemas{}} }

// get returns the compiled schema of tool in manifest (clientID, rev); ok false = not described
// (or described only while validation was off).
func (c *schemaCache) get(k ConvKey, clientID string, rev int64, tool string) (*inputSchema, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.convs[k]
	if e == nil || e.clientID != clientID || e.rev != rev {
		return nil, false
	}
	d := e.tools[tool]
	if d == nil || d.schema == nil {
		return nil, false
	}
	return d.schema, true
}

// described returns the raw inputSchema of every tool of manifest (clientID, rev) an ok
// describe answered (a fresh map; a nil value is an ok describe without inputSchema).
func (c *schemaCache) described(k ConvKey, clientID string, rev int64) map[string]json.RawMessage {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]json.RawMessage{}
	if e := c.convs[k]; e != nil && e.clientID == clientID && e.rev == rev {
		for name, d := range e.tools {
			if d.ok {
				out[name] = d.raw
			}
		}
	}
	return out
}

// put records what a describe of tool answered (size: its raw bytes) for manifest (clientID,
// rev), replacing the conversation's entry of another manifest. A tool already recorded keeps
// its entry unless the new one knows more (ok where it was not, or compiled where it was not):
// MCP describes again a tool whose describe failed, and its answer must be listed.
func (c *schemaCache) put(k ConvKey, clientID string, rev int64, tool string, d *described, size int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.convs[k]
	if e != nil && (e.clientID != clientID || e.rev != rev) {
		if e.rev > rev && e.clientID == clientID {
			return // an older manifest's describe finished late
		}
		c.bytes -= e.bytes
		delete(c.convs, k)
		e = nil
	}
	if e != nil {
		if old, had := e.tools[tool]; had {
			if (old.ok || !d.ok) && (old.schema != nil || d.schema == nil) {
				return
			}
			d.size = size
			e.tools[tool] = d
			e.bytes += size - old.size
			c.bytes += size - old.size
			return
		}
	}
	for c.bytes+size > schemaCacheBytes || (e == nil && len(c.convs) >= schemaCacheConversations) {
		evicted := false
		for victim, ve := range c.convs {
			if victim != k {
				c.bytes -= ve.bytes
				delete(c.convs, victim)
				evicted = true
				break
			}
		}
		if !evicted {
			break
		}
	}
	if e == nil {
		e = &convSchemas{clientID: clientID, rev: rev, tools: map[string]*described{}}
		c.convs[k] = e
	}
	if len(e.tools) >= MaxTools {
		return
	}
	d.size = size
	e.tools[tool] = d
	e.bytes += size
	c.bytes += size
}
