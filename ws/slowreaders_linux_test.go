//go:build linux

package ws

import (
	"bytes"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/reverbgo/reverbgo/internal/testutil"
)

// A TLS client that stops reading is cut by the byte bound like a plain one: on the TLS
// (portable, goroutine-written) path the blocking writer's batch counts against the bound,
// so the server never holds more than the bound for it, and it ends with CauseOverflow.
func TestStalledReaderCutByBound(t *testing.T) {
	const bound = 256 << 10
	for _, tr := range allTransports {
		t.Run(tr.String(), func(t *testing.T) {
			h := newEchoHandler()
			s := NewServer(tr.options(t, Options{Handler: h, MaxQueueBytes: bound}))
			ts := &tserver{h: h, s: s, ts: newHTTPServer(t, s, tr), tls: tr == tlsTransport}
			w, _ := dialWire(t, ts, "echo", "")
			_ = w.nc // it never reads again
			testutil.WaitFor(t, "session open", func() bool { return len(h.conns()) == 1 })
			c := h.conns()[0]
			frame := TextFrame(bytes.Repeat([]byte("s"), 16<<10))
			sent, peak := 0, 0
			for c.WritePreframed(frame) {
				sent++
				peak = max(peak, c.Buffered())
				if sent > 64<<20/len(frame) {
					t.Fatalf("still taking frames after %d MiB", sent*len(frame)>>20)
				}
				if sent%8 == 0 {
					time.Sleep(time.Millisecond) // let the writer take what the socket takes
				}
			}
			if cause := ts.waitClosed(t); cause != CauseOverflow {
				t.Fatalf("cause %d, want CauseOverflow", cause)
			}
			if peak > bound {
				t.Fatalf("buffered %d bytes, bound %d", peak, bound)
			}
			if w := s.WriteCounts(); tr == fastURingTransport && (w.URing == 0 || w.Writev != 0) {
				t.Fatalf("write counts %+v: want the flushers' writes all through io_uring", w)
			}
			t.Logf("cut after %d frames (%d KiB), at most %d KiB buffered", sent, sent*len(frame)>>10, peak>>10)
		})
	}
}

// 100 clients that stop reading never delay the others. The other clients are served in
// lockstep (each frame is published once every reader has the one before), so a round
// that waited on a stalled socket would never finish; the evidence compared between a run
// with and one without the stalled clients is what reached each reader, and that no
// reader's socket ever needed the blocking writer (its frames all left in the flushers'
// non-blocking rounds), while every stalled client is cut by the bound. No clock is
// read: a p99 comparison needs a quiet machine (bench/, not CI).
func TestStalledReadersDoNotDelayOthers(t *testing.T) {
	for _, tr := range []transport{fastTransport, fastURingTransport} {
		t.Run(tr.String(), func(t *testing.T) { testStalledReadersDoNotDelayOthers(t, tr) })
	}
}

func testStalledReadersDoNotDelayOthers(t *testing.T, tr transport) {
	// The sockets the slow path wrote (their duplicates are closed once it is done).
	slowed := recordSlowConns(t)
	run := func(t *testing.T, stalled int) (delivered []int, slowPath int) {
		h := newEchoHandler()
		h.closed = make(chan Cause, 1024) // OnClose must not block the poller on the test
		s := NewServer(tr.options(t, Options{Handler: h, MaxQueueBytes: 64 << 10}))
		ts := &tserver{h: h, s: s, ts: newHTTPServer(t, s, tr)}
		const readers, rounds = 10, 200
		var rs []*wireConn
		for range readers {
			w, _ := dialWire(t, ts, "echo", "")
			rs = append(rs, w)
		}
		testutil.WaitFor(t, "readers open", func() bool { return len(h.conns()) == readers })
		good := h.conns()
		isGood := map[*Conn]bool{}
		for _, c := range good {
			isGood[c] = true
		}
		for range stalled {
			w, _ := dialWire(t, ts, "echo", "")
			_ = w.nc.(*net.TCPConn).SetReadBuffer(4 << 10) // and never reads
		}
		testutil.WaitFor(t, "stalled clients open", func() bool { return len(h.conns()) == readers+stalled })
		var bad []*Conn
		for _, c := range h.conns() {
			if !isGood[c] {
				bad = append(bad, c)
				_ = c.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF, 8<<10) })
			}
		}
		frame := TextFrame(bytes.Repeat([]byte("f"), 4<<10))
		delivered = make([]int, readers)
		for range rounds {
			for _, c := range good {
				c.WritePreframed(frame)
			}
			for _, c := range bad {
				c.WritePreframed(frame)
			}
			for i, w := range rs {
				if f := w.next(t); f.op != OpText || len(f.payload) != 4<<10 {
					t.Fatalf("reader %d: frame %d op %d len %d", i, delivered[i], f.op, len(f.payload))
				}
				delivered[i]++
			}
		}
		for _, c := range bad {
			if !c.Closing() {
				t.Errorf("a stalled client was not cut after %d frames of 4 KiB (bound 64 KiB)", rounds)
			}
		}
		for _, c := range good {
			if slowed.has(&c.fdc) {
				slowPath++
			}
		}
		if w := s.WriteCounts(); tr == fastURingTransport && (w.URingEnters == 0 || w.Writev != 0) {
			t.Fatalf("write counts %+v: want the flushers' writes all through io_uring", w)
		}
		return delivered, slowPath
	}
	without, slowA := run(t, 0)
	with, slowB := run(t, 100)
	for i := range without {
		if without[i] != with[i] {
			t.Fatalf("reader %d got %d frames without stalled clients, %d with them", i, without[i], with[i])
		}
	}
	if slowA != 0 || slowB != 0 {
		t.Fatalf("readers written by the blocking writer: %d without stalled clients, %d with them", slowA, slowB)
	}
}

// slowConns are the fdConns whose slow path made a duplicate (testHookSlowConn).
type slowConns struct {
	mu  sync.Mutex
	set map[*fdConn]bool
}

func (s *slowConns) has(f *fdConn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.set[f]
}

// recordSlowConns records every duplicate the slow path makes until the test ends.
func recordSlowConns(t *testing.T) *slowConns {
	s := &slowConns{set: make(map[*fdConn]bool)}
	testHookSlowConn = func(f *fdConn) {
		s.mu.Lock()
		s.set[f] = true
		s.mu.Unlock()
	}
	t.Cleanup(func() { testHookSlowConn = nil })
	return s
}
