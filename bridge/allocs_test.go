package bridge

import (
	"regexp"
	"testing"
	"time"

	"github.com/google/uuid"
)

var uuidV4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// TestNewCallID: call ids keep the canonical random-UUID form pages and agents see, and do
// not repeat.
func TestNewCallID(t *testing.T) {
	seen := map[string]bool{}
	for range 10000 {
		id := newCallID()
		if !uuidV4.MatchString(id) || !ValidID(id) {
			t.Fatalf("call id %q is not a canonical version 4 UUID", id)
		}
		if seen[id] {
			t.Fatalf("call id %q repeated", id)
		}
		seen[id] = true
	}
	if raceEnabled {
		return
	}
	ours := testing.AllocsPerRun(100, func() { _ = newCallID() })
	theirs := testing.AllocsPerRun(100, func() { _ = uuid.NewString() })
	if ours != 1 || theirs <= ours {
		t.Fatalf("newCallID allocates %v times (want 1, the string), uuid.NewString %v", ours, theirs)
	}
}

// TestHotDecoderAllocs bounds the allocations of the two bodies every call decodes: the
// decoded struct and its strings, nothing per member.
func TestHotDecoderAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes allocation counts")
	}
	result := []byte(`{"protocol":1,"type":"result","clientId":"page-1","id":"6f1c2a34-5b6d-4e7f-8a9b-0c1d2e3f4a5b","result":{"status":"ok","data":{"seq":1}}}`)
	call := []byte(`{"user_id":"u1","conversation_id":"c1","tool":"bench.echo","input":{"seq":1},"tool_use_id":"toolu_1","timeout_ms":5000}`)
	for _, tc := range []struct {
		name string
		max  float64
		f    func() bool
	}{
		// PageMessage, clientId, id, canonical result.
		{"result", 4, func() bool { _, ok := fastDecodeResult(result); return ok }},
		// callRequest, user, conversation, tool, tool_use_id.
		{"call", 5, func() bool { _, ok := fastDecodeCallRequest(call, KindCall, time.Minute); return ok }},
	} {
		if !tc.f() {
			t.Fatalf("%s: not decoded by the fast path", tc.name)
		}
		if n := testing.AllocsPerRun(200, func() { tc.f() }); n > tc.max {
			t.Errorf("%s: %v allocations, want at most %v", tc.name, n, tc.max)
		}
	}
}
