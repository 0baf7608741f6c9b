//go:build linux

package ws

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/reverbgo/reverbgo/internal/testutil"
)

// A ring that breaks in the middle of a round (io_uring_enter fails: here its descriptor
// is swapped for a socket's, EOPNOTSUPP, between two chunks): the chunk whose enter failed
// submitted nothing and goes out with writev, as does the rest of the round and every
// round after; the ring is closed and the failure logged. Every socket reads exactly what
// was queued, in order, whichever chunk it was in, and nothing is left held.
func TestURingBrokenMidRound(t *testing.T) {
	const sockets = 12 // a ring of 4: chunks 0-3, 4-7, 8-11
	var logs testutil.SyncBuffer
	f := newFlusher(make(chan struct{}), 0)
	f.log = slog.New(slog.NewJSONHandler(&logs, nil))
	useTestRing(t, f, 4)
	ringFD := f.ur.ring.fd
	t.Cleanup(func() { _ = unix.Close(ringFD) }) // the ring's own: r.close closes the stand-in

	pcs := make([]*pairConn, sockets)
	want := make([]string, sockets)
	for i := range pcs {
		pcs[i] = newPairConn(t, f)
	}
	// Socket 0's write is short (a small send buffer, a large frame): its endFlush, the
	// first of the first chunk, runs TestHookPartialWrite, which breaks the ring before
	// the second chunk is submitted.
	_ = pcs[0].c.Control(func(fd uintptr) { _ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF, 16<<10) })
	stand, _ := socketPair(t)
	standIn, err := unix.Dup(stand)
	if err != nil {
		t.Fatal(err)
	}
	broken := 0
	TestHookPartialWrite = func() {
		if broken++; broken == 1 {
			f.ur.ring.fd = standIn // only the flusher's goroutine (this one) reads it
		}
	}
	t.Cleanup(func() { TestHookPartialWrite = nil })

	big := string(pattern(1 << 20))
	for round := range 3 {
		for i, pc := range pcs {
			frame := fmt.Sprintf("[%d.%d]", i, round)
			if i == 0 && round == 0 {
				frame = big
			}
			pc.c.WritePreframed([]byte(frame))
			want[i] += frame
		}
		if n := roundNow(f); n != sockets && round == 0 {
			t.Fatalf("round %d wrote %d sockets, want %d", round, n, sockets)
		}
		if round == 0 && f.ur != nil {
			t.Fatal("the flusher kept its broken ring")
		}
		testutil.WaitFor(t, "the slow path to finish", func() bool {
			pcs[0].read(t) // drains socket 0 so its blocking writer can finish
			pcs[0].c.mu.Lock()
			defer pcs[0].c.mu.Unlock()
			return pcs[0].c.writer == writerIdle || pcs[0].c.writer == writerScheduled
		})
		for roundNow(f) > 0 { // what the slow path rescheduled
		}
	}
	if broken == 0 {
		t.Fatal("no partial write: the ring was never broken")
	}
	for i, pc := range pcs {
		pc.waitRead(t, want[i])
	}
	for i, pc := range pcs { // nothing held: a close does not wait
		if err := pc.c.fdc.Close(); err != nil {
			t.Fatalf("socket %d: close: %v", i, err)
		}
	}
	if out := logs.String(); strings.Count(out, "io_uring_enter failed") != 1 || !strings.Contains(out, "not supported") {
		t.Fatalf("want one io_uring_enter failure logged with its error: %s", out)
	}
	st := &f.stats
	if st.enters.Load() != 2 || st.uring.Load() != 4 || st.writev.Load() < 2*sockets {
		t.Fatalf("%d enters for %d io_uring writes, %d writev: want the first chunk's 4 through the ring (and a failed enter), the rest with writev",
			st.enters.Load(), st.uring.Load(), st.writev.Load())
	}
}
