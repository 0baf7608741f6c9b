package pusher

import (
	"context"
	"sync/atomic"
	"testing"
)

func TestUpReportsDependencies(t *testing.T) {
	var down atomic.Bool
	ts := newServer(t, withOptions(func(o *Options) {
		o.Health = func(context.Context) map[string]string {
			if down.Load() {
				return map[string]string{"redis": "unreachable"}
			}
			return nil
		}
	}))
	cases := []struct {
		down   bool
		status int
		want   map[string]any
	}{
		{false, 200, map[string]any{"health": "OK"}},
		{true, 503, map[string]any{"health": "DEGRADED", "redis": "unreachable"}},
		{false, 200, map[string]any{"health": "OK"}},
	}
	for _, tc := range cases {
		down.Store(tc.down)
		st, body := ts.rawAPI(t, "GET", "/up", nil)
		got := mustJSONMap(t, body)
		if st != tc.status || len(got) != len(tc.want) {
			t.Fatalf("down=%v: %d %s", tc.down, st, body)
		}
		for k, v := range tc.want {
			if got[k] != v {
				t.Fatalf("down=%v: %d %s", tc.down, st, body)
			}
		}
	}
}

// TestMemberGone: a user removed by the presence store (a dead node reaped) is announced to
// the channel's sockets.
func TestMemberGone(t *testing.T) {
	ts := newServer(t)
	a := ts.connect(t)
	room := "presence-gone"
	ts.subscribePresence(a, room, `{"user_id":"u1","user_info":{}}`)
	ts.s.MemberGone(ts.app.ID, room, "ghost")
	var removed map[string]any
	a.WaitEvent("pusher_internal:member_removed", room).DataInto(t, &removed)
	if removed["user_id"] != "ghost" {
		t.Fatalf("member_removed %v", removed)
	}
}
