package bridge

import (
	"context"
	"net/http"
	"testing"
)

// BenchmarkCallRoundTrip measures one whole call in process: the agent's signed request, the
// fake publish, the page's result POST and the agent's answer. CI runs it with -benchtime=1x.
func BenchmarkCallRoundTrip(b *testing.B) {
	h := newHarness(b, func(o *Options) { o.Limits.PageBurst, o.Limits.CallBurst = 1<<30, 1<<30 })
	h.withManifest(client1, 1)
	h.pub.onPub = func(p published) {
		m := decodeEvent(b, p)
		if m.Type != TypeCall {
			return
		}
		go func() {
			if code := h.page("1.1", "c1", resultMsg(client1, m.ID, `{"status":"ok","data":{"n":1}}`)).Code; code != http.StatusNoContent {
				b.Errorf("page result: %d", code)
			}
		}()
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r := recv(b, h.startCall(context.Background(), "calls", callBody))
		if string(r.Result) != `{"data":{"n":1},"status":"ok"}` {
			b.Fatalf("got %+v", r)
		}
	}
}
