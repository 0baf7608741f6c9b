//go:build linux

package pusher

import (
	"testing"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/reverbgo/reverbgo/config"
	"github.com/reverbgo/reverbgo/internal/testutil"
	"github.com/reverbgo/reverbgo/ws"
)

// server.io_uring reaches the transport: absent (the default) and true, a broadcast's
// writes go through the flushers' io_uring, counted as
// reverbgo_socket_writes_total{path="io_uring"} and reverbgo_io_uring_enters_total, and
// none with writev; false, they are all writev and the io_uring counters stay 0.
func TestMetricsIOUring(t *testing.T) {
	tests := []struct {
		name  string
		set   *bool
		uring bool // the writes go through io_uring
	}{
		{"absent", nil, true},
		{"true", boolPtr(true), true},
		{"false", boolPtr(false), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.uring {
				requireURing(t)
			}
			cfg := testConfig()
			cfg.Server.IOUring = tt.set
			ts := newMetricsServerConfig(t, cfg)
			reg := prometheus.NewRegistry()
			reg.MustRegister(ts.s.Collector())

			a, b := ts.connect(t), ts.connect(t)
			a.Subscribe("news")
			b.Subscribe("news")
			ts.trigger(t, "news", "hello", "12345")
			a.WaitEvent("hello", "news")
			b.WaitEvent("hello", "news")

			// Each socket's subscription_succeeded and the event: at least 4 socket writes.
			used, other := "io_uring", "writev"
			if !tt.uring {
				used, other = other, used
			}
			testutil.WaitFor(t, "the "+used+" writes counted", func() bool {
				return sample(t, reg, "reverbgo_socket_writes_total", map[string]string{"path": used}) >= 4
			})
			if v := sample(t, reg, "reverbgo_socket_writes_total", map[string]string{"path": other}); v != 0 {
				t.Errorf("%s writes = %v, want 0", other, v)
			}
			enters := sample(t, reg, "reverbgo_io_uring_enters_total", nil)
			if tt.uring && enters < 1 || !tt.uring && enters != 0 {
				t.Errorf("io_uring enters = %v", enters)
			}
			if frames := sample(t, reg, "reverbgo_frames_written_total", nil); frames < 4 {
				t.Errorf("frames written = %v", frames)
			}
		})
	}
}

// The transport's mode for each server.io_uring: absent is Auto (a refusing kernel is an
// Info), true is On (a Warn), false is Off.
func TestWSIOUringMode(t *testing.T) {
	for _, tt := range []struct {
		name string
		set  *bool
		want ws.IOUringMode
	}{
		{"absent", nil, ws.IOUringAuto},
		{"true", boolPtr(true), ws.IOUringOn},
		{"false", boolPtr(false), ws.IOUringOff},
	} {
		if got := wsIOUring(&config.Server{IOUring: tt.set}); got != tt.want {
			t.Errorf("server.io_uring %s: mode %v, want %v", tt.name, got, tt.want)
		}
	}
}

// requireURing skips the test where the kernel refuses io_uring (seccomp, an old kernel,
// kernel.io_uring_disabled): the io_uring path cannot be tested there.
func requireURing(t *testing.T) {
	t.Helper()
	var params [120]byte // struct io_uring_params
	fd, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&params[0])), 0)
	if errno != 0 {
		t.Skipf("io_uring_setup unavailable here: %v", errno)
	}
	_ = unix.Close(int(fd))
}
