//go:build linux

package ws

import (
	"bytes"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/reverbgo/reverbgo/internal/testutil"
)

// pairConn is a Conn as the fast listener makes them (a bare descriptor in an fdConn,
// read by a poller), on one end of a socket pair whose other end the test reads.
type pairConn struct {
	c    *Conn
	peer int
	got  bytes.Buffer // what the peer has read so far
}

func newPairConn(t *testing.T, f *flusher) *pairConn {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	c := &Conn{srv: &Server{maxQueue: 64 << 20}, fl: f, reader: readerPoller}
	c.fdc.fd = fds[0]
	c.netConn, c.raw = &c.fdc, (*fdRaw)(&c.fdc)
	t.Cleanup(func() { _ = c.fdc.Close(); _ = unix.Close(fds[1]) })
	return &pairConn{c: c, peer: fds[1]}
}

// read takes what has arrived at the peer.
func (p *pairConn) read(t *testing.T) string {
	t.Helper()
	drain(t, p.peer, &p.got)
	return p.got.String()
}

// waitRead polls until the peer has read exactly want.
func (p *pairConn) waitRead(t *testing.T, want string) {
	t.Helper()
	testutil.WaitFor(t, fmt.Sprintf("the peer to read %d bytes", len(want)), func() bool { return len(p.read(t)) >= len(want) })
	if got := p.read(t); got != want {
		t.Fatalf("the peer read %d bytes, want %d; they differ at %d", len(got), len(want), diffAt(got, want))
	}
}

func diffAt(a, b string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// roundNow runs one flusher round by hand over whatever is on the dirty list, as run does.
func roundNow(f *flusher) int {
	f.mu.Lock()
	round := f.dirty
	f.dirty = nil
	f.mu.Unlock()
	f.writeRound(round)
	return len(round)
}

// Both write paths over bare descriptors: frames queued on many sockets over several
// rounds arrive in order on each. A round costs the writev path one syscall per socket
// and the io_uring path one io_uring_enter for all of them.
func TestWritePathsRounds(t *testing.T) {
	writePaths(t, func(t *testing.T, p writePath) {
		const sockets, rounds = 20, 5
		f := newPathFlusher(t, p, 0)
		pcs := make([]*pairConn, sockets)
		want := make([]string, sockets)
		for i := range pcs {
			pcs[i] = newPairConn(t, f)
		}
		for r := range rounds {
			for i, pc := range pcs {
				for k := range 1 + (i+r)%3 { // 1 to 3 frames, so batches differ
					frame := fmt.Sprintf("[%d.%d.%d]", i, r, k)
					pc.c.WritePreframed([]byte(frame))
					want[i] += frame
				}
			}
			if n := roundNow(f); n != sockets {
				t.Fatalf("round %d wrote %d sockets", r, n)
			}
		}
		for i, pc := range pcs {
			pc.waitRead(t, want[i])
		}
		st := &f.stats
		switch p {
		case pathWritev:
			if st.writev.Load() != sockets*rounds || st.enters.Load() != 0 {
				t.Fatalf("writev %d, enters %d; want %d writev", st.writev.Load(), st.enters.Load(), sockets*rounds)
			}
		case pathURing:
			if st.enters.Load() != rounds || st.uring.Load() != sockets*rounds || st.writev.Load() != 0 {
				t.Fatalf("enters %d, uring writes %d, writev %d; want %d enters for %d writes",
					st.enters.Load(), st.uring.Load(), st.writev.Load(), rounds, sockets*rounds)
			}
		}
		if st.blocking.Load() != 0 {
			t.Fatalf("%d batches went to the slow path", st.blocking.Load())
		}
	})
}

// What a socket does not take at once goes to the slow path, which writes exactly the
// rest and then what was queued meanwhile: a short write (a small send buffer), a full
// socket (the write takes nothing: -EAGAIN, and the round must not wait for it). A peer
// that is gone drops the connection with CauseWriteError.
func TestWritePathsSocketStates(t *testing.T) {
	tests := []struct {
		name  string
		frame int                                     // size of the frame queued
		setup func(t *testing.T, pc *pairConn) string // returns what the peer reads first
		slow  bool                                    // the slow path must take over
		cause Cause                                   // want the connection dropped with it (0: kept)
	}{
		{"short write", 4 << 20, func(t *testing.T, pc *pairConn) string {
			_ = pc.c.Control(func(fd uintptr) { _ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF, 64<<10) })
			return ""
		}, true, 0},
		{"full socket", 1000, func(t *testing.T, pc *pairConn) string {
			var n int
			_ = pc.c.Control(func(fd uintptr) { n = fillSocket(t, int(fd)) })
			return strings.Repeat("\x00", n) // fillSocket's bytes
		}, true, 0},
		{"peer closed", 1000, func(t *testing.T, pc *pairConn) string {
			_ = unix.Shutdown(pc.peer, unix.SHUT_RDWR)
			return ""
		}, false, CauseWriteError},
		{"descriptor closed", 1000, func(t *testing.T, pc *pairConn) string {
			_ = pc.c.fdc.Close()
			return ""
		}, false, CauseWriteError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			writePaths(t, func(t *testing.T, p writePath) {
				f := newPathFlusher(t, p, 0)
				pc := newPairConn(t, f)
				first := tt.setup(t, pc)
				frame := pattern(tt.frame)
				pc.c.WritePreframed(frame)
				done := make(chan struct{})
				go func() { defer close(done); roundNow(f) }()
				testutil.WaitFor(t, "the round to end", func() bool {
					select {
					case <-done:
						return true
					default:
						return false
					}
				})
				if tt.cause != 0 {
					pc.c.mu.Lock()
					state, cause := pc.c.state, pc.c.cause
					pc.c.mu.Unlock()
					if state != stateClosed || cause != tt.cause {
						t.Fatalf("state %d cause %d, want closed with %d", state, cause, tt.cause)
					}
					return
				}
				pc.c.WritePreframed([]byte("after")) // queued behind the rest, for the slow path
				roundNow(f)
				pc.waitRead(t, first+string(frame)+"after")
				if got := f.stats.blocking.Load() > 0; got != tt.slow {
					t.Fatalf("slow path used: %v, want %v", got, tt.slow)
				}
				pc.c.mu.Lock()
				defer pc.c.mu.Unlock()
				if pc.c.state != stateOpen || pc.c.writingBytes != 0 || pc.c.queuedBytes != 0 {
					t.Fatalf("state %d, %d bytes in flight, %d queued after everything was read",
						pc.c.state, pc.c.writingBytes, pc.c.queuedBytes)
				}
			})
		})
	}
}

// A round of more sockets than the ring has entries goes in chunks, as does one whose
// frames overflow the iovec slab; a socket with more frames than one SQE carries gets
// the rest with writev, in order.
func TestURingChunks(t *testing.T) {
	tests := []struct {
		name           string
		entries        uint32
		sockets        int
		frames         int    // per socket
		enters, writev uint64 // wanted
	}{
		{"sockets over the ring", 4, 10, 1, 3, 0},
		{"iovecs over the slab", 64, 5, maxIovecs - 24, 2, 0},
		{"frames over an SQE", 8, 2, maxIovecs + 100, 1, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFlusher(make(chan struct{}), 0)
			f.log = slog.Default()
			useTestRing(t, f, tt.entries)
			pcs := make([]*pairConn, tt.sockets)
			want := make([]string, tt.sockets)
			for i := range pcs {
				pcs[i] = newPairConn(t, f)
				for k := range tt.frames {
					frame := fmt.Sprintf("<%d:%d>", i, k)
					pcs[i].c.WritePreframed([]byte(frame))
					want[i] += frame
				}
			}
			roundNow(f)
			for i, pc := range pcs {
				pc.waitRead(t, want[i])
			}
			if e, w := f.stats.enters.Load(), f.stats.writev.Load(); e != tt.enters || w != tt.writev {
				t.Fatalf("%d enters and %d writev, want %d and %d", e, w, tt.enters, tt.writev)
			}
			if n := f.stats.frames.Load(); n != uint64(tt.sockets*tt.frames) {
				t.Fatalf("%d frames counted, want %d", n, tt.sockets*tt.frames)
			}
		})
	}
}

// A round allocates nothing in steady state, on either path: the io_uring path's iovecs,
// msghdrs and pending writes live in the flusher and are reused.
func TestWritePathsRoundAllocs(t *testing.T) {
	testutil.SkipUnderRace(t)
	writePaths(t, func(t *testing.T, p writePath) {
		const sockets = 16
		f := newPathFlusher(t, p, 0)
		pcs := make([]*pairConn, sockets)
		for i := range pcs {
			pcs[i] = newPairConn(t, f)
		}
		frame := []byte("0123456789")
		round := func() {
			for _, pc := range pcs {
				pc.c.WritePreframed(frame)
				pc.c.WritePreframed(frame)
			}
			f.mu.Lock()
			r := f.dirty
			f.dirty = f.spare[:0]
			f.mu.Unlock()
			f.writeRound(r)
			f.spare = r[:0]
		}
		round() // the first round grows the queues and the dirty list
		if n := testing.AllocsPerRun(200, round); n != 0 {
			t.Fatalf("%v allocations per round of %d sockets", n, sockets)
		}
		for _, pc := range pcs {
			if got := len(pc.read(t)); got != 2*len(frame)*202 {
				t.Fatalf("the peer read %d bytes, want %d", got, 2*len(frame)*202)
			}
		}
	})
}

// useTestRing gives f a ring of entries (the test is skipped where io_uring is refused).
func useTestRing(t *testing.T, f *flusher, entries uint32) {
	t.Helper()
	testRing(t, 1) // skips where the kernel refuses
	if err := f.useRing(entries); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.closeRing)
}

// fdConnOf moves nc's socket into a Conn of a bare non-blocking descriptor, as the fast
// listener makes them; nc is closed.
func fdConnOf(t *testing.T, nc net.Conn) *Conn {
	t.Helper()
	sc, ok := nc.(syscall.Conn)
	if !ok {
		t.Fatalf("%T has no descriptor", nc)
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	fd := -1
	_ = rc.Control(func(s uintptr) { fd, err = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0) })
	if err != nil {
		t.Fatal(err)
	}
	_ = nc.Close()
	if err := unix.SetNonblock(fd, true); err != nil {
		t.Fatal(err)
	}
	c := &Conn{}
	c.fdc.fd = fd
	c.netConn, c.raw = &c.fdc, (*fdRaw)(&c.fdc)
	return c
}
