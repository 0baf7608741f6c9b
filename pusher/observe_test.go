package pusher

import (
	"github.com/reverbgo/reverbgo/internal/testutil"
	"slices"
	"sync"
	"testing"

	"github.com/reverbgo/reverbgo/config"
)

// obsRecorder is a fake Observer that keeps every call as a line.
type obsRecorder struct {
	mu    sync.Mutex
	lines []string
}

func (r *obsRecorder) add(s string) { r.mu.Lock(); r.lines = append(r.lines, s); r.mu.Unlock() }
func (r *obsRecorder) has(s string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Contains(r.lines, s)
}

func (r *obsRecorder) Connection(app, socket string, open bool, reason string, code int) {
	if open {
		r.add("open " + app + " " + socket)
		return
	}
	r.add("close " + app + " " + socket + " " + reason)
}

func (r *obsRecorder) Subscription(app, socket, channel string, sub bool) {
	if sub {
		r.add("sub " + socket + " " + channel)
		return
	}
	r.add("unsub " + socket + " " + channel)
}

func (r *obsRecorder) Event(app, kind, channel, event, data, socket string) {
	r.add(kind + " " + channel + " " + event + " " + data)
}

// TestObserverSeesTheSocketLifecycle drives a real socket and the HTTP API with an observer
// attached, then detached: every tap fires once attached, none after.
func TestObserverSeesTheSocketLifecycle(t *testing.T) {
	ts := newServer(t, withApp(func(a *config.App) { a.AcceptClientEventsFrom = "all" }))
	rec := &obsRecorder{}
	ts.s.SetObserver(rec)
	c := ts.connect(t)
	id := c.SocketID
	testutil.WaitFor(t, "open", func() bool { return rec.has("open " + testAppID + " " + id) })
	ts.subscribePrivate(c, "private-x")
	c.Send(map[string]any{"event": "client-typing", "channel": "private-x", "data": map[string]any{"a": 1}})
	testutil.WaitFor(t, "events", func() bool {
		return rec.has("sub "+id+" private-x") && rec.has(ObservedClient+` private-x client-typing {"a":1}`)
	})

	// API and console triggers are observed too; package api tests them (TestTriggersObserved).
	ts.trigger(t, "private-x", "order.shipped", `{"id":1}`)
	c.WaitEvent("order.shipped", "private-x")
	in, out, delivered := ts.s.Counters(testAppID)
	if in < 2 || out < 1 || delivered < 1 {
		t.Fatalf("counters in=%d out=%d delivered=%d", in, out, delivered)
	}
	c.WS.Close()
	testutil.WaitFor(t, "close", func() bool {
		return rec.has("unsub "+id+" private-x") && rec.has("close "+testAppID+" "+id+" client_gone")
	})

	ts.s.SetObserver(nil)
	rec.mu.Lock()
	n := len(rec.lines)
	rec.mu.Unlock()
	c2 := ts.connect(t)
	c2.Subscribe("y")
	ts.trigger(t, "y", "e", "{}")
	c2.WaitEvent("e", "y")
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.lines) != n {
		t.Fatalf("detached observer still called: %v", rec.lines[n:])
	}
}
