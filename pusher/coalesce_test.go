package pusher

import (
	"fmt"
	"testing"
	"time"
)

// server.write_coalesce_ms reaches every flusher (absent: the default; 0: off), and on an
// idle server a pusher client's events are not held by even the longest window.
func TestServerWriteCoalesceConfig(t *testing.T) {
	tests := []struct {
		name string
		ms   *int
		want time.Duration
	}{
		{"absent", nil, 2 * time.Millisecond},
		{"off", intPtr(0), 0},
		{"longest", intPtr(1000), time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := newServer(t, func(s *setup) { s.cfg.Server.WriteCoalesceMS = tt.ms })
			if got := ts.s.transport.CoalesceWindow(); got != tt.want {
				t.Fatalf("coalescing window %v, want %v", got, tt.want)
			}
			c := ts.connect(t)
			c.Subscribe("news")
			for i := range 3 {
				t0 := time.Now()
				ts.trigger(t, "news", "hello", fmt.Sprint(i))
				c.WaitEvent("hello", "news")
				if d := time.Since(t0); tt.want >= time.Second && d > tt.want/2 {
					t.Fatalf("event %d took %v on an idle server (window %v)", i, d, tt.want)
				}
			}
			if w := ts.s.writeCounts(); w.Coalesced != 0 || w.FramesPerWrite() < 1 {
				t.Fatalf("idle server: %+v", w)
			}
		})
	}
}
