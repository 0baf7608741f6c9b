package benchkit

import (
	"encoding/json"
	"testing"

	"github.com/reverbgo/reverbgo/internal/pusherclient"
)

func TestPageFrames(t *testing.T) {
	str := func(v any) json.RawMessage {
		b, _ := json.Marshal(v)
		s, _ := json.Marshal(string(b))
		return s
	}
	tests := []struct {
		name      string
		f         pusherclient.Frame
		token     string
		isSession bool
		callID    string
		isCall    bool
	}{
		{"session", pusherclient.Frame{Event: "toolmark.session", Data: str(map[string]string{"token": "tk"})}, "tk", true, "", false},
		{"call", pusherclient.Frame{Event: "toolmark.message", Data: str(map[string]any{"message": map[string]any{"type": "call", "id": "c1", "input": map[string]int{"seq": 1}}})}, "", false, "c1", true},
		{"not a call", pusherclient.Frame{Event: "toolmark.message", Data: str(map[string]any{"message": map[string]any{"type": "cancel", "id": "c1"}})}, "", false, "", false},
		{"other event", pusherclient.Frame{Event: "pusher:pong"}, "", false, "", false},
		{"garbage", pusherclient.Frame{Event: "toolmark.message", Data: json.RawMessage(`"{"`)}, "", false, "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			token, ok := SessionToken(tc.f)
			if token != tc.token || ok != tc.isSession {
				t.Fatalf("SessionToken = %q %v, want %q %v", token, ok, tc.token, tc.isSession)
			}
			id, input, ok := Call(tc.f)
			if id != tc.callID || ok != tc.isCall || (ok && string(input) != `{"seq":1}`) {
				t.Fatalf("Call = %q %s %v, want %q %v", id, input, ok, tc.callID, tc.isCall)
			}
		})
	}
}

func TestEchoCallAndAnswer(t *testing.T) {
	body, in := EchoCall("u", "c", "t.echo", 7, 500)
	var req map[string]any
	if err := json.Unmarshal(body, &req); err != nil || req["tool"] != "t.echo" || in != `{"seq":7}` {
		t.Fatalf("EchoCall = %s %s %v", body, in, err)
	}
	ok := []byte(`{"result":{"status":"ok","data":{"seq":7}}}`)
	for _, tc := range []struct {
		status int
		body   []byte
		want   bool
	}{{200, ok, true}, {500, ok, false}, {200, []byte(`{"result":{"status":"ok","data":{"seq":8}}}`), false}, {200, []byte(`{`), false}} {
		if got := EchoedOK(tc.status, tc.body, in); got != tc.want {
			t.Errorf("EchoedOK(%d, %s) = %v", tc.status, tc.body, got)
		}
	}
	if m := EchoManifest("cid", "a.b"); m["tools"].([]map[string]any)[0]["llmName"] != "a_b" {
		t.Fatalf("llmName of a.b: %v", m)
	}
}
