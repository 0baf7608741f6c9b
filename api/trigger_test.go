package api

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/reverbgo/reverbgo/pusher"
)

// obsRecorder is a fake pusher.Observer that keeps every trigger it sees as a line.
type obsRecorder struct {
	mu    sync.Mutex
	lines []string
}

func (r *obsRecorder) Connection(string, string, bool, string, int) {}
func (r *obsRecorder) Subscription(string, string, string, bool)    {}
func (r *obsRecorder) Event(app, kind, channel, event, data, socket string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, kind+" "+channel+" "+event+" "+data)
}

func (r *obsRecorder) has(s string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Contains(r.lines, s)
}

// The console observer sees POST /events and /batch_events as api triggers and Trigger as
// a console trigger; each reaches the subscriber.
func TestTriggersObserved(t *testing.T) {
	ts := newServer(t)
	rec := &obsRecorder{}
	ts.s.SetObserver(rec)
	c := ts.connect(t)
	ts.subscribePrivate(c, "private-x")
	ts.trigger(t, "private-x", "order.shipped", `{"id":1}`)
	c.WaitEvent("order.shipped", "private-x")
	batch := []byte(`{"batch":[{"name":"b","channel":"private-x","data":"2"}]}`)
	if st, body := ts.api(t, "POST", "/apps/"+testAppID+"/batch_events", nil, batch); st != 200 {
		t.Fatalf("batch: %d %s", st, body)
	}
	c.WaitEvent("b", "private-x")
	if err := ts.http.Trigger(context.Background(), testAppID, "private-x", "console.test", []byte(`"hi"`)); err != nil {
		t.Fatal(err)
	}
	c.WaitEvent("console.test", "private-x")
	for _, want := range []string{
		pusher.ObservedAPI + ` private-x order.shipped {"id":1}`,
		pusher.ObservedAPI + ` private-x b 2`,
		pusher.ObservedConsole + ` private-x console.test hi`,
	} {
		if !rec.has(want) {
			t.Errorf("observer missed %q: %v", want, rec.lines)
		}
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
			err := ts.http.Trigger(context.Background(), tt.app, tt.channel, tt.event, []byte(tt.data))
			var te *pusher.TriggerError
			if !errors.As(err, &te) || te.Status != tt.status {
				t.Fatalf("got %v, want status %d", err, tt.status)
			}
		})
	}
}

// HTTPMetrics counts API requests by route pattern and status, with the app label, and a
// published trigger in messages_published_total.
func TestAPIRequestsCounted(t *testing.T) {
	ts := newServer(t, withMetrics())
	reg := prometheus.NewRegistry()
	reg.MustRegister(ts.s.Collector())
	ts.trigger(t, "news", "hello", "12345")
	if st, _ := ts.rawAPI(t, "POST", "/apps/"+testAppID+"/events", []byte(`{}`)); st != http.StatusUnauthorized {
		t.Fatalf("unsigned trigger: %d", st)
	}
	counter := func(name string, labels map[string]string) float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
		next:
			for _, m := range mf.GetMetric() {
				for _, lp := range m.GetLabel() {
					if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
						continue next
					}
				}
				return m.GetCounter().GetValue()
			}
		}
		return -1
	}
	events := "/apps/:app_id/events"
	if v := counter("reverbgo_http_requests_total", map[string]string{"app": testAppID, "endpoint": events, "code": "200"}); v != 1 {
		t.Errorf("http events 200 = %v", v)
	}
	if v := counter("reverbgo_http_requests_total", map[string]string{"endpoint": events, "code": "401"}); v != 1 {
		t.Errorf("http events 401 = %v", v)
	}
	if v := counter("reverbgo_messages_published_total", map[string]string{"app": testAppID}); v != 1 {
		t.Errorf("published = %v", v)
	}
}
