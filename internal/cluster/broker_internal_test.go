package cluster

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/reverbgo/reverbgo/channels"
	"github.com/reverbgo/reverbgo/internal/testutil"
)

func TestEnvelopeRoundTrip(t *testing.T) {
	cases := []envelope{
		{node: "n1", m: channels.Message{AppID: "app", Channel: "news", Frame: []byte("\x81\x03abc")}},
		{node: "n1", echo: true, m: channels.Message{AppID: "", Channel: "", Frame: nil, Cacheable: true}},
		{node: "", m: channels.Message{AppID: "a:b\x00c", Channel: "private-x", Except: "1.2", Frame: []byte(strings.Repeat("\xff", 70000))}},
		{node: "n1", echo: true, epoch: "e-1", m: channels.Message{AppID: "app", Channel: "c", Frame: []byte("f"), Cacheable: true, Recovery: &channels.HistoryLimits{Size: 5}}},
		{node: "n1", echo: true, epoch: "", m: channels.Message{AppID: "app", Channel: "c", Frame: []byte("rg3"), Recovery: &channels.HistoryLimits{Size: 5}}},
	}
	for i, e := range cases {
		e.seq = uint64(i) * 1e12
		got, ok := decodeEnvelope(encodeEnvelope(e))
		if !ok || !sameEnvelope(got, e) {
			t.Fatalf("round trip of %+v: %v %+v", e, ok, got)
		}
	}
}

func sameEnvelope(a, b envelope) bool {
	return a.node == b.node && a.seq == b.seq && a.echo == b.echo && a.epoch == b.epoch && a.m.AppID == b.m.AppID &&
		a.m.Channel == b.m.Channel && a.m.Except == b.m.Except && string(a.m.Frame) == string(b.m.Frame) &&
		a.m.Cacheable == b.m.Cacheable && (a.m.Recovery != nil) == (b.m.Recovery != nil)
}

// The history script completes a recovery envelope's prefix with the epoch's length byte,
// the epoch and the frame (internal/redisx/lua/channels_history_append.lua).
func TestEnvelopePrefixAsTheScriptCompletesIt(t *testing.T) {
	e := envelope{node: "n1", seq: 9, echo: true, m: channels.Message{AppID: "app", Channel: "c", Except: "1.1", Recovery: &channels.HistoryLimits{}}}
	p := envelopePrefix(e, 0)
	p = append(p, byte(len("ep")))
	p = append(p, "ep"...)
	p = append(p, "\x81\x02{}"...)
	got, ok := decodeEnvelope(p)
	e.epoch, e.m.Frame = "ep", []byte("\x81\x02{}")
	if !ok || !sameEnvelope(got, e) {
		t.Fatalf("decoded %+v, %v", got, ok)
	}
}

func TestEnvelopeRejectsGarbage(t *testing.T) {
	good := encodeEnvelope(envelope{node: "n1", seq: 7, m: channels.Message{AppID: "app", Channel: "c", Frame: []byte("f")}})
	for _, p := range [][]byte{nil, []byte("rg"), []byte("rg2"), []byte("xx2abc"), good[:6], []byte("rg1\x00\x01\x01n"),
		[]byte("rg2\x00\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"), []byte("rg2\x00\x01\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"),
		[]byte("rg3\x02\x01\x00\x00\x00\x00\x05ab"), // the epoch longer than the rest
		[]byte("rg3\x00\x01\x00\x00\x00\x00\x00f"),  // rg3 without the serialled flag
		[]byte("rg2\x02\x01\x00\x00\x00\x00f")} {    // serialled without rg3
		if _, ok := decodeEnvelope(p); ok {
			t.Fatalf("accepted %q", p)
		}
	}
}

func FuzzDecodeEnvelope(f *testing.F) {
	f.Add(encodeEnvelope(envelope{node: "n", seq: 1, m: channels.Message{AppID: "a", Channel: "c", Except: "1.1", Frame: []byte("x"), Cacheable: true}}))
	f.Add(encodeEnvelope(envelope{node: "n", seq: 2, echo: true, epoch: "e", m: channels.Message{AppID: "a", Channel: "c", Frame: []byte("x"), Recovery: &channels.HistoryLimits{}}}))
	f.Fuzz(func(t *testing.T, p []byte) {
		e, ok := decodeEnvelope(p)
		if !ok {
			return
		}
		e2, ok := decodeEnvelope(encodeEnvelope(e))
		if !ok || !sameEnvelope(e, e2) {
			t.Fatalf("re-encoding %q changed it", p)
		}
	})
}

func TestSeqFilter(t *testing.T) {
	f := newSeqFilter()
	steps := []struct {
		node string
		seq  uint64
		want bool
	}{{"a", 1, true}, {"a", 2, true}, {"a", 2, false}, {"a", 1, false}, {"b", 1, true}, {"a", 5, true}, {"a", 3, false}}
	for _, s := range steps {
		if got := f.fresh(s.node, s.seq); got != s.want {
			t.Fatalf("fresh(%s, %d) = %v, want %v", s.node, s.seq, got, s.want)
		}
	}
}

type sink struct{ got chan string }

func (s sink) SocketID() string { return "1.1" }
func (s sink) Send(f []byte)    { s.got <- string(f) }

// TestRedisBrokerOutage: while Redis is down a publish reaches local sockets at once and
// succeeds; once Redis is back the queued publish reaches the other node exactly once (the
// writer's retries carry the same sequence number) and the receive loop has resubscribed.
func TestRedisBrokerOutage(t *testing.T) {
	mr := miniredis.RunT(t)
	ctx := context.Background()
	var regs [2]*channels.Registry
	var sinks [2]sink
	for i := range regs {
		rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1})
		t.Cleanup(func() { _ = rdb.Close() })
		b, err := NewRedisBroker(ctx, rdb, RedisBrokerOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		regs[i] = channels.NewRegistry(channels.Options{Broker: b})
		b.Start(regs[i].DeliverLocal)
		sinks[i] = sink{make(chan string, 100)}
		regs[i].Subscribe("app", "c", sinks[i])
		if err := regs[i].AwaitRouted(ctx, "app", "c"); err != nil { // as a client is told
			t.Fatal(err)
		}
	}
	addr := mr.Addr()
	mr.Close()
	if err := regs[0].Publish(ctx, channels.Message{AppID: "app", Channel: "c", Frame: []byte("down")}); err != nil {
		t.Fatalf("publish during an outage: %v", err)
	}
	if got := <-sinks[0].got; got != "down" {
		t.Fatalf("local socket got %q", got)
	}
	testutil.WaitFor(t, "the writer to notice the outage", func() bool { return !regs[0].Broker().(*RedisBroker).Healthy() })
	if err := mr.StartAddr(addr); err != nil {
		t.Fatal(err)
	}
	// Poll: republish until node B's loop has redialled and resubscribed; "down" was queued
	// while B was unsubscribed too, so B may or may not see it, but never twice.
	deadline := time.Now().Add(15 * time.Second)
	seen := map[string]int{}
	for seen["up"] == 0 {
		_ = regs[0].Publish(ctx, channels.Message{AppID: "app", Channel: "c", Frame: []byte("up")})
		select {
		case got := <-sinks[1].got:
			seen[got]++
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("node B never resubscribed")
		}
	}
	if seen["down"] > 1 {
		t.Fatalf("node B got the outage publish %d times", seen["down"])
	}
	testutil.WaitFor(t, "node B healthy", func() bool { return regs[1].Broker().(*RedisBroker).Healthy() })
}

// TestRedisBrokerBacklogFull: once the backlog bound is reached, Publish refuses and does
// NOT deliver locally, so an HTTP 503 never follows a local delivery.
func TestRedisBrokerBacklogFull(t *testing.T) {
	mr := miniredis.RunT(t)
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	b, err := NewRedisBroker(ctx, rdb, RedisBrokerOptions{MaxBacklog: 1000})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	reg := channels.NewRegistry(channels.Options{Broker: b})
	b.Start(reg.DeliverLocal)
	s := sink{make(chan string, 100)}
	reg.Subscribe("app", "c", s)
	mr.Close()
	frame := strings.Repeat("x", 300)
	accepted, refused := 0, 0
	for range 10 {
		switch err := reg.Publish(ctx, channels.Message{AppID: "app", Channel: "c", Frame: []byte(frame)}); err {
		case nil:
			accepted++
		case ErrBacklog:
			refused++
		default:
			t.Fatal(err)
		}
	}
	if refused == 0 || accepted == 0 {
		t.Fatalf("accepted %d refused %d", accepted, refused)
	}
	if len(s.got) != accepted {
		t.Fatalf("local deliveries %d, accepted publishes %d", len(s.got), accepted)
	}
	// A request naming several channels is all or nothing.
	b2, err := NewRedisBroker(ctx, rdb, RedisBrokerOptions{MaxBacklog: 1000})
	if err == nil {
		t.Fatal("subscribed to a closed Redis")
	}
	t.Cleanup(func() { _ = b2.Close() })
	reg2 := channels.NewRegistry(channels.Options{Broker: b2})
	b2.Start(reg2.DeliverLocal)
	s2 := sink{make(chan string, 100)}
	reg2.Subscribe("app", "c", s2)
	three := []channels.Message{{AppID: "app", Channel: "c", Frame: []byte(frame)}, {AppID: "app", Channel: "c", Frame: []byte(frame)}, {AppID: "app", Channel: "c", Frame: []byte(frame)}}
	if err := reg2.PublishAll(ctx, three); err != ErrBacklog {
		t.Fatalf("three messages over the bound: %v", err)
	}
	if err := reg2.PublishAll(ctx, three[:2]); err != nil {
		t.Fatalf("two messages within the bound: %v", err)
	}
	if len(s2.got) != 2 {
		t.Fatalf("local deliveries %d, want exactly the 2 accepted", len(s2.got))
	}
}
