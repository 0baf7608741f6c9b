//go:build linux

package ws

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	ioringRegisterProbe = 8      // IORING_REGISTER_PROBE (5.6)
	ioringOpSupported   = 1 << 0 // IO_URING_OP_SUPPORTED
	ioringOpInvalid     = 0xff   // an opcode no kernel knows (TestHookURingRefuseSQE)
)

// ioUringProbe is struct io_uring_probe with room for 64 ops (struct io_uring_probe_op).
type ioUringProbe struct {
	lastOp uint8
	opsLen uint8
	_      uint16
	_      [3]uint32
	ops    [64]struct {
		op    uint8
		_     uint8
		flags uint16
		_     uint32
	}
}

// probeMessage is what the start-up probe sends to itself.
var probeMessage = []byte("reverbgo io_uring probe")

// probeURing is ProbeIOUring on Linux. io_uring_setup succeeding proves little: a kernel
// before 5.3, or a sandbox offering io_uring without SENDMSG (gVisor), sets a ring up and
// then completes every SENDMSG with -EINVAL. So one is sent and its completion checked.
func probeURing() error {
	r, err := setupRing(4)
	if err != nil {
		var errno syscall.Errno
		if errors.As(err, &errno) {
			return errno // "operation not permitted": seccomp, kernel.io_uring_disabled
		}
		return err
	}
	defer r.close()
	// Where the kernel has IORING_REGISTER_PROBE it says whether it knows SENDMSG; an
	// older one answers EINVAL, and the send below decides alone.
	var p ioUringProbe
	_, _, errno := unix.Syscall6(unix.SYS_IO_URING_REGISTER, uintptr(r.fd), ioringRegisterProbe,
		uintptr(unsafe.Pointer(&p)), uintptr(len(p.ops)), 0, 0)
	if errno == 0 && (p.lastOp < ioringOpSendmsg || p.ops[ioringOpSendmsg].flags&ioringOpSupported == 0) {
		return errors.New("the kernel does not support IORING_OP_SENDMSG")
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socketpair: %w", err)
	}
	defer func() { _ = unix.Close(fds[0]); _ = unix.Close(fds[1]) }()
	msg := bytes.Clone(probeMessage)
	iov := unix.Iovec{Base: &msg[0]}
	iov.SetLen(len(msg))
	m := unix.Msghdr{Iov: &iov}
	m.SetIovlen(1)
	if err := r.sendmsg(fds[0], &m, 0); err != nil {
		return err
	}
	for {
		err := r.enter(1)
		if err == nil {
			break
		}
		if err != syscall.EINTR && err != syscall.EAGAIN {
			return fmt.Errorf("io_uring_enter: %w", err)
		}
	}
	_, res, ok := r.pop()
	runtime.KeepAlive(&m) // the SQE named it, and iov and msg through it, by address only
	runtime.KeepAlive(&iov)
	runtime.KeepAlive(msg)
	switch {
	case !ok:
		return errors.New("SENDMSG: no completion")
	case res < 0:
		return fmt.Errorf("SENDMSG completed with %w", syscall.Errno(-res))
	case int(res) != len(msg):
		return fmt.Errorf("SENDMSG completed with %d of %d bytes", res, len(msg))
	}
	got := make([]byte, len(msg)+1)
	n, err := unix.Read(fds[1], got)
	if err != nil || !bytes.Equal(got[:max(n, 0)], probeMessage) {
		return fmt.Errorf("SENDMSG completed, but the peer read %q (%v)", got[:max(n, 0)], err)
	}
	return nil
}

// ringRefused reports whether a completion's error means the ring cannot carry out the
// operation at all (an old kernel, a sandbox), as opposed to one socket's trouble (EPIPE,
// ECONNRESET, EAGAIN...): then io_uring is given up for every socket.
func ringRefused(errno syscall.Errno) bool {
	switch errno {
	case syscall.EINVAL, syscall.EOPNOTSUPP, syscall.ENOSYS, syscall.EFAULT:
		return true
	}
	return false
}
