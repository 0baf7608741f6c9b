//go:build linux

package ws

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/reverbgo/reverbgo/internal/testutil"
)

// Slow readers in the same rounds as fast ones, over writev and io_uring. Clients with
// small buffers stop reading: their writes turn short or -EAGAIN in the very SQE batch
// that carries the fast clients' frames, and they move to the slow path. The fast ones
// read everything while the others are stuck (nothing of theirs waits behind a full
// socket, nothing is mixed into another's stream); the paused ones, once they read
// again, get every frame in order and stay open, and go on through the rounds after; the
// stalled ones pass the byte bound and are dropped (CauseOverflow, no close frame), having
// read an in-order prefix.
func TestURingSlowReaders(t *testing.T) {
	for _, tr := range []transport{fastTransport, fastURingTransport} {
		t.Run(tr.String(), func(t *testing.T) { testSlowReaders(t, tr) })
	}
}

func testSlowReaders(t *testing.T, tr transport) {
	const fast, paused, stalled = 16, 4, 3
	const bound = 256 << 10
	slowed := recordSlowConns(t)
	h, ts := seqServer(t, tr, Options{MaxQueueBytes: bound})
	pad := smallPad(16 << 10)
	var fasts, pauseds, stalleds []*seqClient
	release, never := make(chan struct{}), make(chan struct{})
	var unblock sync.Once // the stalled ones read what they have at the end
	t.Cleanup(func() { unblock.Do(func() { close(never) }) })
	slow := func(gate chan struct{}) *seqClient {
		c := dialSeqGated(t, ts, pad, gate)
		if gate == never { // a small window for those that never read again; the paused
			// ones must catch up quickly once they do (a tiny window crawls on loopback)
			_ = c.nc.(*net.TCPConn).SetReadBuffer(4 << 10)
		}
		testutil.WaitFor(t, "the session", func() bool { return h.session(c.id) != nil })
		_ = h.session(c.id).c.Control(func(fd uintptr) {
			_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF, 8<<10)
		})
		return c
	}
	for i := range fast + paused + stalled {
		switch { // interleaved, so each round and chunk has all three kinds
		case i%4 == 1 && len(pauseds) < paused:
			pauseds = append(pauseds, slow(release))
		case i%4 == 3 && len(stalleds) < stalled:
			stalleds = append(stalleds, slow(never))
		default:
			fasts = append(fasts, dialSeq(t, ts, pad))
		}
	}
	testutil.WaitFor(t, "the clients to open", func() bool { return h.openCount() == fast+paused+stalled })

	// Phase 1: the paused and stalled clients read nothing; the fast ones keep up.
	w := startSeqWriter(h, pad, bound) // never skips: the bound itself cuts the stalled
	defer func() {
		select {
		case <-w.done:
		default:
			w.halt()
		}
	}()
	w.waitPasses(t, 250)
	w.halt()
	for _, c := range fasts {
		c.waitGot(t, h.session(c.id).sent)
		if got, _, bad := c.state(); bad != nil || got != h.session(c.id).sent {
			t.Fatalf("fast client %d: read %d of %d frames while the slow ones were stuck: %v", c.id, got, h.session(c.id).sent, bad)
		}
	}
	for _, c := range append(pauseds, stalleds...) {
		s := h.session(c.id)
		if s.ended.Load() {
			t.Fatalf("slow client %d was dropped after %d frames (cause %d): the bound was not reached yet", c.id, s.sent, s.cause.Load())
		}
		if !slowed.has(&s.c.fdc) {
			t.Fatalf("slow client %d never needed the slow path: the test did not fill its socket", c.id)
		}
	}

	// Phase 2: the paused ones read again while the stream goes on; the stalled ones
	// never do and are cut.
	close(release)
	for _, c := range stalleds {
		h.session(c.id).push.Store(true)
	}
	w = startSeqWriter(h, pad, 32<<10) // the paused ones at their pace
	testutil.WaitFor(t, "the stalled clients to be cut", func() bool {
		for _, c := range stalleds {
			if !h.session(c.id).ended.Load() {
				return false
			}
		}
		return true
	})
	w.waitPasses(t, w.passes.Load()+100)
	w.halt()
	for _, c := range append(fasts, pauseds...) {
		s := h.session(c.id)
		c.waitGot(t, s.sent)
		if got, code, bad := c.state(); bad != nil || got != s.sent || code != 0 || s.ended.Load() {
			t.Errorf("client %d: read %d of %d frames, close code %d, ended %v: %v", c.id, got, s.sent, code, s.ended.Load(), bad)
		}
	}
	for _, c := range stalleds {
		s := h.session(c.id)
		if cause := Cause(s.cause.Load()); cause != CauseOverflow {
			t.Errorf("stalled client %d ended with cause %d, want CauseOverflow", c.id, cause)
		}
	}
	unblock.Do(func() { close(never) })
	for _, c := range stalleds {
		testutil.WaitFor(t, "the stalled client to read to its end", c.ended)
		if got, code, bad := c.state(); bad != nil || code != 0 || got > h.session(c.id).sent {
			t.Errorf("stalled client %d: read %d of %d frames, close code %d: %v", c.id, got, h.session(c.id).sent, code, bad)
		}
	}
	if wc := ts.s.WriteCounts(); tr == fastURingTransport && (wc.URing == 0 || wc.Blocking == 0) {
		t.Fatalf("write counts %+v: want io_uring writes and slow-path ones", wc)
	}
}

// Large frames (up to 900 KiB) in the same batches as the control frames the server
// answers on its own (pongs) and the echoes of the client's messages, both queued by the
// poller while the test queues the large ones, then a close frame: every frame arrives
// whole, the pongs and echoes each in the order asked, the large frames in order, and
// after the close frame nothing. Over writev and io_uring, so a large frame's short write
// and its remainder on the slow path interleave with everything else.
func TestURingLargeAndControlFrames(t *testing.T) {
	for _, tr := range []transport{fastTransport, fastURingTransport} {
		t.Run(tr.String(), func(t *testing.T) {
			const clients, frames = 4, 12
			h, ts := seqServer(t, tr, Options{MaxQueueBytes: 16 << 20})
			pad := func(id, seq int) int {
				if seq%3 == 2 {
					return 20 + seq
				}
				return 900<<10 - (id*7919+seq*104729)%(64<<10)
			}
			cs := make([]*seqClient, clients)
			for i := range cs {
				cs[i] = dialSeq(t, ts, pad)
			}
			testutil.WaitFor(t, "the clients to open", func() bool { return h.openCount() == clients })
			var wg sync.WaitGroup
			asked := make([][]string, clients)
			for i, c := range cs {
				wg.Add(1)
				go func() { // pings and messages while the large frames are being written
					defer wg.Done()
					for k := range 3 * frames {
						p := fmt.Sprintf("p%d.%d", c.id, k)
						asked[i] = append(asked[i], p)
						if k%2 == 0 {
							c.send(clientFrame(0x80|OpPing, []byte(p), true))
						} else {
							c.send(clientFrame(0x80|OpText, []byte(p), true))
						}
						time.Sleep(time.Millisecond) // spreads them over the large frames
					}
				}()
			}
			for seq := range frames {
				for _, c := range cs {
					s := h.session(c.id)
					if !s.c.WritePreframed(seqFrame(s.id, seq, pad)) {
						t.Fatalf("client %d: frame %d refused", c.id, seq)
					}
					s.sent++
				}
			}
			wg.Wait()
			for i, c := range cs {
				testutil.WaitFor(t, "the answers", func() bool {
					c.mu.Lock()
					defer c.mu.Unlock()
					return len(c.pongs)+len(c.echoes) >= len(asked[i]) || c.bad != nil
				})
				h.session(c.id).c.Close(4001, "done", nil)
			}
			for i, c := range cs {
				testutil.WaitFor(t, "the client to see its end", c.ended)
				got, code, bad := c.state()
				if bad != nil || got != frames || code != 4001 {
					t.Fatalf("client %d: read %d of %d large frames, close code %d: %v", c.id, got, frames, code, bad)
				}
				var pongs, echoes []string
				for k, p := range asked[i] {
					if k%2 == 0 {
						pongs = append(pongs, p)
					} else {
						echoes = append(echoes, p)
					}
				}
				c.mu.Lock()
				gotP, gotE := strings.Join(c.pongs, ","), strings.Join(c.echoes, ",")
				c.mu.Unlock()
				if gotP != strings.Join(pongs, ",") || gotE != strings.Join(echoes, ",") {
					t.Fatalf("client %d: pongs %s, want %s; echoes %s, want %s", c.id, gotP, strings.Join(pongs, ","), gotE, strings.Join(echoes, ","))
				}
			}
			if wc := ts.s.WriteCounts(); tr == fastURingTransport && wc.URing == 0 {
				t.Fatalf("write counts %+v: nothing went through io_uring", wc)
			}
		})
	}
}
