package channels_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/reverbgo/reverbgo/channels"
	"github.com/reverbgo/reverbgo/ws"
)

// deflatingSink is a subscriber that negotiated permessage-deflate (d non-nil) or not; it
// records which method delivered each frame.
type deflatingSink struct {
	id     string
	d      *ws.Deflater
	mu     sync.Mutex
	frames [][]byte
	shared int // frames taken through SendFrame
}

func (s *deflatingSink) SocketID() string { return s.id }
func (s *deflatingSink) Deflater() channels.Compressor {
	if s.d == nil {
		return nil
	}
	return s.d
}
func (s *deflatingSink) Send(f []byte)      { s.record(f, false) }
func (s *deflatingSink) SendFrame(f []byte) { s.record(f, true) }
func (s *deflatingSink) record(f []byte, shared bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.frames = append(s.frames, f)
	if shared {
		s.shared++
	}
}

// A broadcast is compressed once for every subscriber that negotiated compression (the
// same bytes on each, RSV1 set), the others get the plain frame, and nothing is
// compressed when the frame is under min_bytes or the only compressing subscriber is the
// sender (Except).
func TestDeliverLocalCompressesOnce(t *testing.T) {
	d := ws.NewDeflater(ws.Compression{Enabled: true, MinBytes: 256, Level: 1})
	r := channels.NewRegistry(channels.Options{})
	var subs []*deflatingSink
	for i := range 6 {
		s := &deflatingSink{id: fmt.Sprintf("1.%d", i)}
		if i%2 == 0 {
			s.d = d
		}
		subs = append(subs, s)
		r.Subscribe("app", "orders", s)
	}
	plainSub := &sink{id: "2.0"} // a Subscriber that is not Deflating at all
	r.Subscribe("app", "orders", plainSub)

	big := ws.TextFrame([]byte(`{"event":"e","channel":"orders","data":"` + strings.Repeat(`{\"id\":1}`, 100) + `"}`))
	if n := r.DeliverLocal(channels.Message{AppID: "app", Channel: "orders", Frame: big}); n != 7 {
		t.Fatalf("delivered to %d", n)
	}
	var zipped []byte
	for _, s := range subs {
		f := s.frames[0]
		if s.d == nil {
			if &f[0] != &big[0] {
				t.Fatalf("%s without compression got another frame", s.id)
			}
			continue
		}
		if f[0] != 0xC1 || len(f) >= len(big) || s.shared != 1 {
			t.Fatalf("%s: first byte %#x, %d bytes, shared %d", s.id, f[0], len(f), s.shared)
		}
		if zipped == nil {
			zipped = f
		} else if &f[0] != &zipped[0] {
			t.Fatalf("%s got its own compressed copy: not compressed once", s.id)
		}
	}
	if got := plainSub.got(); len(got) != 1 || got[0] != string(big) {
		t.Fatal("the plain subscriber did not get the plain frame")
	}

	small := ws.TextFrame([]byte(`{"event":"e","channel":"orders","data":"{}"}`))
	r.DeliverLocal(channels.Message{AppID: "app", Channel: "orders", Frame: small})
	for _, s := range subs {
		if f := s.frames[1]; &f[0] != &small[0] {
			t.Fatalf("%s: a frame under min_bytes was not sent as it is", s.id)
		}
	}

	// Only the sender compresses: after the others leave, nothing is compressed for it.
	for _, s := range subs[1:] {
		r.Unsubscribe("app", "orders", s.id)
	}
	r.Unsubscribe("app", "orders", plainSub.id)
	allocs := testing.AllocsPerRun(20, func() {
		r.DeliverLocal(channels.Message{AppID: "app", Channel: "orders", Frame: big, Except: subs[0].id})
	})
	if allocs != 0 {
		t.Fatalf("a broadcast that reaches no compressing subscriber allocated %.0f times", allocs)
	}
}

// With no compressing subscriber in the channel, a broadcast allocates nothing (the path
// of a server with compression off).
func TestDeliverLocalNoCompressionAllocatesNothing(t *testing.T) {
	r := channels.NewRegistry(channels.Options{})
	for i := range 100 {
		r.Subscribe("app", "c", &countingSub{id: fmt.Sprintf("1.%d", i)})
	}
	frame := ws.TextFrame([]byte(`{"event":"e","channel":"c","data":"` + strings.Repeat("x", 2000) + `"}`))
	m := channels.Message{AppID: "app", Channel: "c", Frame: frame}
	if allocs := testing.AllocsPerRun(20, func() { r.DeliverLocal(m) }); allocs != 0 {
		t.Fatalf("allocated %.0f times per broadcast", allocs)
	}
}
