//go:build linux

package ws

import (
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/reverbgo/reverbgo/internal/testutil"
)

// How the churn test ends a connection.
type churnMode int

const (
	churnClient churnMode = iota // the client closes its socket
	churnAbort                   // the server drops it (Abort)
	churnClose                   // the server closes it with a close frame (Close 4000)
	numChurnModes
)

// Hundreds of connections receive a stream of their own frames while, in waves, a random
// quarter of them is ended (the client closes, the server aborts, the server closes with
// a close frame), from many goroutines at once and during the flushers' rounds, and as
// many new clients connect at once (taking the freed descriptor numbers). The same over
// writev and io_uring: a connection that stays open reads every frame queued for it,
// once, in order; one the server closed reads every frame queued before the close frame,
// then the close frame; one it aborted reads a prefix; no client ever reads a frame of
// another connection (a write to a reused descriptor), a corrupted frame or one after
// the close frame.
func TestURingChurn(t *testing.T) {
	for _, tr := range []transport{fastTransport, fastURingTransport} {
		t.Run(tr.String(), func(t *testing.T) {
			h, ts := seqServer(t, tr, Options{MaxQueueBytes: 8 << 20})
			testChurn(t, h, []*tserver{ts}, tr == fastURingTransport)
		})
	}
	// The fast listener's sockets (written through the ring) and net/http's (the same
	// server's flushers write them with writev: their descriptors are Go's) in the same
	// rounds, which a coalescing window makes larger.
	t.Run("fast+io_uring and plain", func(t *testing.T) {
		h := newSeqHandler()
		s := NewServer(fastURingTransport.options(t, Options{Handler: h, MaxQueueBytes: 8 << 20, CoalesceWindow: time.Millisecond}))
		fast := &tserver{s: s, ts: newHTTPServer(t, s, fastURingTransport)}
		plain := &tserver{s: s, ts: newHTTPServer(t, s, plainTransport)}
		t.Cleanup(func() {
			for _, ss := range h.sessions() {
				ss.c.Abort()
			}
		})
		testChurn(t, h, []*tserver{fast, plain}, true)
		if wc := s.WriteCounts(); wc.Writev == 0 {
			t.Fatalf("write counts %+v: the plain sockets were not written with writev", wc)
		}
	})
}

// testChurn runs the churn on h's server, its clients dialing the servers in tss in turn.
func testChurn(t *testing.T, h *seqHandler, tss []*tserver, uring bool) {
	const initial, waves, perWave, passesPerWave = 128, 4, 32, 10
	pad := smallPad(40 << 10) // every 41st frame large: short writes and the slow path now and then
	ts := tss[0]
	rng := mrand.New(mrand.NewPCG(1, uint64(len(tss))))
	clients := map[int]*seqClient{}
	ended := map[int]churnMode{}
	dialed := 0
	dialN := func(n int) {
		for range n {
			c := dialSeq(t, tss[dialed%len(tss)], pad)
			dialed++
			clients[c.id] = c
		}
	}
	dialN(initial)
	testutil.WaitFor(t, "the clients to open", func() bool { return h.openCount() == initial })
	w := startSeqWriter(h, pad, 512<<10)
	defer func() {
		select {
		case <-w.done:
		default:
			w.halt()
		}
	}()

	reused := 0
	for wave := range waves {
		w.waitPasses(t, int64((wave+1)*passesPerWave))
		var open []int
		for id := range clients {
			if _, ok := ended[id]; !ok {
				open = append(open, id)
			}
		}
		rng.Shuffle(len(open), func(i, j int) { open[i], open[j] = open[j], open[i] })
		freed := map[int]bool{}
		var wg sync.WaitGroup
		for i, id := range open[:perWave] {
			mode := churnMode(i % int(numChurnModes))
			ended[id] = mode
			s := h.session(id)
			_ = s.c.Control(func(fd uintptr) { freed[int(fd)] = true })
			wg.Add(1)
			go func() {
				defer wg.Done()
				switch mode {
				case churnClient:
					clients[id].close()
				case churnAbort:
					s.c.Abort()
				case churnClose:
					s.c.Close(4000, "bye", nil)
				}
			}()
		}
		wg.Wait()
		before := len(clients)
		dialN(perWave)
		testutil.WaitFor(t, "the new clients to open", func() bool { return h.total() >= before+perWave })
		for id, c := range clients {
			if _, gone := ended[id]; id < before || gone {
				continue
			}
			if s := h.session(c.id); s != nil {
				_ = s.c.Control(func(fd uintptr) {
					if freed[int(fd)] {
						reused++
					}
				})
			}
		}
	}
	w.waitPasses(t, int64((waves+1)*passesPerWave))
	w.halt()

	survivors := 0
	for id, c := range clients {
		s := h.session(id)
		mode, gone := ended[id]
		if !gone {
			survivors++
			c.waitGot(t, s.sent)
			got, code, bad := c.state()
			if bad != nil || got != s.sent || code != 0 || c.ended() {
				t.Errorf("survivor %d: read %d of %d frames, close code %d, ended %v: %v", id, got, s.sent, code, c.ended(), bad)
			}
			continue
		}
		if mode == churnClient {
			continue
		}
		testutil.WaitFor(t, fmt.Sprintf("client %d to see its end", id), c.ended)
		got, code, bad := c.state()
		switch {
		case bad != nil:
			t.Errorf("client %d (mode %d): %v", id, mode, bad)
		case mode == churnClose && (code != 4000 || got != s.sent):
			t.Errorf("client %d closed by the server: read %d of %d frames, then close code %d", id, got, s.sent, code)
		case mode == churnAbort && got > s.sent:
			t.Errorf("client %d aborted: read %d frames, only %d were queued", id, got, s.sent)
		}
	}
	testutil.WaitFor(t, "every ended connection's OnClose", func() bool { return h.openCount() == survivors })
	wc := ts.s.WriteCounts()
	if uring && wc.URing == 0 {
		t.Fatalf("write counts %+v: nothing went through io_uring", wc)
	}
	t.Logf("%d clients, %d survivors, %d new connections on a freed descriptor number, writes %+v", len(clients), survivors, reused, wc)
}
