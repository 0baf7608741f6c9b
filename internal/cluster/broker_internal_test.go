package cluster

import (
	"context"
	"encoding/binary"
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
		{node: "n1", m: channels.Message{AppID: "app", Channel: "presence-x", Except: "1.2", Frame: []byte("\x81\x02{}"), Member: channels.MemberEvent{Kind: channels.MemberAdded, UserID: "u\x00\x01" + strings.Repeat("é", 200)}}},
		{node: "n1", m: channels.Message{AppID: "app", Channel: "presence-x", Frame: []byte("f"), Member: channels.MemberEvent{Kind: channels.MemberRemoved}}},
		{node: "n1", echo: true, epoch: "e", m: channels.Message{AppID: "app", Channel: "c", Except: "3.4", Frame: []byte("f"), Recovery: &channels.HistoryLimits{Size: 5}, Member: channels.MemberEvent{Kind: channels.MemberRemoved, UserID: "7"}}},
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
		a.m.Cacheable == b.m.Cacheable && (a.m.Recovery != nil) == (b.m.Recovery != nil) && a.m.Member == b.m.Member
}

// envelopeGolden are envelopes as the encoder wrote them before member events carried
// their meaning (captured from that code): a node of this version reads them, and writes
// every message that is not a member event byte for byte the same.
var envelopeGolden = []struct {
	wire string
	e    envelope
}{
	{"rg2\x00\a\x02n1\x03app\x04news\x00\x81\x03abc",
		envelope{node: "n1", seq: 7, m: channels.Message{AppID: "app", Channel: "news", Frame: []byte("\x81\x03abc")}}},
	{"rg2\x05\xac\x02\x06node-b\x011\acache-x\a123.456\x81\x02{}",
		envelope{node: "node-b", seq: 300, echo: true, m: channels.Message{AppID: "1", Channel: "cache-x", Except: "123.456", Frame: []byte("\x81\x02{}"), Cacheable: true}}},
	{"rg3\x06\x80\x80\x80\x80\x80 \x02n1\x03app\x01c\x00\x03e-1f",
		envelope{node: "n1", seq: 1 << 40, echo: true, epoch: "e-1", m: channels.Message{AppID: "app", Channel: "c", Frame: []byte("f"), Recovery: &channels.HistoryLimits{Size: 5}}}},
	{"rg2\x00\t\x02n2\x011\npresence-x\x037.8\x81\x05{\"a\"}",
		envelope{node: "n2", seq: 9, m: channels.Message{AppID: "1", Channel: "presence-x", Except: "7.8", Frame: []byte("\x81\x05{\"a\"}")}}},
}

// TestEnvelopeGolden: during a rolling upgrade this version reads what the previous one
// writes, and writes what it writes for every message that is not a member event.
func TestEnvelopeGolden(t *testing.T) {
	for _, g := range envelopeGolden {
		got, ok := decodeEnvelope([]byte(g.wire))
		if !ok || !sameEnvelope(got, g.e) {
			t.Errorf("decoding %q: %v %+v", g.wire, ok, got)
		}
		if enc := encodeEnvelope(g.e); string(enc) != g.wire {
			t.Errorf("encoding %+v:\n got %q\nwant %q", g.e, enc, g.wire)
		}
	}
}

// decodeEnvelopePrevious is the decoder of the previous version, kept as it was: what a node
// not yet upgraded does with this version's envelopes.
func decodeEnvelopePrevious(p []byte) (e envelope, ok bool) {
	if len(p) < len(envelopeMagic)+1 {
		return e, false
	}
	v3 := string(p[:len(envelopeMagicV3)]) == envelopeMagicV3
	if !v3 && string(p[:len(envelopeMagic)]) != envelopeMagic {
		return e, false
	}
	flags := p[len(envelopeMagic)]
	if v3 != (flags&flagSerialled != 0) {
		return e, false
	}
	p = p[len(envelopeMagic)+1:]
	seq, w := binary.Uvarint(p)
	if w <= 0 {
		return e, false
	}
	p = p[w:]
	var fields [4]string
	for i := range fields {
		n, w := binary.Uvarint(p)
		if w <= 0 || n > uint64(len(p)-w) {
			return e, false
		}
		fields[i] = string(p[w : w+int(n)])
		p = p[w+int(n):]
	}
	e = envelope{node: fields[0], seq: seq, echo: flags&(flagEcho|flagSerialled) != 0}
	if v3 {
		if len(p) < 1 || int(p[0]) > len(p)-1 {
			return envelope{}, false
		}
		e.epoch = string(p[1 : 1+int(p[0])])
		p = p[1+int(p[0]):]
	}
	e.m = channels.Message{AppID: fields[1], Channel: fields[2], Except: fields[3], Frame: p, Cacheable: flags&flagCacheable != 0}
	if v3 {
		e.m.Recovery = &serialled
	}
	return e, true
}

// TestEnvelopeMemberReadByPreviousVersion: a node not yet upgraded keeps every member event
// this version writes and delivers it as before: the same node, sequence, app, channel and
// frame (from which it reads the user id itself), and an except value that can name none of
// its sockets (the except socket is the publisher's own; a socket id never starts with a
// control byte), so every local subscriber gets the event.
func TestEnvelopeMemberReadByPreviousVersion(t *testing.T) {
	for _, e := range []envelope{
		{node: "n1", seq: 5, m: channels.Message{AppID: "app", Channel: "presence-x", Except: "123.456", Frame: []byte("\x81\x02{}"), Member: channels.MemberEvent{Kind: channels.MemberAdded, UserID: "u1"}}},
		{node: "n1", seq: 6, m: channels.Message{AppID: "app", Channel: "presence-x", Frame: []byte("\x81\x02{}"), Member: channels.MemberEvent{Kind: channels.MemberRemoved, UserID: "123.456"}}},
	} {
		old, ok := decodeEnvelopePrevious(encodeEnvelope(e))
		if !ok {
			t.Fatalf("the previous version drops %+v", e)
		}
		if old.node != e.node || old.seq != e.seq || old.echo || old.m.AppID != e.m.AppID || old.m.Channel != e.m.Channel ||
			string(old.m.Frame) != string(e.m.Frame) || old.m.Cacheable || old.m.Recovery != nil {
			t.Fatalf("the previous version reads %+v as %+v", e, old)
		}
		if old.m.Except == "" || old.m.Except[0] >= '0' || old.m.Except == e.m.Except || old.m.Except == e.m.Member.UserID {
			t.Fatalf("the previous version reads except %q", old.m.Except)
		}
	}
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
		[]byte("rg3\x02\x01\x00\x00\x00\x00\x05ab"),     // the epoch longer than the rest
		[]byte("rg3\x00\x01\x00\x00\x00\x00\x00f"),      // rg3 without the serialled flag
		[]byte("rg2\x02\x01\x00\x00\x00\x00f"),          // serialled without rg3
		[]byte("rg2\x08\x01\x00\x00\x00\x00f"),          // a member event without its kind
		[]byte("rg2\x08\x01\x00\x00\x00\x02\x03\x00f"),  // an unknown member kind
		[]byte("rg2\x08\x01\x00\x00\x00\x03\x01\x05uf"), // a user id longer than the field
	} {
		if _, ok := decodeEnvelope(p); ok {
			t.Fatalf("accepted %q", p)
		}
	}
}

func FuzzDecodeEnvelope(f *testing.F) {
	f.Add(encodeEnvelope(envelope{node: "n", seq: 1, m: channels.Message{AppID: "a", Channel: "c", Except: "1.1", Frame: []byte("x"), Cacheable: true}}))
	f.Add(encodeEnvelope(envelope{node: "n", seq: 2, echo: true, epoch: "e", m: channels.Message{AppID: "a", Channel: "c", Frame: []byte("x"), Recovery: &channels.HistoryLimits{}}}))
	f.Add(encodeEnvelope(envelope{node: "n", seq: 3, m: channels.Message{AppID: "a", Channel: "presence-c", Except: "1.1", Frame: []byte("x"), Member: channels.MemberEvent{Kind: channels.MemberAdded, UserID: "u"}}}))
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
