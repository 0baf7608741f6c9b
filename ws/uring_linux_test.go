//go:build linux

package ws

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/reverbgo/reverbgo/internal/testutil"
)

// testRing is a ring of entries SQEs, closed with the test; the test is skipped where the
// kernel refuses io_uring (no io_uring, seccomp, kernel.io_uring_disabled).
func testRing(t testing.TB, entries uint32) *ring {
	t.Helper()
	r, err := newRing(entries)
	if err != nil {
		if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
			t.Skipf("io_uring_setup unavailable here: %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(r.close)
	return r
}

// socketPair is a connected non-blocking stream pair, closed with the test.
func socketPair(t testing.TB) (local, peer int) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Close(fds[0]); _ = unix.Close(fds[1]) })
	return fds[0], fds[1]
}

// fillSocket writes to fd until its buffer is full (EAGAIN) and returns how much it took.
func fillSocket(t testing.TB, fd int) int {
	t.Helper()
	chunk := make([]byte, 64<<10)
	total := 0
	for {
		n, err := unix.Write(fd, chunk)
		if err == unix.EAGAIN {
			return total
		}
		if err != nil {
			t.Fatal(err)
		}
		total += n
	}
}

// drain reads what fd has now (non-blocking) and appends it to buf.
func drain(t testing.TB, fd int, buf *bytes.Buffer) {
	t.Helper()
	b := make([]byte, 64<<10)
	for {
		n, err := unix.Read(fd, b)
		if err == unix.EAGAIN || n == 0 {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		buf.Write(b[:n])
	}
}

// pattern is n bytes that differ at every offset mod 251, so a gap or a repeat shows.
func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i % 251)
	}
	return b
}

// ringMsg is a msghdr of one buffer; the caller keeps it alive until reaped.
func ringMsg(b []byte) *unix.Msghdr {
	iov := []unix.Iovec{{Base: &b[0], Len: uint64(len(b))}}
	m := &unix.Msghdr{Iov: &iov[0]}
	m.SetIovlen(1)
	return m
}

// The ring alone: SENDMSG SQEs to many sockets complete in one enter, each with its own
// user_data and result, and never block: a full socket completes at once with -EAGAIN, a
// small send buffer with a short count, a closed peer with -EPIPE.
func TestRingSendmsg(t *testing.T) {
	tests := []struct {
		name  string
		size  int                                 // bytes sent to each socket
		setup func(t *testing.T, local, peer int) // before the enter
		check func(res int32, size int) error
	}{
		{"writes", 100, func(*testing.T, int, int) {}, func(res int32, size int) error {
			if int(res) != size {
				return fmt.Errorf("res %d, want %d", res, size)
			}
			return nil
		}},
		{"full socket", 100, func(t *testing.T, local, _ int) { fillSocket(t, local) }, func(res int32, _ int) error {
			if res != -int32(unix.EAGAIN) {
				return fmt.Errorf("res %d, want -EAGAIN", res)
			}
			return nil
		}},
		{"short write", 4 << 20, func(t *testing.T, local, _ int) {
			if err := unix.SetsockoptInt(local, unix.SOL_SOCKET, unix.SO_SNDBUF, 64<<10); err != nil {
				t.Fatal(err)
			}
		}, func(res int32, size int) error {
			if res <= 0 || int(res) >= size {
				return fmt.Errorf("res %d, want a short count in (0, %d)", res, size)
			}
			return nil
		}},
		{"peer closed", 100, func(t *testing.T, _, peer int) { _ = unix.Close(peer) }, func(res int32, _ int) error {
			if res != -int32(unix.EPIPE) {
				return fmt.Errorf("res %d, want -EPIPE", res)
			}
			return nil
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			const sockets = 16
			r := testRing(t, 32)
			locals, peers := make([]int, sockets), make([]int, sockets)
			payloads := make([][]byte, sockets)
			msgs := make([]*unix.Msghdr, sockets)
			for i := range sockets {
				locals[i], peers[i] = socketPair(t)
				tt.setup(t, locals[i], peers[i])
				payloads[i] = append([]byte(fmt.Sprintf("socket %d:", i)), pattern(tt.size)...)
				msgs[i] = ringMsg(payloads[i])
				if err := r.sendmsg(locals[i], msgs[i], uint64(i)); err != nil {
					t.Fatal(err)
				}
			}
			done := make(chan error, 1)
			go func() { done <- r.enter(sockets) }() // must not block, whatever the sockets' state
			var err error
			testutil.WaitFor(t, "the enter to return", func() bool {
				select {
				case err = <-done:
					return true
				default:
					return false
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			seen := make([]bool, sockets)
			for range sockets {
				ud, res, ok := r.pop()
				if !ok {
					t.Fatal("fewer completions than SQEs after the enter")
				}
				if ud >= sockets || seen[ud] {
					t.Fatalf("user_data %d: unknown or repeated", ud)
				}
				seen[ud] = true
				if err := tt.check(res, len(payloads[ud])); err != nil {
					t.Fatalf("socket %d: %v", ud, err)
				}
				if tt.name == "writes" {
					var got bytes.Buffer
					drain(t, peers[ud], &got)
					if !bytes.Equal(got.Bytes(), payloads[ud]) {
						t.Fatalf("socket %d's peer read %q, want %q", ud, got.Bytes(), payloads[ud])
					}
				}
			}
			if _, _, ok := r.pop(); ok {
				t.Fatal("a completion more than the SQEs")
			}
			// The SQEs name the msghdrs by address only (a uintptr the GC does not see):
			// they must stay reachable until every completion is reaped, or the GC may free
			// and reuse them while the kernel reads them (a res of 0: an iovec of length 0).
			runtime.KeepAlive(msgs)
		})
	}
}

// The submission queue holds entries SQEs: one more is refused until the enter consumed them.
func TestRingFull(t *testing.T) {
	r := testRing(t, 4)
	local, _ := socketPair(t)
	b := []byte("x")
	m := ringMsg(b)
	for i := range r.entries {
		if err := r.sendmsg(local, m, uint64(i)); err != nil {
			t.Fatalf("SQE %d: %v", i, err)
		}
	}
	if err := r.sendmsg(local, m, 99); err != errRingFull {
		t.Fatalf("SQE past the ring: %v, want errRingFull", err)
	}
	if err := r.enter(r.entries); err != nil {
		t.Fatal(err)
	}
	for range r.entries {
		if _, res, ok := r.pop(); !ok || res != 1 {
			t.Fatalf("completion %v res %d", ok, res)
		}
	}
	if err := r.sendmsg(local, m, 0); err != nil {
		t.Fatalf("after the enter: %v", err)
	}
	_ = r.enter(1)
	_, _, _ = r.pop()
	runtime.KeepAlive(m) // the SQEs named it by address only
}

// requireURing skips the test where the kernel refuses io_uring.
func requireURing(t testing.TB) {
	t.Helper()
	testRing(t, 1)
}
