package bridge

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

// referenceToPage is the encoder the appenders replaced: json.Marshal of the wire struct. The
// appenders must produce the same bytes.
func referenceToPage(t testing.TB, typ, clientID, id string, rev *int64, tool string, input json.RawMessage) []byte {
	t.Helper()
	m := struct {
		Protocol int             `json:"protocol"`
		Type     string          `json:"type"`
		ClientID string          `json:"clientId"`
		ID       string          `json:"id"`
		Rev      *int64          `json:"rev,omitempty"`
		Tool     string          `json:"tool,omitempty"`
		Input    json.RawMessage `json:"input,omitempty"`
	}{ProtocolVersion, typ, clientID, id, rev, tool, input}
	if typ == TypeCall && len(strings.TrimSpace(string(input))) == 0 {
		m.Input = json.RawMessage("null")
	}
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Inputs that exercise the canonical re-encoding: whitespace, HTML characters, U+2028, escapes.
var canonInputs = []string{
	``, `null`, `{"title":"x"}`, ` { "a" : [1, 2, {"b": null}] } `, `"<b>&amp;</b>"`,
	`{"s":"line\u2028sep","t":"raw` + "\u2028\u2029" + `"}`, `{"q":"a \"quoted\" \\ value\n"}`,
	`[true,false,-0.5e+10]`, `{"ü":"ÿ€𝄞"}`, "{\n\t\"x\": 1\r\n}", `{"html":"a<b>c&d"}`,
}

// TestEncoderMatchesValidator: the appended call/describe/cancel messages are byte-identical to
// the old marshal-then-validate encoder and pass ValidateToPage, for the fixtures' values and for
// inputs that need canonicalizing.
func TestEncoderMatchesValidator(t *testing.T) {
	rev := int64(7)
	type msg struct {
		typ, clientID, id string
		rev               *int64
		tool              string
		input             string
	}
	cases := []msg{}
	for _, in := range canonInputs {
		cases = append(cases, msg{TypeCall, client1, "c1", &rev, "form.fill", in}, msg{TypeCall, "k", "id_2", nil, "x", in})
	}
	cases = append(cases, msg{TypeDescribe, client1, "c1", nil, "form.fill", ""}, msg{TypeCancel, client1, "c1", nil, "", ""})
	for _, fx := range loadFixtures(t) {
		if fx.direction != "toPage" || !fx.valid {
			continue
		}
		var m struct {
			Type, ClientID, ID, Tool string
			Rev                      *int64
			Input                    json.RawMessage
		}
		if err := json.Unmarshal(fx.message, &m); err != nil {
			t.Fatal(err)
		}
		cases = append(cases, msg{m.Type, m.ClientID, m.ID, m.Rev, m.Tool, string(m.Input)})
	}
	for _, tc := range cases {
		var got []byte
		var err error
		switch tc.typ {
		case TypeCall:
			got, err = EncodeCall(tc.clientID, tc.id, tc.tool, tc.rev, json.RawMessage(tc.input))
		case TypeDescribe:
			got, err = EncodeDescribe(tc.clientID, tc.id, tc.tool)
		case TypeCancel:
			got, err = EncodeCancel(tc.clientID, tc.id)
		}
		if err != nil {
			t.Fatalf("%+v: %v", tc, err)
		}
		want := referenceToPage(t, tc.typ, tc.clientID, tc.id, tc.rev, tc.tool, json.RawMessage(tc.input))
		if string(got) != string(want) {
			t.Errorf("%s %q:\n got %s\nwant %s", tc.typ, tc.input, got, want)
		}
		if err := ValidateToPage(got); err != nil {
			t.Errorf("%s: emitted an invalid message %s: %v", tc.typ, got, err)
		}
		ev := appendEvent(nil, tc.typ, tc.clientID, tc.id, tc.rev, tc.tool, []byte(tc.input))
		if string(ev) != string(EventData(want)) {
			t.Errorf("event %s, want %s", ev, EventData(want))
		}
	}
}

// TestCallResponseBytes: the appended agent answer equals json.Marshal(callResponse).
func TestCallResponseBytes(t *testing.T) {
	yes, no := true, false
	for _, tc := range []struct {
		result string
		hints  Hints
	}{
		{`{"status":"ok"}`, Hints{}},
		{`{"data":{"a":[1,2]},"status":"ok"}`, Hints{ReadOnly: &no, Consequential: &yes}},
		{`{"data":"\u003cb\u003e","status":"ok"}`, Hints{Destructive: &yes, UntrustedContent: &no}},
		{`{"data":"<b> & </b>","status":"ok"}`, Hints{ReadOnly: &yes, Consequential: &yes, Destructive: &no, UntrustedContent: &yes}},
		{timeoutJSON, Hints{UntrustedContent: &yes}},
		{``, Hints{}},
	} {
		var result json.RawMessage // nil marshals as null
		if tc.result != "" {
			result = json.RawMessage(tc.result)
		}
		want := mustJSON(callResponse{ID: "0d5f-id", Result: result, Hints: tc.hints})
		if got := appendCallResponse(nil, "0d5f-id", []byte(tc.result), tc.hints); string(got) != string(want) {
			t.Errorf("got  %s\nwant %s", got, want)
		}
	}
}

const timeoutJSON = `{"status":"timeout"}`

// TestResultStatus: the suffix read agrees with a full parse for every status the bridge stores.
func TestResultStatus(t *testing.T) {
	for _, tc := range []struct{ result, want string }{
		{`{"status":"ok"}`, "ok"},
		{`{"data":{"status":"error"},"status":"ok"}`, "ok"},
		{`{"data":"\"status\":\"ok\"}","status":"error"}`, "error"},
		{`{"message":"No page is connected","status":"error"}`, "error"},
		{timeoutJSON, "timeout"},
		{`{"code":"stale","message":"Stale","rev":9,"status":"refused"}`, "refused"},
		{`{"issues":[{"message":"m","path":"p"}],"status":"invalid"}`, "invalid"},
		{`{"by":"operator","status":"cancelled"}`, "cancelled"},
		{`{"confirmId":"f1","status":"needs_confirmation","summary":"x \"status\":\"ok\"}"}`, "needs_confirmation"},
		{`not json`, "unknown"},
	} {
		if got := resultStatus(json.RawMessage(tc.result)); got != tc.want {
			t.Errorf("resultStatus(%s) = %q, want %q", tc.result, got, tc.want)
		}
	}
}

// fastDecodeCases are bodies for the differential checks (and fuzz seeds): accepted by the fast
// path, or not, each must decode exactly as the reference decoder does.
var fastDecodeCases = []string{
	resultMsg(client1, "id1", `{"status":"ok"}`),
	resultMsg(client1, "id1", `{"status":"ok","data":{"n":[1, 2, "<x>"]}}`),
	resultMsg(client1, "id1", `{"data":null,"status":"ok"}`),
	resultMsg(client1, "id1", `{"status":"ok","data":1,"data":2}`),
	resultMsg(client1, "id1", `{"status":"o\u006b"}`),
	resultMsg(client1, "id1", `{"status":"error","message":"m"}`),
	resultMsg(client1, "i\u0064", `{"status":"ok"}`),
	`{"protocol":1.0,"type":"result","clientId":"a","id":"b","result":{"status":"ok"}}`,
	`{"protocol":1,"type":"result","clientId":"a","id":"b","result":{"status":"ok"},"x":1}`,
	`{"protocol":1,"type":"result","clientId":"a","id":"b","id":"c","result":{"status":"ok"}}`,
	`{"protocol":1,"type":"result","clientId":"a","id":"b","result":{"status":"ok","data":"` + "\xff" + `"}}`,
	` {"protocol":1, "type":"result", "clientId":"a", "id":"b", "result":{"status":"ok", "data": [ ] } } `,
	`{"protocol":1,"type":"result","clientId":"a","id":"b","result":{"status":"ok","data":` + strings.Repeat("[", 62) + strings.Repeat("]", 62) + `}}`,
	`{"protocol":1,"type":"result","clientId":"a","id":"b","result":{"status":"ok","data":` + strings.Repeat("[", 63) + strings.Repeat("]", 63) + `}}`,
	`{"protocol":1,"type":"result","clientId":"a","id":"b","result":{"status":"ok"}} x`,
	`{"protocol":1,"type":"result","clientId":"a","id":"b","result":{"status":"ok","data":01}}`,
	`{"protocol":1,"type":"result","clientId":"a","id":"b","result":{"status":"ok","data":"\x01"}}`,
	manifestMsg(client1, 1, toolsJSON),
	callBody,
	`{"user_id":"u1","conversation_id":"c1","tool":"x","input":null,"rev":null,"tool_use_id":null,"timeout_ms":null}`,
	`{"user_id":"u1","conversation_id":"c1","tool":"x","timeout_ms":600000,"rev":9007199254740991}`,
	`{"user_id":"u1","conversation_id":"c1","tool":"x","timeout_ms":600001}`,
	`{"user_id":"u1","conversation_id":"c1","tool":"x","rev":1e2,"timeout_ms":1.0}`,
	`{"user_id":"u1","conversation_id":"c1","tool":"x","rev":9007199254740992}`,
	`{"user_id":"u1","conversation_id":"c1","tool":"x","tool":"y"}`,
	`{"user_id":"u1","conversation_id":"c1","tool":"x","extra":{"deep":[1,2]},"extra":3}`,
	`{"user_id":"u1","conversation_id":"c1","tool":"x","input":{"a":"<&>"},"tool_use_id":"t\"u"}`,
	`{"user_id":"u1","conversation_id":"c1","tool":"x","tool_use_id":"` + strings.Repeat("a", 257) + `"}`,
	`{"user_id":"u1","conversation_id":"c1","tool":"x","input":` + strings.Repeat("[", 63) + strings.Repeat("]", 63) + `}`,
	`{"user_id":"u.1","conversation_id":"c1","tool":"x"}`, `{"user_id":"u1","conversation_id":"c1"}`,
	`{"user_id":"u1","conversation_id":"c1","tool":"x","rev":-0}`, `{"user_id":"u1","conversation_id":"c1","tool":"x","rev":"1"}`,
	`[]`, `{`, ``, `{"\u0075ser_id":"u1","conversation_id":"c1","tool":"x"}`,
}

// checkFastPageDecoder fails when the fast path accepts b differently from the reference.
func checkFastPageDecoder(t *testing.T, b []byte) {
	fast, ok := fastDecodeResult(b)
	if !ok {
		return
	}
	ref, err := decodePageMessage(b)
	if err != nil {
		t.Fatalf("fast path accepted %q, reference: %v", b, err)
	}
	if !reflect.DeepEqual(fast, ref) {
		t.Fatalf("%q: fast %+v (result %s), reference %+v (result %s)", b, fast, fast.Result, ref, ref.Result)
	}
}

func checkFastCallDecoder(t *testing.T, b []byte, kind string) {
	fast, ok := fastDecodeCallRequest(b, kind, 10*time.Minute)
	if !ok {
		return
	}
	ref, err := slowDecodeCallRequest(b, kind, 10*time.Minute)
	if err != nil {
		t.Fatalf("fast path accepted %q (%s), reference: %v", b, kind, err)
	}
	if !reflect.DeepEqual(fast, ref) {
		t.Fatalf("%q (%s): fast %+v, reference %+v", b, kind, fast, ref)
	}
	f, _ := EncodeCall(client1, "id", fast.Tool, fast.Rev, fast.Input)
	r, _ := EncodeCall(client1, "id", ref.Tool, ref.Rev, ref.Input)
	if string(f) != string(r) {
		t.Fatalf("%q: calls differ: %s vs %s", b, f, r)
	}
}

// TestFastDecoders: the single-pass decoders take the common bodies and agree with the
// reference decoders on everything they take (the fuzz targets run the same checks).
func TestFastDecoders(t *testing.T) {
	for _, b := range fastDecodeCases {
		checkFastPageDecoder(t, []byte(b))
		checkFastCallDecoder(t, []byte(b), KindCall)
		checkFastCallDecoder(t, []byte(b), KindDescribe)
	}
	for _, tc := range []struct {
		body string
		page bool // else a call request
	}{
		{resultMsg(client1, "id1", `{"status":"ok","data":{"n":[1, 2]}}`), true},
		{resultMsg(client1, "id1", `{"status":"ok"}`), true},
		{callBody, false},
		{`{"user_id":"u1","conversation_id":"c1","tool":"x","input":null,"rev":null,"tool_use_id":null,"timeout_ms":1000}`, false},
	} {
		var ok bool
		if tc.page {
			_, ok = fastDecodeResult([]byte(tc.body))
		} else {
			_, ok = fastDecodeCallRequest([]byte(tc.body), KindCall, time.Minute)
		}
		if !ok {
			t.Errorf("fast path refused the common body %s", tc.body)
		}
	}
}

// TestScanMembers: the exported one-pass member scan, table-driven.
func TestScanMembers(t *testing.T) {
	for _, tc := range []struct {
		in   string
		ok   bool
		keys string
	}{
		{`{"a":1,"b":{"c":[1,2]},"d":"x"}`, true, "a=1;b={\"c\":[1,2]};d=\"x\";"},
		{` {} `, true, ""},
		{`{"a":1} x`, false, "a=1;"},
		{`{"\u0061":1}`, false, ""},
		{`[1]`, false, ""},
		{`{"a":}`, false, ""},
		{`{"a":1,}`, false, "a=1;"},
		{"{\"a\":\"\xff\"}", false, ""},
		{strings.Repeat(`{"a":`, MaxDepth+1) + "1" + strings.Repeat("}", MaxDepth+1), false, ""},
	} {
		got := ""
		ok := ScanMembers([]byte(tc.in), func(k, v []byte) bool { got += string(k) + "=" + string(v) + ";"; return true })
		if ok != tc.ok || got != tc.keys {
			t.Errorf("ScanMembers(%.40q) = %v %q, want %v %q", tc.in, ok, got, tc.ok, tc.keys)
		}
	}
	if ScanMembers([]byte(`{"a":1,"b":2}`), func(k, _ []byte) bool { return string(k) != "b" }) {
		t.Error("f returning false did not stop the scan")
	}
}
