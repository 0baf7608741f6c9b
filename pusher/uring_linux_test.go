//go:build linux

package pusher

import (
	"testing"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/reverbgo/reverbgo/internal/testutil"
)

// server.io_uring reaches the transport: a broadcast's writes go through the flushers'
// io_uring, counted as reverbgo_socket_writes_total{path="io_uring"} and
// reverbgo_io_uring_enters_total, and none with writev.
func TestMetricsIOUring(t *testing.T) {
	var params [120]byte // struct io_uring_params
	fd, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&params[0])), 0)
	if errno != 0 {
		t.Skipf("io_uring_setup unavailable here: %v", errno)
	}
	_ = unix.Close(int(fd))
	cfg := testConfig()
	cfg.Server.IOUring = true
	ts := newMetricsServerConfig(t, cfg)
	reg := prometheus.NewRegistry()
	reg.MustRegister(ts.s.Collector())

	a, b := ts.connect(t), ts.connect(t)
	a.subscribe("news")
	b.subscribe("news")
	ts.trigger(t, "news", "hello", "12345")
	a.waitEvent("hello", "news")
	b.waitEvent("hello", "news")

	testutil.WaitFor(t, "the io_uring writes counted", func() bool {
		return sample(t, reg, "reverbgo_socket_writes_total", map[string]string{"path": "io_uring"}) >= 4
	})
	enters := sample(t, reg, "reverbgo_io_uring_enters_total", nil)
	if enters < 1 {
		t.Errorf("io_uring enters = %v", enters)
	}
	if v := sample(t, reg, "reverbgo_socket_writes_total", map[string]string{"path": "writev"}); v != 0 {
		t.Errorf("writev calls = %v with server.io_uring on", v)
	}
	if frames := sample(t, reg, "reverbgo_frames_written_total", nil); frames < 4 {
		t.Errorf("frames written = %v", frames)
	}
}
