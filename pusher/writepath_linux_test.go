//go:build linux

package pusher

import (
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/reverbgo/reverbgo/internal/testutil"
	"github.com/reverbgo/reverbgo/ws"
)

// reverbgo_write_path{path} is 1 for the write path in use and 0 for the other: io_uring
// once the start-up probe passed, writev when it was refused or server.io_uring is false;
// and when a completion refuses SENDMSG at run time (-EINVAL, as from a kernel that does
// not know it) the gauge moves to writev while every client keeps its connection and
// receives every event in order.
func TestMetricsWritePath(t *testing.T) {
	tests := []struct {
		name     string
		set      *bool
		probe    error // the start-up probe's answer
		start    string
		runtime  bool // a completion refuses SENDMSG after start-up
		needRing bool
	}{
		{"absent, probe passes", nil, nil, "io_uring", false, true},
		{"absent, probe refused", nil, errors.New("operation not permitted"), "writev", false, false},
		{"false", boolPtr(false), nil, "writev", false, false},
		{"absent, refused at run time", nil, nil, "io_uring", true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.needRing {
				requireURing(t)
			}
			var refuse atomic.Bool
			ws.TestHookURingRefuseSQE = refuse.Load
			if tt.probe != nil {
				ws.TestHookURingProbe = func() error { return tt.probe }
			}
			t.Cleanup(func() { ws.TestHookURingRefuseSQE, ws.TestHookURingProbe = nil, nil })
			cfg := testConfig()
			cfg.Server.IOUring = tt.set
			ts := newMetricsServerConfig(t, cfg)
			reg := prometheus.NewRegistry()
			reg.MustRegister(ts.s.Collector())
			gauges := func() string {
				return fmt.Sprintf("io_uring=%v writev=%v",
					sample(t, reg, "reverbgo_write_path", map[string]string{"path": "io_uring"}),
					sample(t, reg, "reverbgo_write_path", map[string]string{"path": "writev"}))
			}
			want := map[string]string{"io_uring": "io_uring=1 writev=0", "writev": "io_uring=0 writev=1"}
			if got := gauges(); got != want[tt.start] {
				t.Fatalf("at start: %s, want %s", got, want[tt.start])
			}

			a, b := ts.connect(t), ts.connect(t)
			a.Subscribe("news")
			b.Subscribe("news")
			if tt.runtime {
				refuse.Store(true)
			}
			for i := range 5 {
				ts.trigger(t, "news", "tick", fmt.Sprint(i))
			}
			for _, c := range []*client{a, b} {
				for i := range 5 {
					if ev := c.WaitEvent("tick", "news"); string(ev.Data) != strconv.Quote(fmt.Sprint(i)) {
						t.Fatalf("event %d: data %s", i, ev.Data)
					}
				}
			}
			end := tt.start
			if tt.runtime {
				end = "writev"
			}
			testutil.WaitFor(t, "the gauge at "+end, func() bool { return gauges() == want[end] })
			if a.IsClosed() || b.IsClosed() {
				t.Fatal("a connection closed")
			}
			n := 0
			ts.s.sockets.each(func(*Conn) { n++ })
			if n != 2 {
				t.Fatalf("%d sockets, want 2", n)
			}
		})
	}
}
