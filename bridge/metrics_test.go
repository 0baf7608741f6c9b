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
