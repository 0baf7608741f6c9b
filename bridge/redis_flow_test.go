package bridge

import (
	"context"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// TestFlowsOnRedisStore runs the HTTP flows on the Redis store: the bridge must not depend on
// memory-store specifics.
func TestFlowsOnRedisStore(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	rs, err := NewRedisStore(context.Background(), rdb, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rs.Close() })
	h := newHarness(t, func(o *Options) { o.Store = rs })
	h.withManifest(client1, 5)
	if code := h.page("1.1", "c1", manifestMsg(client1, 4, "")).Code; code != 204 {
		t.Fatal(code)
	}
	ch := h.startCall(context.Background(), "calls", callBody)
	call := h.pub.waitMsg(t, "call", "")
	needs := `{"status":"needs_confirmation","confirmId":"f1","summary":"s"}`
	if code := h.page("1.1", "c1", resultMsg(client1, call.ID, needs)).Code; code != 204 {
		t.Fatalf("result: %d", code)
	}
	if r := recv(t, ch); string(r.Result) != `{"confirmId":"f1","status":"needs_confirmation","summary":"s"}` ||
		string(r.Hints) != `{"readOnly":false,"consequential":true}` {
		t.Fatalf("got %+v", r)
	}
	for _, want := range []int{204, 409} {
		if code := h.page("1.1", "c1", confirmedMsg(client1, "f1", `{"status":"ok"}`)).Code; code != want {
			t.Fatalf("confirmed: %d, want %d", code, want)
		}
	}
	if len(h.hooks.All()) != 1 {
		t.Fatal("webhook not emitted once")
	}
	ch = h.startCall(context.Background(), "calls", `{"user_id":"u1","conversation_id":"c1","tool":"form.fill","timeout_ms":5}`)
	if r := recv(t, ch); string(r.Result) != `{"status":"timeout"}` {
		t.Fatalf("got %+v", r)
	}
}
