package pusher

import (
	"encoding/json"
	"testing"
)

// Every protocol error of the table has a 4xxx code and a message, and its frame (encoded
// once) is the pusher:error Pusher clients parse: {"event":"pusher:error","data":"{\"message\",\"code\"}"}.
func TestProtoErrorTable(t *testing.T) {
	for e := range ProtoError(len(protoErrors)) {
		if c := e.Code(); c < 4000 || c > 4999 || e.Message() == "" {
			t.Fatalf("error %d: code %d, message %q", e, c, e.Message())
		}
		var got struct {
			Event string `json:"event"`
			Data  string `json:"data"` // a JSON string, as Pusher sends it
		}
		var data struct {
			Message string `json:"message"`
			Code    int    `json:"code"`
		}
		f := e.frame()
		payload := f[2:] // every message is under 126 bytes: a 2-byte header
		if f[1] >= 126 || json.Unmarshal(payload, &got) != nil || json.Unmarshal([]byte(got.Data), &data) != nil ||
			got.Event != "pusher:error" || data.Code != e.Code() || data.Message != e.Message() {
			t.Fatalf("error %d: frame %q", e, e.frame())
		}
	}
}
