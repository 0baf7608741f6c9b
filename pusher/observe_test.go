package pusher

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
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
	id := c.socketID
	eventually(t, "open", func() bool { return rec.has("open " + testAppID + " " + id) })
	ts.subscribePrivate(c, "private-x")
	ts.trigger(t, "private-x", "order.shipped", `{"id":1}`)
	c.send(map[string]any{"event": "client-typing", "channel": "private-x", "data": map[string]any{"a": 1}})
	eventually(t, "events", func() bool {
		return rec.has("sub "+id+" private-x") && rec.has(ObservedAPI+` private-x order.shipped {"id":1}`) &&
			rec.has(ObservedClient+` private-x client-typing {"a":1}`)
	})
	in, out, delivered := ts.s.Counters(testAppID)
	if in < 2 || out < 1 || delivered < 1 {
		t.Fatalf("counters in=%d out=%d delivered=%d", in, out, delivered)
	}
	if err := ts.s.Trigger(context.Background(), testAppID, "private-x", "console.test", []byte(`"hi"`)); err != nil {
		t.Fatal(err)
	}
	c.waitEvent("console.test", "private-x")
	eventually(t, "console trigger", func() bool { return rec.has(ObservedConsole + " private-x console.test hi") })
	c.ws.Close()
	eventually(t, "close", func() bool {
		return rec.has("unsub "+id+" private-x") && rec.has("close "+testAppID+" "+id+" client_gone")
	})

	ts.s.SetObserver(nil)
	rec.mu.Lock()
	n := len(rec.lines)
	rec.mu.Unlock()
	c2 := ts.connect(t)
	c2.subscribe("y")
	ts.trigger(t, "y", "e", "{}")
	c2.waitEvent("e", "y")
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.lines) != n {
		t.Fatalf("detached observer still called: %v", rec.lines[n:])
	}
}

// TestTriggerValidatesAsTheHTTPAPI checks the console's trigger refuses what POST /events refuses.
func TestTriggerValidatesAsTheHTTPAPI(t *testing.T) {
	ts := newServer(t)
	tests := []struct {
		name, app, channel, event, data string
		status                          int
	}{
		{"unknown app", "nope", "a", "e", `"x"`, http.StatusNotFound},
		{"no data", testAppID, "a", "e", ``, http.StatusBadRequest},
		{"data not a string", testAppID, "a", "e", `{"a":1}`, http.StatusBadRequest},
		{"bad channel", testAppID, "bad channel", "e", `"x"`, http.StatusBadRequest},
		{"no name", testAppID, "a", "", `"x"`, http.StatusBadRequest},
		{"too big", testAppID, "a", "e", `"` + strings.Repeat("x", 10001) + `"`, http.StatusRequestEntityTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ts.s.Trigger(context.Background(), tt.app, tt.channel, tt.event, []byte(tt.data))
			var te *TriggerError
			if !errors.As(err, &te) || te.Status != tt.status {
				t.Fatalf("got %v, want status %d", err, tt.status)
			}
		})
	}
}
