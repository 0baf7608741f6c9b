package main

import (
	"strings"
	"testing"
	"time"
)

func TestDiff(t *testing.T) {
	set := func(s ...string) map[string]bool {
		m := map[string]bool{}
		for _, x := range s {
			m[x] = true
		}
		return m
	}
	for _, tc := range []struct {
		want, got map[string]bool
		out       string
	}{
		{set("a", "b"), set("b", "a"), ""},
		{set("a", "b"), set("a"), "missing [b], extra (ghosts) []"},
		{set("a"), set("a", "g"), "missing [], extra (ghosts) [g]"},
		{set(), set(), ""},
	} {
		if got := diff(tc.want, tc.got); got != tc.out {
			t.Errorf("diff(%v, %v) = %q, want %q", tc.want, tc.got, got, tc.out)
		}
	}
}

func TestMetricLine(t *testing.T) {
	for _, tc := range []struct {
		line, name string
		val        float64
		ok         bool
	}{
		{`go_goroutines 41`, "go_goroutines", 41, true},
		{`reverbgo_webhook_deliveries_total{result="dropped"} 3`, `reverbgo_webhook_deliveries_total{result="dropped"}`, 3, true},
		{`# HELP go_goroutines Number of goroutines`, "", 0, false},
		{``, "", 0, false},
	} {
		name, val, ok := metricLine(tc.line)
		if name != tc.name || val != tc.val || ok != tc.ok {
			t.Errorf("metricLine(%q) = %q %v %v", tc.line, name, val, ok)
		}
	}
}

// TestOutageWindows: an event inside a (widened) outage is excused, one outside is not,
// and an open window excuses everything after its start.
func TestOutageWindows(t *testing.T) {
	tr := newTruth()
	t0 := time.Now()
	tr.openWindow(t0)
	tr.closeWindow(t0.Add(10 * time.Second))
	for _, tc := range []struct {
		at   time.Duration
		want bool
	}{{-2 * time.Second, false}, {-500 * time.Millisecond, true}, {5 * time.Second, true}, {12 * time.Second, true}, {14 * time.Second, false}} {
		if got := tr.inOutage(t0.Add(tc.at), time.Second, 3*time.Second); got != tc.want {
			t.Errorf("inOutage(t0%+v) = %v, want %v", tc.at, got, tc.want)
		}
	}
	tr.openWindow(t0.Add(time.Minute))
	if !tr.inOutage(t0.Add(time.Hour), 0, 0) {
		t.Error("an open window must excuse what follows it")
	}
	if !strings.Contains(diff(map[string]bool{"x": true}, nil), "missing [x]") {
		t.Error("diff of a nil set")
	}
}
