package bridge

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/reverbgo/reverbgo/config"
)

// pipelineTools: a read-only tool, a consequential one and a destructive one.
const pipelineTools = `{"name":"notes.list","llmName":"notes__list","description":"List","hints":{"readOnly":true}},
{"name":"notes.create","llmName":"notes__create","description":"Create","hints":{"consequential":true}},
{"name":"inbox.purge","llmName":"inbox__purge","description":"Purge","hints":{"destructive":true}}`

const titleSchema = `{"type":"object","properties":{"title":{"type":"string"}},"required":["title"]}`

// pipelineHarness is a harness whose app validates in mode (toolmark.validate) and whose page
// u1/c1 posted pipelineTools at rev 1.
func pipelineHarness(t *testing.T, mode string, mod func(*Options)) *harness {
	h := newHarness(t, mod)
	h.apps[0].Toolmark.Validate = mode
	if rec := h.page("1.1", "c1", manifestMsg(client1, 1, pipelineTools)); rec.Code != http.StatusNoContent {
		t.Fatalf("manifest: %d", rec.Code)
	}
	return h
}

// describeWith runs a describe of tool through the calls API and answers it with schema.
func (h *harness) describeWith(t *testing.T, tool, schema string) {
	t.Helper()
	ch := h.startCall(context.Background(), "describe", `{"user_id":"u1","conversation_id":"c1","tool":"`+tool+`"}`)
	d := h.pub.waitMsg(t, "describe", "")
	if code := h.page("1.1", "c1", resultMsg(client1, d.ID, `{"status":"ok","data":{"inputSchema":`+schema+`}}`)).Code; code != 204 {
		t.Fatalf("describe result: %d", code)
	}
	recv(t, ch)
}

func (h *harness) published(typ string) int {
	n := 0
	for _, p := range h.pub.all() {
		if decodeEvent(h.t, p).Type == typ {
			n++
		}
	}
	return n
}

func resultOf(t *testing.T, r callResp) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Result, &m); err != nil {
		t.Fatalf("result of %+v: %v", r, err)
	}
	return m
}

// TestPipelineValidate: once the tool is described, an input that does not match its schema is
// answered invalid at once and the page sees no call; a matching input reaches the page. With
// validate off the same bad input reaches the page; with describe_first the first call
// describes the tool itself.
func TestPipelineValidate(t *testing.T) {
	bad := `{"user_id":"u1","conversation_id":"c1","tool":"notes.create","input":{"title":5},"timeout_ms":50}`
	good := `{"user_id":"u1","conversation_id":"c1","tool":"notes.create","input":{"title":"x"},"timeout_ms":50}`
	for _, tc := range []struct {
		mode        string
		describe    bool // a describe before the calls
		wantInvalid bool
		describes   int // describes the page saw in all
	}{
		{config.ValidateKnown, true, true, 1},
		{config.ValidateKnown, false, false, 0}, // not described: unchecked, as before
		{"", true, true, 1},                     // "" is the default, known
		{config.ValidateOff, true, false, 1},
		{config.ValidateDescribeFirst, false, true, 1},
		{config.ValidateDescribeFirst, true, true, 1}, // described already: no second describe
	} {
		t.Run(tc.mode+map[bool]string{true: "/described", false: ""}[tc.describe], func(t *testing.T) {
			h := pipelineHarness(t, tc.mode, nil)
			if tc.mode == config.ValidateDescribeFirst {
				h.pub.onPub = func(p published) {
					if m := decodeEvent(t, p); m.Type == TypeDescribe {
						go h.page("1.1", "c1", resultMsg(client1, m.ID, `{"status":"ok","data":{"inputSchema":`+titleSchema+`}}`))
					}
				}
			}
			switch {
			case tc.describe && h.pub.onPub != nil: // the hook answers
				recv(t, h.startCall(context.Background(), "describe", `{"user_id":"u1","conversation_id":"c1","tool":"notes.create"}`))
			case tc.describe:
				h.describeWith(t, "notes.create", titleSchema)
			}
			r := recv(t, h.startCall(context.Background(), "calls", bad))
			res := resultOf(t, r)
			if tc.wantInvalid {
				issues, _ := res["issues"].([]any)
				if res["status"] != "invalid" || len(issues) != 1 || issues[0].(map[string]any)["path"] != "/title" ||
					!strings.Contains(r.Raw, `"hints":{"consequential":true}`) {
					t.Fatalf("bad input: %s", r.Raw)
				}
				if n := h.published(TypeCall); n != 0 {
					t.Fatalf("the page got %d calls for an invalid input", n)
				}
				if !strings.Contains(h.logs.String(), `"status":"invalid","latency_ms":0,"input_keys":"title","reason":"schema"`) {
					t.Fatalf("audit:\n%s", h.logs)
				}
			} else if res["status"] != "timeout" || h.published(TypeCall) != 1 {
				t.Fatalf("bad input did not reach the page: %s", r.Raw)
			}
			if n := h.published(TypeDescribe); n != tc.describes {
				t.Fatalf("%d describes, want %d", n, tc.describes)
			}
			// A matching input is sent.
			before := h.published(TypeCall)
			if res := resultOf(t, recv(t, h.startCall(context.Background(), "calls", good))); res["status"] != "timeout" ||
				h.published(TypeCall) != before+1 {
				t.Fatalf("good input: %v", res)
			}
		})
	}
}

// TestPipelineValidateNewRev: schemas are per manifest: after a new rev the old schema no
// longer applies (the tool may have changed), until it is described again.
func TestPipelineValidateNewRev(t *testing.T) {
	h := pipelineHarness(t, config.ValidateKnown, nil)
	h.describeWith(t, "notes.create", titleSchema)
	if rec := h.page("1.1", "c1", manifestMsg(client1, 2, pipelineTools)); rec.Code != 204 {
		t.Fatal(rec.Code)
	}
	bad := `{"user_id":"u1","conversation_id":"c1","tool":"notes.create","input":{"title":5},"timeout_ms":20}`
	if res := resultOf(t, recv(t, h.startCall(context.Background(), "calls", bad))); res["status"] != "timeout" {
		t.Fatalf("validated against the previous rev's schema: %v", res)
	}
}

// TestPipelineAuthorize: scopes and tools on the calls API; a refusal never reaches the page.
func TestPipelineAuthorize(t *testing.T) {
	h := pipelineHarness(t, config.ValidateKnown, nil)
	call := func(tool, access string) callResp {
		return recv(t, h.startCall(context.Background(), "calls",
			`{"user_id":"u1","conversation_id":"c1","tool":"`+tool+`","input":{},"timeout_ms":20`+access+`}`))
	}
	for _, tc := range []struct {
		tool, access string
		forbidden    bool
	}{
		{"notes.create", `,"scopes":["toolmark:read"]`, true},
		{"inbox.purge", `,"scopes":["toolmark:read"]`, true},
		{"notes.list", `,"scopes":["toolmark:read"]`, false},
		{"notes.create", `,"scopes":["toolmark:write"]`, false},
		{"notes.create", `,"scopes":[]`, true},
		{"notes.create", `,"scopes":null,"tools":null`, false},
		{"inbox.purge", `,"tools":["notes.*"]`, true},
		{"notes.create", `,"tools":["notes.*"]`, false},
		{"notes.create", `,"scopes":["toolmark:read"],"tools":["notes.*"]`, true},
		{"notes.list", `,"scopes":["toolmark:read"],"tools":["notes.*"]`, false},
	} {
		before := h.published(TypeCall)
		r := call(tc.tool, tc.access)
		res := resultOf(t, r)
		if tc.forbidden {
			if res["status"] != "refused" || res["code"] != "forbidden" || res["message"] == "" || h.published(TypeCall) != before {
				t.Errorf("%s%s: %s (page calls %d → %d)", tc.tool, tc.access, r.Raw, before, h.published(TypeCall))
			}
		} else if res["status"] != "timeout" || h.published(TypeCall) != before+1 {
			t.Errorf("%s%s: %s, want it sent", tc.tool, tc.access, r.Raw)
		}
	}
	// A describe is authorized like a call: no describe of a tool the caller may not call.
	r := recv(t, h.startCall(context.Background(), "describe",
		`{"user_id":"u1","conversation_id":"c1","tool":"notes.create","scopes":["toolmark:read"]}`))
	if res := resultOf(t, r); res["code"] != "forbidden" || h.published(TypeDescribe) != 0 {
		t.Fatalf("describe: %s", r.Raw)
	}
	// Unknown tools are refused before authorization, with the current rev.
	if res := resultOf(t, call("nope", "")); res["code"] != "unknown_tool" || res["rev"] != 1.0 {
		t.Fatalf("unknown tool: %v", res)
	}
	// Malformed scopes and tools: 422.
	for _, access := range []string{`,"scopes":["admin"]`, `,"scopes":"toolmark:read"`, `,"tools":["a b"]`, `,"tools":[1]`, `,"dry_run":"yes"`} {
		if r := call("notes.list", access); r.Code != http.StatusUnprocessableEntity {
			t.Errorf("%s: %d %s", access, r.Code, r.Raw)
		}
	}
}

// TestPipelineDryRun: resolve, authorize, validate and the rate limit run; the page sees
// nothing; the answer says what the call would do.
func TestPipelineDryRun(t *testing.T) {
	h := pipelineHarness(t, config.ValidateKnown, func(o *Options) { o.Limits.CallBurst = 3 })
	h.describeWith(t, "notes.create", titleSchema) // takes one token
	dry := func(tool, input, extra string) callResp {
		return recv(t, h.startCall(context.Background(), "calls",
			`{"user_id":"u1","conversation_id":"c1","tool":"`+tool+`","input":`+input+`,"dry_run":true`+extra+`}`))
	}
	for _, tc := range []struct{ tool, want string }{
		{"notes.create", `{"data":{"dryRun":true,"hints":{"consequential":true},"tool":"notes.create","wouldConfirm":true},"status":"ok"}`},
		{"notes.list", `{"data":{"dryRun":true,"hints":{"readOnly":true},"tool":"notes.list","wouldConfirm":false},"status":"ok"}`},
	} {
		if r := dry(tc.tool, `{"title":"x"}`, ""); r.Code != 200 || string(r.Result) != tc.want {
			t.Fatalf("%s: %d %s", tc.tool, r.Code, r.Raw)
		}
	}
	// The steps before the stop still answer.
	if res := resultOf(t, dry("notes.create", `{"title":1}`, "")); res["status"] != "invalid" {
		t.Fatalf("invalid dry run: %v", res)
	}
	if res := resultOf(t, dry("notes.create", `{"title":"x"}`, `,"scopes":["toolmark:read"]`)); res["code"] != "forbidden" {
		t.Fatalf("forbidden dry run: %v", res)
	}
	// Dry runs count against the rate limit (3 tokens: the describe and two dry runs).
	if r := dry("notes.list", `{}`, ""); r.Code != http.StatusTooManyRequests {
		t.Fatalf("over the limit: %d %s", r.Code, r.Raw)
	}
	if n := h.published(TypeCall); n != 0 {
		t.Fatalf("a dry run reached the page (%d calls)", n)
	}
	if strings.Count(h.logs.String(), `"status":"dry_run"`) != 2 || !strings.Contains(h.logs.String(), `"dry_run":true`) {
		t.Fatalf("audit:\n%s", h.logs)
	}
}

// TestPipelineDryRunDescribesNothing: under describe_first a dry run of a tool not described
// yet still never reaches the page: it validates only against a schema already known.
func TestPipelineDryRunDescribesNothing(t *testing.T) {
	h := pipelineHarness(t, config.ValidateDescribeFirst, nil)
	r := recv(t, h.startCall(context.Background(), "calls",
		`{"user_id":"u1","conversation_id":"c1","tool":"notes.create","input":{"title":5},"dry_run":true}`))
	if res := resultOf(t, r); res["status"] != "ok" || len(h.pub.all()) != 0 {
		t.Fatalf("dry run: %s, %d messages to the page", r.Raw, len(h.pub.all()))
	}
}

// TestPipelineAuditKeys: the audit line names the input's top-level keys, credential-like
// ones redacted, and never a value.
func TestPipelineAuditKeys(t *testing.T) {
	h := pipelineHarness(t, config.ValidateKnown, nil)
	input := `{"title":"VALUE_1","password":"VALUE_2","apiKey":"VALUE_3","Authorization":"VALUE_4","session_token":"VALUE_5",` +
		`"nested":{"secret":"VALUE_6"},"cookie_jar":["VALUE_7"],"client_secret":"VALUE_8"}`
	recv(t, h.startCall(context.Background(), "calls",
		`{"user_id":"u1","conversation_id":"c1","tool":"notes.list","input":`+input+`,"timeout_ms":5}`))
	logs := h.logs.String()
	if strings.Contains(logs, "VALUE_") {
		t.Fatalf("an input value reached the audit log:\n%s", logs)
	}
	want := `"input_keys":"title,[redacted],[redacted],[redacted],[redacted],nested,[redacted],[redacted]"`
	if !strings.Contains(logs, want) || !strings.Contains(logs, `"surface":"api","subject":""`) {
		t.Fatalf("audit line lacks %s:\n%s", want, logs)
	}
}

func TestInputKeys(t *testing.T) {
	long := strings.Repeat("k", 100)
	many := "{"
	for i := 0; i < maxAuditKeys+3; i++ {
		if i > 0 {
			many += ","
		}
		many += `"k` + strconv.Itoa(i) + `":1`
	}
	many += "}"
	for _, tc := range []struct{ input, want string }{
		{`null`, ""},
		{`[1,2]`, ""},
		{`"password"`, ""},
		{`{}`, ""},
		{`{"b":1,"a":{"x":2}}`, "b,a"},
		{`{"MyKey":1,"monkey":2,"ok":3,"PassWord":4}`, "[redacted],[redacted],ok,[redacted]"}, // "key" anywhere, any case
		{`{"\u0070assword":1,"z":2}`, "[redacted],z"},                                         // escaped: decoded first
		{`{"a,b":1,"100%":2}`, "a%2Cb,100%25"},
		{`{"` + long + `":1}`, long[:maxAuditKeyLen]},
	} {
		if got := inputKeys(json.RawMessage(tc.input)); got != tc.want {
			t.Errorf("inputKeys(%s) = %q, want %q", tc.input, got, tc.want)
		}
	}
	got := strings.Split(inputKeys(json.RawMessage(many)), ",")
	if len(got) != maxAuditKeys+1 || got[0] != "k0" || got[maxAuditKeys] != "+3 more" {
		t.Errorf("many keys: %q", got)
	}
	if raceEnabled {
		return
	}
	in := json.RawMessage(`{"title":"x","apiKey":"y","body":{"a":1}}`)
	if n := testing.AllocsPerRun(100, func() { _ = inputKeys(in) }); n != 1 {
		t.Errorf("inputKeys: %v allocations, want 1 (the string)", n)
	}
}

// TestPipelineAllocs: with validate off the validate step costs nothing, and with a schema
// not (yet) known neither; authorization of an unrestricted caller costs nothing either.
func TestPipelineAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes allocation counts")
	}
	b := New(Options{Publisher: &fakePublisher{}, Sockets: nil, Apps: nil})
	defer b.Close()
	m := &Manifest{ClientID: "p1", Rev: 1, Tools: []Tool{{Name: "notes.create"}}}
	req := &callRequest{UserID: "u1", ConversationID: "c1", Tool: "notes.create", Input: json.RawMessage(`{"title":"x"}`)}
	key := ConvKey{App: "a", User: "u1", Conversation: "c1"}
	for _, mode := range []string{config.ValidateOff, config.ValidateKnown} {
		app := &config.App{ID: "a", Toolmark: config.Toolmark{Validate: mode}}
		if n := testing.AllocsPerRun(100, func() { _ = b.inputSchema(context.Background(), app, req, m, key) }); n != 0 {
			t.Errorf("validate %s, no schema: %v allocations", mode, n)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _ = req.Access.Check(&m.Tools[0]) }); n != 0 {
		t.Errorf("authorize: %v allocations", n)
	}
	// Known: the compiled schema is cached, so a call pays only the validation itself.
	b.schemas.put(key, "p1", 1, "notes.create", &described{schema: compileSchema(json.RawMessage(titleSchema)), raw: json.RawMessage(titleSchema), ok: true}, len(titleSchema))
	app := &config.App{ID: "a"}
	if s := b.inputSchema(context.Background(), app, req, m, key); s == nil || s.rs == nil || s.validate(req.Input) != nil {
		t.Fatal("cached schema not used")
	}
	if n := testing.AllocsPerRun(100, func() { _ = b.inputSchema(context.Background(), app, req, m, key) }); n != 0 {
		t.Errorf("cached schema lookup: %v allocations", n)
	}
}

// TestDescribedSchemas: a describe through the calls API is what DescribedSchemas (MCP's
// tools/list) sees, with validation on or off, for the manifest it was sent to only.
func TestDescribedSchemas(t *testing.T) {
	for _, mode := range []string{config.ValidateOff, config.ValidateKnown} {
		h := pipelineHarness(t, mode, nil)
		h.describeWith(t, "notes.create", titleSchema)
		key := ConvKey{App: "app1", User: "u1", Conversation: "c1"}
		got := h.b.DescribedSchemas(key, client1, 1)
		if len(got) != 1 || string(got["notes.create"]) != titleSchema {
			t.Fatalf("%s: described %v", mode, got)
		}
		if len(h.b.DescribedSchemas(key, client1, 2)) != 0 {
			t.Fatalf("%s: another rev sees the describe", mode)
		}
	}
}
