package channels

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

func TestEnvelopeRoundTrip(t *testing.T) {
	cases := []Message{
		{AppID: "app", Channel: "news", Frame: []byte("\x81\x03abc")},
		{AppID: "", Channel: "", Frame: nil},
		{AppID: "a:b\x00c", Channel: "private-x", Except: "1.2", Frame: []byte(strings.Repeat("\xff", 70000))},
	}
	for _, m := range cases {
		node, got, ok := decodeEnvelope(encodeEnvelope("n1", m))
		if !ok || node != "n1" || got.AppID != m.AppID || got.Channel != m.Channel || got.Except != m.Except || string(got.Frame) != string(m.Frame) {
			t.Fatalf("round trip of %+v: %v %q %+v", m, ok, node, got)
		}
	}
}

func TestEnvelopeRejectsGarbage(t *testing.T) {
	good := encodeEnvelope("n1", Message{AppID: "app", Channel: "c", Frame: []byte("f")})
	for _, p := range [][]byte{nil, []byte("rg"), []byte("xx1abc"), good[:5], []byte("rg1\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01")} {
		if _, _, ok := decodeEnvelope(p); ok {
			t.Fatalf("accepted %q", p)
		}
	}
}

func FuzzDecodeEnvelope(f *testing.F) {
	f.Add(encodeEnvelope("n", Message{AppID: "a", Channel: "c", Except: "1.1", Frame: []byte("x")}))
	f.Fuzz(func(t *testing.T, p []byte) {
		node, m, ok := decodeEnvelope(p)
		if !ok {
			return
		}
		node2, m2, ok := decodeEnvelope(encodeEnvelope(node, m))
		if !ok || node2 != node || m2.AppID != m.AppID || m2.Channel != m.Channel || m2.Except != m.Except || string(m2.Frame) != string(m.Frame) {
			t.Fatalf("re-encoding %q changed it", p)
		}
	})
}

type sink struct{ got chan string }

func (s sink) SocketID() string { return "1.1" }
func (s sink) Send(f []byte)    { s.got <- string(f) }

// TestRedisBrokerOutage: while Redis is down a publish still reaches local sockets and
// reports the error; once Redis is back the receive loop has resubscribed on its own.
func TestRedisBrokerOutage(t *testing.T) {
	mr := miniredis.RunT(t)
	ctx := context.Background()
	var regs [2]*Registry
	var sinks [2]sink
	for i := range regs {
		rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1})
		t.Cleanup(func() { _ = rdb.Close() })
		b, err := NewRedisBroker(ctx, rdb, RedisBrokerOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		regs[i] = NewRegistry(Options{Broker: b})
		b.Start(regs[i].DeliverLocal)
		sinks[i] = sink{make(chan string, 100)}
		regs[i].Subscribe("app", "c", sinks[i])
	}
	addr := mr.Addr()
	mr.Close()
	if err := regs[0].Publish(ctx, Message{AppID: "app", Channel: "c", Frame: []byte("down")}); err == nil {
		t.Fatal("publish during an outage reported no error")
	}
	if got := <-sinks[0].got; got != "down" {
		t.Fatalf("local socket got %q", got)
	}
	if err := mr.StartAddr(addr); err != nil {
		t.Fatal(err)
	}
	// Poll: republish until node B's loop has redialled and resubscribed.
	deadline := time.Now().Add(15 * time.Second)
	for {
		_ = regs[0].Publish(ctx, Message{AppID: "app", Channel: "c", Frame: []byte("up")})
		select {
		case got := <-sinks[1].got:
			if got != "up" {
				t.Fatalf("node B got %q", got)
			}
			if !regs[1].Broker().(*RedisBroker).Healthy() {
				t.Fatal("node B delivered but reports unhealthy")
			}
			return
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("node B never resubscribed")
		}
	}
}
