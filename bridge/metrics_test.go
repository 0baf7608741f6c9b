package bridge

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TestCallDurationBuckets: the call histogram resolves sub-millisecond bridge overhead as well as
// tool times up to the maximum timeout.
func TestCallDurationBuckets(t *testing.T) {
	for _, tc := range []struct {
		d      time.Duration
		bucket float64 // smallest upper bound that counts it
	}{
		{300 * time.Microsecond, .0005},
		{800 * time.Microsecond, .001},
		{1500 * time.Microsecond, .002},
		{4 * time.Millisecond, .005},
		{30 * time.Millisecond, .05},
		{45 * time.Second, 60},
		{500 * time.Second, 600},
	} {
		t.Run(tc.d.String(), func(t *testing.T) {
			reg := prometheus.NewRegistry()
			newMetrics(reg).call("app1", SurfaceAPI, KindCall, "t", false, StatusOK, tc.d, time.Now())
			fams, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			var got float64 = -1
			for _, f := range fams {
				if f.GetName() != "reverbgo_toolmark_call_duration_seconds" {
					continue
				}
				for _, b := range f.GetMetric()[0].GetHistogram().GetBucket() {
					if b.GetCumulativeCount() == 1 {
						got = b.GetUpperBound()
						break
					}
				}
			}
			if got != tc.bucket {
				t.Fatalf("%v lands in bucket %v, want %v", tc.d, got, tc.bucket)
			}
		})
	}
}

// TestCachedSeries: the cached children count into the registry's series, and a swept tool
// leaves the cache with its series, so a later call of that tool is counted in a new series
// instead of a detached counter.
func TestCachedSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newMetrics(reg)
	t0 := time.Unix(1_700_000_000, 0)
	labels := []string{"app1", SurfaceAPI, KindCall, "t.one", StatusOK}
	for range 3 {
		m.call("app1", SurfaceAPI, KindCall, "t.one", true, StatusOK, time.Millisecond, t0)
	}
	m.page("app1", TypeResult, 204)
	m.page("app1", TypeResult, 204)
	m.page("app1", "bogus", 503)
	m.page("app1", "bogus", 500)
	m.flight("app1", 1)
	m.flight("app1", 1)
	m.flight("app1", -1)
	if got := counterValue(t, reg, "reverbgo_toolmark_calls_total", labels); got != 3 {
		t.Fatalf("calls = %v, want 3", got)
	}
	if got := counterValue(t, reg, "reverbgo_toolmark_page_messages_total", []string{"app1", "result", "204"}); got != 2 {
		t.Fatalf("page result/204 = %v, want 2", got)
	}
	if got := counterValue(t, reg, "reverbgo_toolmark_page_messages_total", []string{"app1", "invalid", "5xx"}); got != 2 {
		t.Fatalf("page invalid/5xx = %v, want 2", got)
	}
	if got := testutilGauge(t, reg, "reverbgo_toolmark_calls_in_flight"); got != 1 {
		t.Fatalf("in flight = %v, want 1", got)
	}
	m.sweepTools(t0.Add(time.Minute))
	if got := counterValue(t, reg, "reverbgo_toolmark_calls_total", labels); got != 0 {
		t.Fatalf("calls after the sweep = %v, want the series gone", got)
	}
	m.call("app1", SurfaceAPI, KindCall, "t.one", true, StatusOK, time.Millisecond, t0.Add(time.Hour))
	if got := counterValue(t, reg, "reverbgo_toolmark_calls_total", labels); got != 1 {
		t.Fatalf("calls after the tool came back = %v, want 1", got)
	}
}

// testutilGauge is the value of the only series of a gauge family.
func testutilGauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no single series of %s", name)
	return 0
}
