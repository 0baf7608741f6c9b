//go:build linux

package ws

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/reverbgo/reverbgo/internal/testutil"
)

// openRings counts this process's io_uring descriptors.
func openRings(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.Contains(l, "io_uring") {
			n++
		}
	}
	return n
}

// Stop while the flushers are busy with rounds and frames keep being queued (before,
// during and after it): Stop returns once the queuing stops, nothing panics, every ring is
// unmapped and its descriptor closed, frames queued after Stop are simply not written,
// and once the clients and the listener are gone no goroutine is left. Over writev and
// io_uring.
func TestURingStopDuringRounds(t *testing.T) {
	for _, tr := range []transport{fastTransport, fastURingTransport} {
		t.Run(tr.String(), func(t *testing.T) {
			goroutines0 := runtime.NumGoroutine()
			const clients = 64
			h, ts := seqServer(t, tr, Options{MaxQueueBytes: 8 << 20})
			rings := openRings(t) // the flushers' and the probe's of tr.options (closed with the test)
			if tr == fastURingTransport && rings < len(ts.s.flushers) {
				t.Fatalf("%d rings open for %d flushers", rings, len(ts.s.flushers))
			}
			cs := make([]*seqClient, clients)
			for i := range cs {
				cs[i] = dialSeq(t, ts, smallPad(32<<10))
			}
			testutil.WaitFor(t, "the clients to open", func() bool { return h.openCount() == clients })
			w := startSeqWriter(h, smallPad(32<<10), 1<<20)
			w.waitPasses(t, 20)

			stopped := make(chan struct{})
			go func() { defer close(stopped); ts.s.Stop() }()
			w.waitPasses(t, w.passes.Load()+20) // rounds go on while Stop waits for them
			w.halt()
			testutil.WaitFor(t, "Stop to return", func() bool {
				select {
				case <-stopped:
					return true
				default:
					return false
				}
			})
			for i, f := range ts.s.flushers {
				if f.ur != nil {
					t.Fatalf("flusher %d still has its ring after Stop", i)
				}
			}
			want := rings
			if tr == fastURingTransport {
				want -= len(ts.s.flushers)
			}
			if got := openRings(t); got != want {
				t.Fatalf("%d io_uring descriptors open after Stop, want %d (%d with the server's)", got, want, rings)
			}
			// Queued after Stop: nobody writes them, nothing breaks.
			for _, s := range h.sessions() {
				s.c.WritePreframed(seqFrame(s.id, s.sent, smallPad(0)))
			}
			for _, c := range cs {
				if _, _, bad := c.state(); bad != nil {
					t.Errorf("client %d: %v", c.id, bad)
				}
			}

			for _, s := range h.sessions() {
				s.c.Abort()
			}
			for _, c := range cs {
				c.close()
				<-c.done
			}
			ts.ts.Close()
			testutil.WaitFor(t, fmt.Sprintf("the goroutines to end (%d before the server)", goroutines0), func() bool {
				return runtime.NumGoroutine() <= goroutines0
			})
		})
	}
}
