//go:build linux

package ws

import (
	"bufio"
	"bytes"
	"fmt"
	"github.com/reverbgo/reverbgo/internal/testutil"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// barrierSession answers "sub N" as a protocol answers a subscribe that waits on a slow
// store: it holds the writes back at once, makes N the channel that ticks, and 20 ms later
// releases the barrier with "ok N". Ticks for N are thus only ever sent behind N's barrier.
type barrierSession struct {
	echoSession
	current atomic.Int64 // the channel that ticks, -1 before the first sub
}

func (s *barrierSession) OnFrame(op byte, payload []byte) {
	n, ok := strings.CutPrefix(string(payload), "sub ")
	if op != OpText || !ok {
		return
	}
	i, _ := strconv.Atoi(n)
	b := s.c.Hold()
	s.current.Store(int64(i))
	go func() {
		time.Sleep(20 * time.Millisecond)
		b.Release(TextFrame([]byte("ok " + n)))
	}()
}

// The transport half of the write-queue rule: 1 MiB frames on a socket whose buffer is
// full, barriers opened and released meanwhile, the writer holding a partial write's
// remainder (TestHookPartialWrite): every frame still parses and every "tick N" follows
// its "ok N". (pusher's writequeue_test runs the same with real subscriptions.)
func TestWriteQueueSurvivesPartialWrites(t *testing.T) {
	for _, tr := range []transport{fastTransport, fastURingTransport} {
		t.Run(tr.String(), func(t *testing.T) { testWriteQueueSurvivesPartialWrites(t, tr) })
	}
}

func testWriteQueueSurvivesPartialWrites(t *testing.T, tr transport) {
	TestHookPartialWrite = func() { time.Sleep(30 * time.Millisecond) }
	t.Cleanup(func() { TestHookPartialWrite = nil })
	h := newEchoHandler()
	sess := &barrierSession{echoSession: echoSession{h: h}}
	sess.current.Store(-1)
	s := NewServer(tr.options(t, Options{Handler: handlerFunc(func(req *Request, greeting []byte) Decision {
		return Decision{Session: sess, Greeting: AppendTextFrame(greeting, []byte("hello")), MaxMessageSize: testLimit}
	}), MaxQueueBytes: 256 << 20}))
	ts := &tserver{h: h, s: s, ts: newHTTPServer(t, s, tr)}
	t.Cleanup(func() {
		for _, c := range h.conns() {
			c.Abort()
		}
	})
	w, _ := dialWire(t, ts, "echo", "")
	_ = w.nc.(*net.TCPConn).SetReadBuffer(128 << 10)
	testutil.WaitFor(t, "session open", func() bool { return len(h.conns()) == 1 })
	c := h.conns()[0]
	// A slow link: the server's socket takes 64 KiB at a time, so a 1 MiB frame always
	// leaves the non-blocking write with a remainder.
	_ = c.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF, 64<<10) })

	const rounds = 12
	big := TextFrame(bytes.Repeat([]byte("b"), 1<<20))
	var (
		mu      sync.Mutex
		oks     = map[string]bool{}
		ticks   = map[string]int{}
		bigs    atomic.Int64
		readErr error
	)
	done := make(chan struct{})
	go func() { // the slow reader checks every frame as it comes
		defer close(done)
		br := bufio.NewReaderSize(&testutil.SlowReader{R: w.nc, Piece: 64 << 10, Pause: 100 * time.Microsecond}, 64<<10)
		_ = w.nc.SetReadDeadline(time.Now().Add(120 * time.Second))
		for {
			f, err := readServerFrame(br)
			mu.Lock()
			if err != nil {
				readErr = err
				mu.Unlock()
				return
			}
			p := string(f.payload)
			switch {
			case f.op != OpText:
			case len(p) == 1<<20 && strings.Trim(p, "b") == "":
				bigs.Add(1)
			case strings.HasPrefix(p, "ok "):
				oks[p[3:]] = true
			case strings.HasPrefix(p, "tick "):
				if !oks[p[5:]] {
					readErr = fmt.Errorf("%q before its ok", p)
				}
				ticks[p[5:]]++
			default:
				readErr = fmt.Errorf("frame of %d bytes is not one message: starts %.40q", len(p), p)
			}
			stop := readErr != nil || (len(oks) == rounds && len(ticks) == rounds && bigs.Load() >= rounds)
			mu.Unlock()
			if stop {
				return
			}
		}
	}()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // ticks all the time on the current channel
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-done:
				return
			case <-time.After(time.Millisecond):
			}
			if n := sess.current.Load(); n >= 0 {
				c.WriteText([]byte("tick " + strconv.Itoa(int(n))))
			}
		}
	}()
	for i := range rounds {
		c.WritePreframed(big)
		time.Sleep(time.Millisecond)
		w.write(t, text("sub "+strconv.Itoa(i)), 64) // meets the writer inside the partial write
		deadline := time.Now().Add(10 * time.Second)
		for bigs.Load() <= int64(i) && time.Now().Before(deadline) {
			select {
			case <-done:
				deadline = time.Now()
			case <-time.After(time.Millisecond):
			}
		}
	}
	select {
	case <-done:
	case <-time.After(90 * time.Second): // a loaded machine, -race: generous
		mu.Lock()
		t.Errorf("the reader did not see every round within 90s: %d big frames, %d oks, %d channels ticking", bigs.Load(), len(oks), len(ticks))
		mu.Unlock()
	}
	close(stop)
	wg.Wait()
	_ = w.nc.Close()
	<-done
	mu.Lock()
	defer mu.Unlock()
	if readErr != nil && !strings.Contains(readErr.Error(), "use of closed") {
		t.Fatalf("after %d big frames and %d oks: %v", bigs.Load(), len(oks), readErr)
	}
	if len(oks) != rounds || len(ticks) != rounds {
		t.Fatalf("oks %d, channels ticking %d, want %d", len(oks), len(ticks), rounds)
	}
}

// handlerFunc adapts a function to Handler.
type handlerFunc func(req *Request, greeting []byte) Decision

func (f handlerFunc) Accept(req *Request, greeting []byte) Decision { return f(req, greeting) }
