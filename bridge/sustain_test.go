package bridge

import (
	"context"
	"net/http"
	"testing"
)

// TestSustainedCallsBoundedStore: finished calls no longer hold store entries against the cap,
// so a store sized for 50 open calls serves any number of sequential calls without 503 (before,
// 50 answered calls filled it for timeout + 5 min and the 51st got "Bridge store unavailable").
func TestSustainedCallsBoundedStore(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer bool
		body   string
		want   string
	}{
		{"answered", true, callBody, `{"status":"ok"}`},
		{"timed out", false, `{"user_id":"u1","conversation_id":"c1","tool":"form.fill","timeout_ms":1}`, `{"status":"timeout"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := NewMemoryStore(MemoryOptions{MaxEntries: 50, SweepInterval: -1})
			h := newHarness(t, func(o *Options) {
				o.Store = store
				o.Limits.CallBurst = 1 << 20
			})
			defer store.Close()
			h.withManifest(client1, 1)
			if tc.answer {
				h.pub.onPub = func(p published) {
					if m := decodeEvent(t, p); m.Type == TypeCall {
						go func() {
							if code := h.page("1.1", "c1", resultMsg(client1, m.ID, `{"status":"ok"}`)).Code; code != http.StatusNoContent {
								t.Errorf("result: %d", code)
							}
						}()
					}
				}
			}
			for i := 0; i < 200; i++ {
				if r := recv(t, h.startCall(context.Background(), "calls", tc.body)); r.Code != 200 || string(r.Result) != tc.want {
					t.Fatalf("call %d: %+v", i, r)
				}
			}
			if _, open, _ := store.Len(); open-store.Tombstones() != 0 || store.Tombstones() != 200 {
				t.Fatalf("%d entries, %d of them tombstones", open, store.Tombstones())
			}
		})
	}
}
