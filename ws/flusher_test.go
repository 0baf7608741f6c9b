//go:build unix

package ws

import (
	"bytes"
	"fmt"
	"github.com/reverbgo/reverbgo/internal/testutil"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// writePath is how a flusher writes its sockets: a writev each, or one io_uring_enter for
// the round (Options.IOUring, Linux).
type writePath int

const (
	pathWritev writePath = iota
	pathURing
)

func (p writePath) String() string { return [...]string{"writev", "io_uring"}[p] }

// writePaths runs fn on each write path; the io_uring one is skipped where the kernel
// refuses io_uring.
func writePaths(t *testing.T, fn func(t *testing.T, p writePath)) {
	for _, p := range []writePath{pathWritev, pathURing} {
		t.Run(p.String(), func(t *testing.T) { fn(t, p) })
	}
}

// newPathFlusher is a flusher (not started) writing with p.
func newPathFlusher(t *testing.T, p writePath, window time.Duration) *flusher {
	t.Helper()
	f := newFlusher(make(chan struct{}), window)
	f.log = slog.Default()
	if p == pathURing {
		useTestRing(t, f, ringEntries)
	}
	return f
}

// flusherRig is one flusher (not started) and sockets written only by it: each Conn is the
// server side of a loopback TCP pair, its peer a reader that collects what arrives.
type flusherRig struct {
	t     *testing.T
	f     *flusher
	stop  chan struct{}
	done  chan struct{}
	conns []*Conn
	peers []*peerReader
}

// peerReader collects the bytes a Conn's peer receives.
type peerReader struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (p *peerReader) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.buf.String()
}

func newFlusherRig(t *testing.T, p writePath, window time.Duration, n int) *flusherRig {
	t.Helper()
	r := &flusherRig{t: t, stop: make(chan struct{}), done: make(chan struct{})}
	r.f = newFlusher(r.stop, window)
	r.f.log = slog.Default()
	if p == pathURing {
		useTestRing(t, r.f, ringEntries)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for range n {
		peer, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		nc, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		rc, err := nc.(*net.TCPConn).SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		c := &Conn{srv: &Server{maxQueue: 1 << 20}, netConn: nc, raw: rc, fl: r.f}
		if p == pathURing {
			// The io_uring path writes the fast listener's bare descriptors (fdConn): the
			// socket moves into one, as accept_linux.go's do.
			c = fdConnOf(t, nc)
			c.srv, c.fl, nc = &Server{maxQueue: 1 << 20}, r.f, c.netConn
		}
		pr := &peerReader{}
		go func() {
			b := make([]byte, 4096)
			for {
				n, err := peer.Read(b)
				pr.mu.Lock()
				pr.buf.Write(b[:n])
				pr.mu.Unlock()
				if err != nil {
					return
				}
			}
		}()
		t.Cleanup(func() { _ = peer.Close(); _ = nc.Close() })
		r.conns = append(r.conns, c)
		r.peers = append(r.peers, pr)
	}
	t.Cleanup(func() {
		select {
		case <-r.stop:
		default:
			close(r.stop)
		}
		select {
		case <-r.done:
		case <-time.After(waitTimeout):
			t.Error("flusher did not stop")
		}
	})
	return r
}

func (r *flusherRig) start() {
	go func() { defer close(r.done); r.f.run() }()
}

// busyRound makes the flusher's first round busy: every socket has a frame queued before
// the flusher starts, so its first round writes all of them (n >= busyRoundConns).
func (r *flusherRig) busyRound() {
	r.t.Helper()
	if len(r.conns) < busyRoundConns {
		r.t.Fatalf("%d sockets cannot make a busy round (%d)", len(r.conns), busyRoundConns)
	}
	for _, c := range r.conns {
		c.WritePreframed([]byte("0"))
	}
	r.start()
	for i := range r.peers {
		r.waitRead(i, "0")
	}
}

// waitRead polls until peer i has received exactly want.
func (r *flusherRig) waitRead(i int, want string) {
	r.t.Helper()
	testutil.WaitFor(r.t, fmt.Sprintf("peer %d to read %q", i, want), func() bool { return r.peers[i].String() == want })
}

// writes counts the socket writes (writev, or io_uring SQEs) and the frames in them.
func (r *flusherRig) writes() (writes, frames uint64) {
	return r.f.stats.writev.Load() + r.f.stats.uring.Load(), r.f.stats.frames.Load()
}

// With coalescing off, every frame leaves in a write of its own as soon as it is queued,
// even right after a busy round: the flusher never holds a round.
func TestFlusherCoalescingOff(t *testing.T) {
	writePaths(t, func(t *testing.T, p writePath) {
		r := newFlusherRig(t, p, 0, busyRoundConns+8)
		var holds atomic.Int64
		r.f.hold = func(time.Duration) { holds.Add(1) }
		r.busyRound()
		want := "0"
		for i := range 5 {
			w0, f0 := r.writes()
			frame := string(rune('a' + i))
			r.conns[0].WritePreframed([]byte(frame))
			want += frame
			r.waitRead(0, want) // written without another frame to push it out
			testutil.WaitFor(t, "the write counted", func() bool { w, f := r.writes(); return w == w0+1 && f == f0+1 })
		}
		if n := holds.Load(); n != 0 {
			t.Fatalf("coalescing off, yet %d rounds were held", n)
		}
		if n := r.f.stats.coalesced.Load(); n != 0 {
			t.Fatalf("%d coalesced rounds with coalescing off", n)
		}
	})
}

// After a busy round the next one is held for the window: frames that become ready for one
// socket meanwhile leave in one writev. The hold is the test's to end, so nothing depends
// on how fast the machine is.
func TestFlusherCoalescesAfterBusyRound(t *testing.T) {
	writePaths(t, func(t *testing.T, p writePath) {
		const window = time.Hour // only the test's release ends the hold
		r := newFlusherRig(t, p, window, busyRoundConns+8)
		held := make(chan time.Duration, 1)
		release := make(chan struct{})
		var holds atomic.Int64
		r.f.hold = func(d time.Duration) {
			if holds.Add(1) == 1 {
				held <- d
				<-release
			}
		}
		r.busyRound()
		if r.f.stats.rounds.Load() != 1 {
			t.Fatalf("the busy round was %d rounds", r.f.stats.rounds.Load())
		}

		r.conns[0].WritePreframed([]byte("A")) // wakes the flusher, which holds the round
		select {
		case d := <-held:
			if d <= 0 || d > window {
				t.Fatalf("held for %v, want (0, %v]", d, window)
			}
		case <-time.After(waitTimeout):
			t.Fatal("the round after a busy one was not held")
		}
		w0, f0 := r.writes()
		r.conns[0].WritePreframed([]byte("B"))
		r.conns[0].WritePreframed([]byte("C"))
		r.conns[1].WritePreframed([]byte("x"))
		if got := r.peers[0].String(); got != "0" {
			t.Fatalf("peer 0 read %q during the hold", got)
		}
		close(release)

		r.waitRead(0, "0ABC")
		r.waitRead(1, "0x")
		testutil.WaitFor(t, "the held round's writes counted", func() bool { _, f := r.writes(); return f == f0+4 })
		if w, _ := r.writes(); w != w0+2 {
			t.Fatalf("the held round made %d writev calls for 2 sockets, want 2 (A, B and C in one)", w-w0)
		}
		if n := r.f.stats.coalesced.Load(); n != 1 {
			t.Fatalf("coalesced rounds = %d, want 1", n)
		}
		// That round wrote 2 sockets: not busy, so the next frame is not held.
		r.conns[0].WritePreframed([]byte("D"))
		r.waitRead(0, "0ABCD")
		if n := holds.Load(); n != 1 {
			t.Fatalf("%d holds, want only the one after the busy round", n)
		}
	})
}

// An idle flusher writes a single frame at once, however long the window: the latency
// bound is loose (a tenth of the window) so a loaded machine cannot fail it.
func TestFlusherIdleFrameNotDelayed(t *testing.T) {
	writePaths(t, func(t *testing.T, p writePath) {
		const window = 10 * time.Second
		r := newFlusherRig(t, p, window, 1)
		r.start()
		t0 := time.Now()
		r.conns[0].WritePreframed([]byte("only"))
		r.waitRead(0, "only")
		if d := time.Since(t0); d > window/10 {
			t.Fatalf("an idle socket's frame took %v (window %v)", d, window)
		}
		if n := r.f.stats.coalesced.Load(); n != 0 {
			t.Fatalf("%d coalesced rounds on an idle flusher", n)
		}
	})
}

// Once the window has passed after a busy round (a lull in the load), the next frame is
// written at once: the hold never outlives the window measured from the busy round's start.
func TestFlusherNoHoldAfterWindowPassed(t *testing.T) {
	writePaths(t, func(t *testing.T, p writePath) {
		const window = 100 * time.Millisecond
		r := newFlusherRig(t, p, window, busyRoundConns)
		var holds atomic.Int64
		r.f.hold = func(time.Duration) { holds.Add(1) }
		r.busyRound()
		time.Sleep(window) // the busy round started before its frames were read: now the window has passed
		r.conns[0].WritePreframed([]byte("late"))
		r.waitRead(0, "0late")
		if n := holds.Load(); n != 0 {
			t.Fatalf("%d holds after the window had passed", n)
		}
	})
}

// The real timer: a held round ends on its own after the window (no test hook), and a
// stopping server ends a hold at once.
func TestFlusherHoldUsesTimer(t *testing.T) {
	writePaths(t, func(t *testing.T, p writePath) {
		const window = 50 * time.Millisecond
		r := newFlusherRig(t, p, window, busyRoundConns)
		r.busyRound()
		r.conns[0].WritePreframed([]byte("A"))
		r.conns[0].WritePreframed([]byte("B"))
		r.waitRead(0, "0AB")
		// A hold of an hour ends when the flusher stops.
		f := newFlusher(make(chan struct{}), time.Hour)
		done := make(chan struct{})
		go func() { defer close(done); f.wait(time.Hour) }()
		close(f.stop)
		select {
		case <-done:
		case <-time.After(waitTimeout):
			t.Fatal("a hold outlived the server's stop")
		}
	})
}
