//go:build linux

package ws

import (
	"bytes"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/reverbgo/reverbgo/internal/testutil"
)

// bcastPayload is broadcast k's payload, the same for every subscriber.
func bcastPayload(k int) []byte {
	return append(fmt.Appendf(nil, "b.%d.", k), bytes.Repeat([]byte{byte('A' + k%26)}, (k*31)%400)...)
}

// gorillaSeq is a gorilla client (which inflates what it reads) counting a seqHandler's
// frames and the broadcasts.
type gorillaSeq struct {
	wc   *websocket.Conn
	id   int
	done chan struct{}

	mu    sync.Mutex
	got   int // seq frames, in order
	bcast int // broadcasts, in order
	bad   error
}

func (g *gorillaSeq) read(pad padFunc) {
	defer close(g.done)
	for {
		_, msg, err := g.wc.ReadMessage()
		if err != nil {
			return
		}
		g.mu.Lock()
		if bytes.HasPrefix(msg, []byte("b.")) {
			if !bytes.Equal(msg, bcastPayload(g.bcast)) && g.bad == nil {
				g.bad = fmt.Errorf("broadcast %d: got %.40q", g.bcast, msg)
			}
			g.bcast++
		} else {
			if err := checkSeq(msg, g.id, g.got, pad); err != nil && g.bad == nil {
				g.bad = err
			}
			g.got++
		}
		g.mu.Unlock()
	}
}

// Connections with permessage-deflate and plain ones in the same rounds, over writev and
// io_uring: each gets a stream of its own frames (compressed for those that negotiated
// it) and broadcasts whose compressed frame is built once and queued on every deflate
// subscriber (the plain frame on the others). Every client inflates and reads every
// frame, in order.
func TestURingDeflateAndPlain(t *testing.T) {
	for _, tr := range []transport{fastTransport, fastURingTransport} {
		t.Run(tr.String(), func(t *testing.T) {
			const clients, passes = 12, 80
			h, ts := seqServer(t, tr, Options{MaxQueueBytes: 8 << 20, Compression: Compression{Enabled: true, MinBytes: 64, Level: 1}})
			pad := smallPad(16 << 10)
			url := "ws://" + ts.ts.Listener.Addr().String() + "/app/x"
			gs := make([]*gorillaSeq, clients)
			for i := range gs {
				d := websocket.Dialer{EnableCompression: i%2 == 0, HandshakeTimeout: waitTimeout}
				wc, resp, err := d.Dial(url, nil)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = wc.Close() })
				if zip := resp.Header.Get("Sec-WebSocket-Extensions") != ""; zip != (i%2 == 0) {
					t.Fatalf("client %d: deflate negotiated %v", i, zip)
				}
				_ = wc.SetReadDeadline(time.Now().Add(waitTimeout))
				_, greeting, err := wc.ReadMessage()
				if err != nil {
					t.Fatal(err)
				}
				id, err := strconv.Atoi(string(bytes.TrimPrefix(greeting, []byte("id:"))))
				if err != nil {
					t.Fatalf("greeting %q", greeting)
				}
				_ = wc.SetReadDeadline(time.Time{})
				gs[i] = &gorillaSeq{wc: wc, id: id, done: make(chan struct{})}
				go gs[i].read(pad)
			}
			testutil.WaitFor(t, "the clients to open", func() bool { return h.openCount() == clients })
			zipped := 0
			for _, s := range h.sessions() {
				if s.c.Deflater() != nil {
					zipped++
				}
			}
			if zipped != clients/2 {
				t.Fatalf("%d sessions with deflate, want %d", zipped, clients/2)
			}
			for k := range passes {
				plain := TextFrame(bcastPayload(k))
				z := ts.s.deflater.Frame(plain)
				for _, s := range h.sessions() {
					frame := plain
					if s.c.Deflater() != nil && z != nil {
						frame = z
					}
					if !s.c.WritePreframed(frame) {
						t.Fatalf("session %d refused broadcast %d", s.id, k)
					}
					if !s.c.WriteCompressible(seqFrame(s.id, s.sent, pad)) {
						t.Fatalf("session %d refused frame %d", s.id, s.sent)
					}
					s.sent++
				}
				if k%10 == 0 {
					time.Sleep(time.Millisecond) // several rounds, not one
				}
			}
			for _, g := range gs {
				testutil.WaitFor(t, fmt.Sprintf("client %d to read everything", g.id), func() bool {
					g.mu.Lock()
					defer g.mu.Unlock()
					return g.got >= passes && g.bcast >= passes || g.bad != nil
				})
				g.mu.Lock()
				got, bcast, bad := g.got, g.bcast, g.bad
				g.mu.Unlock()
				if bad != nil || got != passes || bcast != passes {
					t.Fatalf("client %d: %d frames and %d broadcasts of %d: %v", g.id, got, bcast, passes, bad)
				}
			}
			if wc := ts.s.WriteCounts(); tr == fastURingTransport && wc.URing == 0 {
				t.Fatalf("write counts %+v: nothing went through io_uring", wc)
			}
		})
	}
}
