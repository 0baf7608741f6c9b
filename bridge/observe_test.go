package bridge

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

type callRecorder struct {
	mu    sync.Mutex
	lines []string
}

func (r *callRecorder) CallStarted(app, id, user, conv, tool, kind string, _ time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, fmt.Sprintf("start %s %s %s %s %s", app, user, conv, tool, kind))
}

func (r *callRecorder) CallEnded(app, id, user, conv, tool, kind, status, reason string, _ time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, fmt.Sprintf("end %s %s %s %s %s %s %s", app, user, conv, tool, kind, status, reason))
}

func (r *callRecorder) snapshot() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.lines)
}

// TestObserverSeesCalls: a call starts and ends with its status; a call without a page ends
// with its reason; once detached nothing is reported. Never an input or result value.
func TestObserverSeesCalls(t *testing.T) {
	h := newHarness(t, nil)
	rec := &callRecorder{}
	h.b.SetObserver(rec)
	r := recv(t, h.startCall(context.Background(), "calls", callBody)) // no page yet
	if r.Code != 200 {
		t.Fatalf("got %+v", r)
	}
	h.withManifest(client1, 5)
	ch := h.startCall(context.Background(), "calls", callBody)
	m := h.pub.waitMsg(t, "call", "")
	if rec := h.page("1.1", "c1", resultMsg(client1, m.ID, `{"status":"ok","data":{"a":1}}`)); rec.Code != 204 {
		t.Fatalf("result: %d", rec.Code)
	}
	recv(t, ch)
	want := []string{
		"start app1 u1 c1 form.fill call", "end app1 u1 c1 form.fill call error no_page",
		"start app1 u1 c1 form.fill call", "end app1 u1 c1 form.fill call ok ",
	}
	if got := rec.snapshot(); !slices.Equal(got, want) {
		t.Fatalf("got %q\nwant %q", got, want)
	}
	if m, err := h.b.Manifest(context.Background(), "app1", "u1", "c1"); err != nil || m == nil || m.Rev != 5 {
		t.Fatalf("manifest %+v %v", m, err)
	}
	h.b.SetObserver(nil)
	ch = h.startCall(context.Background(), "calls", callBody)
	second := h.pub.waitOther(t, "call", m.ID)
	h.page("1.1", "c1", resultMsg(client1, second.ID, `{"status":"ok"}`))
	recv(t, ch)
	if got := rec.snapshot(); len(got) != len(want) {
		t.Fatalf("detached observer called: %q", got[len(want):])
	}
}
