package bridge

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestAuditAndMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := newHarness(t, func(o *Options) { o.Metrics = reg })
	h.withManifest(client1, 1)
	ch := h.startCall(context.Background(), "calls",
		`{"user_id":"u1","conversation_id":"c1","tool":"form.fill","input":{"password":"SECRET_INPUT"}}`)
	call := h.pub.waitMsg(t, "call", "")
	h.page("1.1", "c1", resultMsg(client1, call.ID, `{"status":"ok","data":"SECRET_RESULT"}`))
	recv(t, ch)
	recv(t, h.startCall(context.Background(), "calls", `{"user_id":"u1","conversation_id":"c1","tool":"not.in.manifest"}`))

	logs := h.logs.String()
	if strings.Contains(logs, "SECRET_INPUT") || strings.Contains(logs, "SECRET_RESULT") {
		t.Fatalf("values leaked into the audit log:\n%s", logs)
	}
	var calls, pages int
	for _, line := range strings.Split(strings.TrimSpace(logs), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		switch rec["msg"] {
		case "toolmark call":
			calls++
			for _, k := range []string{"app", "user", "conversation", "call_id", "tool", "kind", "surface", "status", "latency_ms"} {
				if _, ok := rec[k]; !ok {
					t.Fatalf("call line lacks %s: %s", k, line)
				}
			}
			if rec["surface"] != SurfaceAPI || rec["call_id"] == call.ID && rec["status"] != "ok" {
				t.Fatalf("call line %s", line)
			}
		case "toolmark page message":
			pages++
		}
	}
	if calls != 2 || pages != 2 {
		t.Fatalf("%d call lines, %d page lines:\n%s", calls, pages, logs)
	}

	for _, tc := range []struct {
		labels []string
		want   float64
	}{
		{[]string{"app1", "api", "call", "form.fill", "ok"}, 1},
		{[]string{"app1", "api", "call", "other", "refused"}, 1}, // not in the manifest: unknown_tool
	} {
		if got := counterValue(t, reg, "reverbgo_toolmark_calls_total", tc.labels); got != tc.want {
			t.Errorf("calls_total%v = %v", tc.labels, got)
		}
	}
	if got := counterValue(t, reg, "reverbgo_toolmark_page_messages_total", []string{"app1", "manifest", "204"}); got != 1 {
		t.Errorf("page messages manifest/204 = %v", got)
	}
	// A second bridge on the same registry reuses the collectors instead of panicking.
	b2 := New(Options{Publisher: h.pub, Sockets: h.sockets, Apps: h.apps, Metrics: reg})
	b2.Close()
}

// counterValue finds the counter of family name whose label values (in label-name order of
// the vec's definition, as gathered: sorted by name) equal want.
func counterValue(t *testing.T, reg *prometheus.Registry, name string, want []string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetValue()] = l.GetName()
			}
			match := len(got) == len(want)
			for _, v := range want {
				if _, ok := got[v]; !ok {
					match = false
				}
			}
			if match {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// TestToolLabelBudget: the budget is bounded, and follows the manifests: labels of tools
// that left them (not seen in a call or a manifest for a manifest lifetime) are dropped with
// their series, and new tools get labels again; a tool still in a manifest keeps its label.
func TestToolLabelBudget(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newMetrics(reg)
	t0 := time.Unix(1_700_000_000, 0)
	name := func(i int) string { return string(rune('A'+i%26)) + strings.Repeat("x", i) }
	for i := 0; i < maxToolLabels; i++ {
		if got := m.toolLabel("a", name(i), true, t0); got == "other" {
			t.Fatalf("label %d refused", i)
		}
		m.calls.WithLabelValues("a", "api", "call", name(i), "ok").Inc()
	}
	if got := m.toolLabel("a", "one.more", true, t0); got != "other" {
		t.Fatalf("over budget: %q", got)
	}
	if got := m.toolLabel("b", "t", false, t0); got != "other" {
		t.Fatalf("outside manifest: %q", got)
	}
	// Tool 0 is still in a manifest posted later; every other tool left.
	m.manifest("a", []Tool{{Name: name(0)}}, t0.Add(time.Hour))
	m.sweepTools(t0.Add(time.Minute))
	if got := m.toolLabel("a", "one.more", true, t0.Add(time.Hour)); got != "one.more" {
		t.Fatalf("after the old tools left the manifests: %q", got)
	}
	if got := m.toolLabel("a", name(0), true, t0.Add(time.Hour)); got != name(0) {
		t.Fatalf("a current tool lost its label: %q", got)
	}
	n := 0
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "reverbgo_toolmark_calls_total" {
			n += len(mf.GetMetric())
		}
	}
	if n != 1 {
		t.Fatalf("%d call series after the sweep, want 1 (the current tool's)", n)
	}
}
