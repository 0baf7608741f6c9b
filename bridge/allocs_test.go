package bridge

import (
	"context"
	"net/http"
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

// TestCallRoundTripAllocs bounds the allocations of one whole call in process (the agent's
// signed request, the publish to the page, the page's result POST, the agent's answer), as
// BenchmarkCallRoundTrip runs it. The bound is the count measured when the guard was
// written: a change that adds an allocation to the bridge's hot path fails CI.
func TestCallRoundTripAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes allocation counts; scripts/test.sh runs this test without -race")
	}
	const bound = 185
	h := newHarness(t, func(o *Options) { o.Limits.PageBurst, o.Limits.CallBurst = 1<<30, 1<<30 })
	h.withManifest(client1, 1)
	done := make(chan int, 1)
	h.pub.onPub = func(p published) {
		m := decodeEvent(t, p)
		if m.Type != TypeCall {
			return
		}
		go func() { done <- h.page("1.1", "c1", resultMsg(client1, m.ID, `{"status":"ok","data":{"n":1}}`)).Code }()
	}
	call := func() {
		r := recv(t, h.startCall(context.Background(), "calls", callBody))
		if string(r.Result) != `{"data":{"n":1},"status":"ok"}` {
			t.Fatalf("got %+v", r)
		}
		if code := <-done; code != http.StatusNoContent {
			t.Fatalf("page result: %d", code)
		}
	}
	call()
	n := testing.AllocsPerRun(200, call)
	t.Logf("%v allocations per call round trip", n)
	if n > bound {
		t.Fatalf("%v allocations per call round trip, want at most %v", n, bound)
	}
}
