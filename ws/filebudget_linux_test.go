//go:build linux

package ws

import (
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/reverbgo/reverbgo/internal/testutil"
)

// openFDs counts the process's open descriptors.
func openFDs(t testing.TB) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	return len(ents)
}

// A connection of the fast listener holds one descriptor once its writer is idle again:
// the slow path's blocking duplicate (made when the socket's buffer filled) is closed when
// that writer finishes, so connections that were slow once do not hold two descriptors each
// (the connection cap counts one per connection, and the extra ones ran the process into
// EMFILE below it). While they are stuck the duplicates exist (the slow path ran); once the
// peers have read everything the count is back where it was, and every connection is open.
func TestSlowConnsHoldOneFDOnceDrained(t *testing.T) {
	for _, tr := range []transport{fastTransport, fastURingTransport} {
		t.Run(tr.String(), func(t *testing.T) { testSlowConnsHoldOneFD(t, tr) })
	}
}

func testSlowConnsHoldOneFD(t *testing.T, tr transport) {
	const conns = 40
	const frameSize = 512 << 10 // far more than a small socket buffer takes at once
	h := newEchoHandler()
	s := NewServer(tr.options(t, Options{Handler: h, MaxQueueBytes: 4 << 20}))
	ts := &tserver{h: h, s: s, ts: newHTTPServer(t, s, tr)}
	ws := make([]*wireConn, conns)
	for i := range ws {
		ws[i], _ = dialWire(t, ts, "echo", "")
		_ = ws[i].nc.(*net.TCPConn).SetReadBuffer(64 << 10)
	}
	testutil.WaitFor(t, "the connections to open", func() bool { return len(h.conns()) == conns })
	for _, c := range h.conns() {
		_ = c.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF, 8<<10) })
	}
	base := openFDs(t)
	frame := TextFrame(pattern(frameSize))
	for _, c := range h.conns() {
		if !c.WritePreframed(frame) {
			t.Fatal("a frame was refused")
		}
	}
	// Every socket is full and its slow path holds a duplicate: the rise shows it ran.
	testutil.WaitFor(t, "every connection's slow path to start", func() bool { return openFDs(t) >= base+conns })

	readAll(t, ws, frameSize)
	testutil.WaitFor(t, "every writer to be idle", func() bool {
		for _, c := range h.conns() {
			c.mu.Lock()
			idle := c.writer == writerIdle
			c.mu.Unlock()
			if !idle {
				return false
			}
		}
		return true
	})
	testutil.WaitFor(t, "the descriptors to be one per connection again", func() bool { return openFDs(t) <= base })
	if n := len(h.conns()); n != conns {
		t.Fatalf("%d connections open, want %d", n, conns)
	}
	// A second burst takes the slow path again (a new duplicate) and is delivered too.
	for _, c := range h.conns() {
		c.WritePreframed(frame)
	}
	readAll(t, ws, frameSize)
	for i, w := range ws {
		if got := w.awaitEcho(t, 1<<20); len(got) != 0 {
			t.Fatalf("client %d: unexpected frames %q", i, got)
		}
	}
	testutil.WaitFor(t, "the descriptors to be one per connection after the second burst", func() bool { return openFDs(t) <= base })
}

// readAll has every client read one text frame of size bytes, all at once.
func readAll(t *testing.T, ws []*wireConn, size int) {
	t.Helper()
	errs := make(chan error, len(ws))
	for i, w := range ws {
		go func() {
			_ = w.nc.SetReadDeadline(time.Now().Add(4 * waitTimeout))
			f, err := readServerFrame(w.br)
			if err == nil && (f.op != OpText || len(f.payload) != size) {
				err = fmt.Errorf("op %d, %d bytes, want a %d-byte text frame", f.op, len(f.payload), size)
			}
			if err != nil {
				err = fmt.Errorf("client %d: %w", i, err)
			}
			errs <- err
		}()
	}
	for range ws {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
