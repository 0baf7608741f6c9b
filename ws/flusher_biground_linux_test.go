//go:build linux

package ws

import (
	"fmt"
	"io"
	"testing"

	"github.com/reverbgo/reverbgo/internal/testutil"
)

// startFlusher runs f's loop as the server does, recovering a panic of the loop so the test
// can report it instead of crashing the binary; the cleanup stops it and waits.
func startFlusher(t *testing.T, f *flusher) (panicked func() any) {
	t.Helper()
	done := make(chan struct{})
	var p any
	go func() {
		defer close(done)
		defer func() { p = recover() }()
		f.run()
	}()
	t.Cleanup(func() {
		select {
		case <-f.stop:
		default:
			close(f.stop)
		}
		<-done
	})
	return func() any {
		select {
		case <-done:
			return p
		default:
			return nil
		}
	}
}

// flusherIdle reports whether f waits for work with nothing on its dirty list.
func flusherIdle(f *flusher) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.waiting && len(f.dirty) == 0
}

// scheduleMany puts c on f's dirty list n times at once (one lock hold, so the flusher
// takes them as one round); c has nothing queued, so each but the first entry is a no-op.
func scheduleMany(f *flusher, c *Conn, n int) {
	c.mu.Lock()
	c.writer = writerScheduled
	c.mu.Unlock()
	f.mu.Lock()
	for range n {
		f.dirty = append(f.dirty, c)
	}
	wake := f.waiting
	f.waiting = false
	f.mu.Unlock()
	if wake {
		select {
		case f.wake <- struct{}{}:
		default:
		}
	}
}

// A round of more than 1<<16 connections (a broadcast to that many subscribers of one
// flusher) is not kept as the spare dirty list, and then the spare must not stay the list
// the next round is being scheduled into: the round after would share its backing array
// with the dirty list filled meanwhile, so every connection scheduled during it was
// overwritten by the next, or cleared by writeRound's clear(round), leaving a nil on the
// list (the flusher panicked on it) and a connection marked scheduled that no round
// would ever write again. Here a closing connection is rescheduled by its own round (to
// finish the close once its close frame is out); it must finish, on both write paths.
func TestFlusherRoundAfterHugeRound(t *testing.T) {
	writePaths(t, func(t *testing.T, p writePath) {
		f := newPathFlusher(t, p, 0)
		panicked := startFlusher(t, f)
		pc := newPairConn(t, f)
		idle := func(what string) {
			t.Helper()
			testutil.WaitFor(t, what, func() bool { return flusherIdle(f) || panicked() != nil })
			if r := panicked(); r != nil {
				t.Fatalf("the flusher panicked: %v", r)
			}
		}

		// A small round: its list becomes the spare one.
		pc.c.WritePreframed([]byte("one"))
		pc.waitRead(t, "one")
		idle("the first round to end")

		// A huge round (another connection with nothing queued, on the list 1<<16+1 times).
		scheduleMany(f, &Conn{srv: pc.c.srv, fl: f}, 1<<16+1)
		idle("the huge round to end")

		// The round after: the close frame goes out and the connection is rescheduled by
		// its own endFlush (closing, queue empty) to finish the close in the next round.
		pc.c.Close(4000, "bye", nil)
		testutil.WaitFor(t, "the close to finish", func() bool {
			if panicked() != nil {
				return true
			}
			pc.c.mu.Lock()
			defer pc.c.mu.Unlock()
			return pc.c.flushDone
		})
		if r := panicked(); r != nil {
			t.Fatalf("the flusher panicked: %v", r)
		}
		want := "one" + string(CloseFrame(4000, "bye"))
		pc.waitRead(t, want)
		testutil.WaitFor(t, "the half-close to reach the peer", func() bool {
			var b [1]byte
			n, err := readPeer(pc.peer, b[:])
			return n == 0 && err == io.EOF
		})
		idle("the flusher to go idle")
		pc.c.mu.Lock()
		defer pc.c.mu.Unlock()
		if pc.c.writer != writerIdle || pc.c.state != stateClosed {
			t.Fatalf("writer %d state %d, want idle and closed", pc.c.writer, pc.c.state)
		}
	})
}

// readPeer is one non-blocking read of a socket pair's peer end: io.EOF at end of stream.
func readPeer(fd int, b []byte) (int, error) {
	n, err := readRetry(fd, b)
	if err == nil && n == 0 {
		return 0, io.EOF
	}
	if err != nil {
		return 0, fmt.Errorf("read: %w", err)
	}
	return n, nil
}
