package pusher

import (
	"bytes"
	"encoding/json"
	"testing"
	"unicode/utf8"
)

// FuzzDecodeClientMessage: no client frame makes the decoders panic, and whatever a client
// event's data is, the relayed frame is valid JSON.
func FuzzDecodeClientMessage(f *testing.F) {
	for _, s := range []string{
		`{"event":"pusher:subscribe","data":{"channel":"a","auth":"k:s","channel_data":"{\"user_id\":1}"}}`,
		`{"event":"pusher:subscribe","data":"{\"channel\":\"a\"}"}`,
		`{"event":"pusher:subscribe","data":"\"nested\""}`,
		`{"event":"pusher:signin","data":{"auth":"k:s","user_data":"{\"id\":\"1\"}"}}`,
		`{"event":"pusher:signin","data":"{\"auth\":\"k:s\",\"user_data\":\"x\"}"}`,
		`{"event":"client-x","channel":"private-a","data":"{\"a\":1}"}`,
		`{"event":"client-x","channel":"private-a","data":{"a":[1,2,{"b":null}]}}`,
		`{"event":"client-x","channel":"private-a","data":"\u2028\ud800"}`,
		`{"event":"pusher:ping","data":null}`,
		`{"event":"x","data":   "  "}`,
		`{"event":"x","data":"`,
		`{"event":""}`,
		`[]`, `null`, `""`, ``, "\xff\xfe",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, data := range []json.RawMessage{b, nil} {
			_, _ = DecodeSubscribe(data)
			_, _ = DecodeSignin(data)
			_ = clientEventData(data)
		}
		m, err := DecodeClientMessage(b)
		if err != nil {
			return
		}
		if m.Event == "" {
			t.Fatal("decoded a message without event")
		}
		if sd, err := DecodeSubscribe(m.Data); err == nil && sd.Channel == "" {
			t.Fatal("subscribe without channel accepted")
		}
		if sd, err := DecodeSignin(m.Data); err == nil && (sd.Auth == "" || sd.UserData == "") {
			t.Fatal("signin without auth or user_data accepted")
		}
		data := clientEventData(m.Data)
		ev := AppendEvent(nil, m.Event, m.Channel, data, "7", true)
		var back struct {
			Event, Channel, Data string
			UserID               string `json:"user_id"`
		}
		if err := json.Unmarshal(ev, &back); err != nil {
			t.Fatalf("relayed frame is not JSON: %s: %v", ev, err)
		}
		if utf8.ValidString(data) && back.Data != data {
			t.Fatalf("data %q came back as %q", data, back.Data)
		}
	})
}

// FuzzAppendJSONString: the output is always valid JSON; for valid UTF-8 it decodes to the
// input, otherwise to what encoding/json would make of it.
func FuzzAppendJSONString(f *testing.F) {
	for _, s := range []string{"", "plain", `"quoted" \back\slash`, "\x00\x01\x1f\x7f", "\n\r\t\b\f",
		"héllo 😀", "\u2028\u2029", "<script>&amp;</script>", "\xff", "a\xc3", "\xed\xa0\x80", "\xf4\x90\x80\x80"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := appendJSONString([]byte("prefix"), s)
		if !bytes.HasPrefix(out, []byte("prefix")) {
			t.Fatal("dst prefix lost")
		}
		out = out[len("prefix"):]
		if !json.Valid(out) {
			t.Fatalf("invalid JSON for %q: %s", s, out)
		}
		var got string
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatal(err)
		}
		if utf8.ValidString(s) {
			if got != s {
				t.Fatalf("round trip %q -> %s -> %q", s, out, got)
			}
			return
		}
		std, _ := json.Marshal(s)
		var want string
		_ = json.Unmarshal(std, &want)
		if got != want {
			t.Fatalf("invalid UTF-8 %q decoded as %q, encoding/json gives %q", s, got, want)
		}
	})
}
