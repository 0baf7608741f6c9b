package ws

import (
	"context"
	"log/slog"
	"sync/atomic"
)

// The write paths a Server reports (WritePath): the flushers' io_uring, or a writev each.
const (
	PathIOUring = "io_uring"
	PathWritev  = "writev"
)

// TestHookURingProbe, set only by tests (of this package and those above it) before a
// Server is made, stands in a start-up probe's answer (nil: the probe passed), as a kernel
// that refuses io_uring would give it.
var TestHookURingProbe func() error

// TestHookURingRefuseSQE, set only by tests before a Server is made, is asked before each
// SENDMSG is placed on a ring (the start-up probe's too): true places an opcode no kernel
// knows instead, which the kernel completes with -EINVAL, as one without SENDMSG (before
// 5.3, or a sandbox such as gVisor) completes every SENDMSG.
var TestHookURingRefuseSQE func() bool

// pathSwitch is the write path of a Server's flushers, shared by all of them: io_uring
// (ring) from a start-up probe that passed until a completion says the ring cannot do what
// is asked of it (refused), then writev for good, for every socket, without closing any.
type pathSwitch struct {
	ring    atomic.Bool // the flushers write with io_uring
	refused atomic.Bool // a completion refused the operation: every ring is closed on its next round
}

// fallback turns io_uring off for every flusher sharing w; the first caller logs it.
func (w *pathSwitch) fallback(log *slog.Logger, why error) {
	if !w.refused.CompareAndSwap(false, true) {
		return
	}
	w.ring.Store(false)
	if log == nil {
		log = slog.Default()
	}
	log.Warn("write path: writev (io_uring refused at run time: " + why.Error() + ")")
}

// chooseWritePath decides the flushers' write path once, at start-up, and says which in
// one log line: writev when asked (IOUringOff); else io_uring only when the probe proved
// that the kernel accepts and completes a SENDMSG, and every flusher got its ring. A
// refusal is logged at Info when io_uring is only the default (expected in containers)
// and at Warn when it was asked for (IOUringOn; the server's wiring refuses to start then).
func chooseWritePath(fs []*flusher, mode IOUringMode, log *slog.Logger) *pathSwitch {
	w := &pathSwitch{}
	for _, f := range fs {
		f.path = w
	}
	if mode == IOUringOff {
		log.Info("write path: " + PathWritev + " (server.io_uring: false)")
		return w
	}
	err := ProbeIOUring()
	for i := 0; err == nil && i < len(fs); i++ {
		err = fs[i].useRing(ringEntries)
	}
	if err != nil {
		for _, f := range fs {
			f.closeRing()
		}
		level := slog.LevelInfo
		if mode == IOUringOn {
			level = slog.LevelWarn
		}
		log.Log(context.Background(), level, "write path: "+PathWritev+" (io_uring refused: "+err.Error()+")")
		return w
	}
	w.ring.Store(true)
	log.Info("write path: " + PathIOUring)
	return w
}

// ProbeIOUring proves that the kernel accepts and completes the operation the flushers
// use: one IORING_OP_SENDMSG on a socket pair through a ring of its own, its completion
// checked byte for byte (and, where the kernel has IORING_REGISTER_PROBE, that it lists
// SENDMSG). nil means io_uring can write; the error's text is the reason it cannot.
func ProbeIOUring() error {
	if TestHookURingProbe != nil {
		return TestHookURingProbe()
	}
	return probeURing()
}

// WritePath is the write path the flushers use now (PathIOUring or PathWritev): it moves
// from io_uring to writev when a completion refuses the operation at run time. Sockets of
// the portable path (upgraded through net/http) are written with writev either way.
func (s *Server) WritePath() string {
	if s.path != nil && s.path.ring.Load() {
		return PathIOUring
	}
	return PathWritev
}
