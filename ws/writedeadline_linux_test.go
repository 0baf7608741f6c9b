//go:build linux

package ws

import (
	"bufio"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/reverbgo/reverbgo/internal/testutil"
)

// deadlineConn is a server socket that records its write deadline and lets a test hold
// the slow path's clearing of it (SetWriteDeadline with the zero time) until released.
type deadlineConn struct {
	*net.TCPConn
	mu       sync.Mutex
	deadline time.Time
	writing  int           // blocking Writes in progress (the slow path's)
	holdZero chan struct{} // non-nil: a clearing waits for it to be closed
	zeroHeld chan struct{} // closed when a clearing started to wait
}

func (d *deadlineConn) SetWriteDeadline(t time.Time) error {
	d.mu.Lock()
	hold, held := d.holdZero, d.zeroHeld
	if t.IsZero() && hold != nil {
		d.holdZero, d.zeroHeld = nil, nil
	} else {
		hold = nil
	}
	d.mu.Unlock()
	if hold != nil {
		close(held)
		<-hold
	}
	d.mu.Lock()
	d.deadline = t
	d.mu.Unlock()
	return d.TCPConn.SetWriteDeadline(t)
}

func (d *deadlineConn) Write(b []byte) (int, error) {
	d.mu.Lock()
	d.writing++
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		d.writing--
		d.mu.Unlock()
	}()
	return d.TCPConn.Write(b)
}

func (d *deadlineConn) SyscallConn() (syscall.RawConn, error) { return d.TCPConn.SyscallConn() }

func (d *deadlineConn) state() (time.Time, int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.deadline, d.writing
}

type deadlineListener struct {
	net.Listener
	conns chan *deadlineConn
}

func (l deadlineListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	dc := &deadlineConn{TCPConn: c.(*net.TCPConn)}
	l.conns <- dc
	return dc, nil
}

// A slow-path writer that goes idle clears its write deadline before another writer can
// take the socket: cleared after, it removed the deadline of the next writer's blocking
// write, and a peer that then stalls held that writer (and its goroutine) for good.
func TestSlowPathKeepsTheNextWritersDeadline(t *testing.T) {
	h := newEchoHandler()
	s := NewServer(Options{Handler: h, MaxQueueBytes: 64 << 20})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /app/{name}", func(w http.ResponseWriter, r *http.Request) { s.Upgrade(w, r, r.PathValue("name")) })
	ts := httptest.NewUnstartedServer(mux)
	dl := deadlineListener{Listener: ts.Listener, conns: make(chan *deadlineConn, 1)}
	ts.Listener = dl
	ts.Start()
	t.Cleanup(func() {
		for _, c := range h.conns() {
			c.Abort()
		}
		ts.Close()
		s.Stop()
	})

	client, err := net.Dial("tcp", ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	_ = client.(*net.TCPConn).SetReadBuffer(16 << 10)
	if _, err := client.Write([]byte(wsHead("echo"))); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReaderSize(client, 64<<10)
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	sc := <-dl.conns
	_ = sc.TCPConn.SetWriteBuffer(16 << 10)
	testutil.WaitFor(t, "connection registered", func() bool { return len(h.conns()) == 1 })
	c := h.conns()[0]

	big := TextFrame(make([]byte, 4<<20)) // far over both socket buffers: the slow path
	// 1. A first slow-path write, which the client then reads whole; its writer goes idle
	//    and clears its deadline, and the test holds that clearing.
	hold, held := make(chan struct{}), make(chan struct{})
	sc.mu.Lock()
	sc.holdZero, sc.zeroHeld = hold, held
	sc.mu.Unlock()
	if !c.WritePreframed(big) {
		t.Fatal("frame refused")
	}
	testutil.WaitFor(t, "the slow path's blocking write", func() bool {
		_, writing := sc.state()
		return writing > 0
	})
	drained := make(chan error, 1)
	go func() {
		for { // past the greeting, the whole 4 MiB frame
			f, err := readServerFrame(br)
			if err != nil || len(f.payload) == 4<<20 {
				drained <- err
				return
			}
		}
	}()
	if err := <-drained; err != nil {
		t.Fatal(err)
	}
	select {
	case <-held:
	case <-time.After(5 * time.Second):
		buf := make([]byte, 1<<20)
		t.Fatalf("the slow path never cleared its deadline\n%s", buf[:runtime.Stack(buf, true)])
	}
	// 2. While the clearing is held, another frame the stalled client does not read: a
	//    writer must end up in a blocking write of it.
	if !c.WritePreframed(big) {
		t.Fatal("frame refused")
	}
	released := false
	release := func() {
		if !released {
			released = true
			close(hold)
		}
	}
	defer release()
	// With the fix the held writer still owns the socket, so nobody writes until released;
	// without it a second writer is already blocked in its write. Either way, release and
	// then wait for the blocking write of the second frame.
	time.Sleep(50 * time.Millisecond) // room for a second writer to start (the old code)
	release()
	testutil.WaitFor(t, "a blocking write of the second frame", func() bool {
		_, writing := sc.state()
		return writing > 0
	})
	// 3. That write must carry a deadline.
	time.Sleep(20 * time.Millisecond) // a late clearing would land now (the old code)
	if d, writing := sc.state(); writing == 0 || d.IsZero() {
		t.Fatalf("the blocking write runs without a write deadline (deadline %v, writes %d)", d, writing)
	}
}
