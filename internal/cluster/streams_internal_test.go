package cluster

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/reverbgo/reverbgo/channels"
	"github.com/reverbgo/reverbgo/internal/testutil"
	"github.com/reverbgo/reverbgo/ws"
)

// A gap the history cannot be read for (Redis does not answer) is held for at most
// fillBound, then told as too_old at the position before the first held event, and the
// held events follow in order: the channel is never stuck and nothing is skipped in
// silence.
func TestStreamTellsAGapTheHistoryCannotFill(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	var mu sync.Mutex
	var got []string
	deliver := func(m channels.Message) int {
		mu.Lock()
		got = append(got, strconv.FormatUint(channels.SerialOf(m.Frame), 10))
		mu.Unlock()
		return 1
	}
	told := func(app, ch, reason, epoch string, serial uint64) {
		mu.Lock()
		got = append(got, fmt.Sprintf("told %s %s %d", reason, epoch, serial))
		mu.Unlock()
	}
	lim := channels.HistoryLimits{Size: 10, TTL: time.Minute}
	s := newStreams(NewRedisHistory(rdb, NewKeySpace("t", true)), func(string, string) (channels.HistoryLimits, bool) { return lim, true },
		told, slog.New(slog.NewTextHandler(io.Discard, nil)), deliver)
	frame := func(n uint64) channels.Message {
		return channels.Message{AppID: "app", Channel: "c", Frame: channels.AppendSerial(ws.TextFrame([]byte(`{"event":"e","channel":"c","data":"x"}`)), n)}
	}
	s.want("app", "c") // its first local subscriber
	s.Seed("app", "c", channels.Position{Epoch: "E", Serial: 1})
	mr.Close() // Redis stops answering
	start := time.Now()
	s.receive(frame(3), "E") // 2 is missing: a gap
	s.receive(frame(4), "E") // held behind it
	deadline := time.Now().Add(fillBound + 5*time.Second)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n >= 3 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"told too_old E 2", "3", "4"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	if took := time.Since(start); took < fillBound-time.Second {
		t.Fatalf("told after %v, before the fill's bound", took)
	}
}

// probeStreams is a streams on miniredis whose deliveries and tells go to log.
func probeStreams(t *testing.T, log *probeLog) (*streams, *RedisHistory, *miniredis.Miniredis, channels.HistoryLimits) {
	t.Helper()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	lim := channels.HistoryLimits{Size: 10, TTL: time.Minute}
	h := NewRedisHistory(rdb, NewKeySpace("t", true))
	told := func(app, ch, reason, epoch string, serial uint64) {
		log.add(fmt.Sprintf("told %s %s %d", reason, epoch, serial))
	}
	deliver := func(m channels.Message) int { log.add(strconv.FormatUint(channels.SerialOf(m.Frame), 10)); return 1 }
	s := newStreams(h, func(string, string) (channels.HistoryLimits, bool) { return lim, true }, told, slog.New(slog.NewTextHandler(io.Discard, nil)), deliver)
	return s, h, mr, lim
}

type probeLog struct {
	mu  sync.Mutex
	got []string
}

func (l *probeLog) add(s string) { l.mu.Lock(); l.got = append(l.got, s); l.mu.Unlock() }
func (l *probeLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.got...)
}

func appendN(t *testing.T, h *RedisHistory, lim channels.HistoryLimits, n int) {
	t.Helper()
	for i := 1; i <= n; i++ {
		if _, _, err := h.Append(context.Background(), "app", "c", lim, "", ws.TextFrame([]byte(`{"event":"e","channel":"c","data":"`+strconv.Itoa(i)+`"}`)), nil); err != nil {
			t.Fatal(err)
		}
	}
}

// A frame of an epoch the stream never knew (an older one, late) is dropped once a history
// read found the channel at its current epoch: before, every read stepped it again and
// started another, without end.
func TestStreamStaleEpochFrameEndsItsFill(t *testing.T) {
	log := &probeLog{}
	s, h, mr, lim := probeStreams(t, log)
	appendN(t, h, lim, 5)
	pos, err := h.Position(context.Background(), "app", "c", lim)
	if err != nil {
		t.Fatal(err)
	}
	s.want("app", "c")
	s.Seed("app", "c", pos)
	before := mr.CommandCount()
	s.receive(channels.Message{AppID: "app", Channel: "c", Frame: channels.AppendSerial(ws.TextFrame([]byte(`{"event":"e","channel":"c","data":"x"}`)), 3)}, "an-older-epoch")
	st := s.get("app", "c")
	deadline := time.Now().Add(2 * time.Second)
	for {
		st.mu.Lock()
		filling := st.filling
		st.mu.Unlock()
		if !filling {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still filling after 2 s: %d Redis commands", mr.CommandCount()-before)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := mr.CommandCount() - before; n > 10 {
		t.Fatalf("%d Redis commands for one stale frame", n)
	}
}

// After a new epoch the hashes kept for telling a reused serial are the old epoch's: a
// serial of the new one at or below the position is not taken for a reuse (which rotated a
// healthy epoch and told every socket twice).
func TestStreamNewEpochForgetsOldFrames(t *testing.T) {
	log := &probeLog{}
	s, h, mr, lim := probeStreams(t, log)
	s.want("app", "c")
	s.Seed("app", "c", channels.Position{Epoch: "E1", Serial: 0})
	for i := uint64(1); i <= 20; i++ {
		s.receive(channels.Message{AppID: "app", Channel: "c", Frame: channels.AppendSerial(ws.TextFrame([]byte(`{"event":"e1","channel":"c"}`)), i)}, "E1")
	}
	appendN(t, h, lim, 30) // Redis lost E1: a new epoch, 30 events, 10 kept
	_, ek, _, _ := h.keys.HistoryKeys("app", "c")
	e2, _ := mr.Get(ek)
	_, evs, _, err := h.Since(context.Background(), "app", "c", lim, 20) // 21..30
	if err != nil || len(evs) != 10 {
		t.Fatal(len(evs), err)
	}
	s.receive(channels.Message{AppID: "app", Channel: "c", Frame: evs[0].Frame}, e2) // E2:21 (1..20 missed)
	testutil.WaitFor(t, "the new epoch told", func() bool { return len(log.all()) > 20 })
	time.Sleep(200 * time.Millisecond)
	if now, _ := mr.Get(ek); now != e2 {
		t.Fatalf("the healthy epoch %s was rotated to %s; log %v", e2, now, log.all()[20:])
	}
}

// A fill of a stream that ended (its channel's last local subscriber left) delivers nothing
// to the channel's next subscriber, whose stream is a new one: before, it replayed old
// serials after newer ones.
func TestStreamEndedFillDeliversNothing(t *testing.T) {
	log := &probeLog{}
	s, h, _, lim := probeStreams(t, log)
	appendN(t, h, lim, 6)
	_, evs, _, _ := h.Since(context.Background(), "app", "c", lim, 0)
	pos, _ := h.Position(context.Background(), "app", "c", lim)
	s.want("app", "c")
	s.Seed("app", "c", channels.Position{Epoch: pos.Epoch, Serial: 1})
	old := s.get("app", "c")
	s.receive(channels.Message{AppID: "app", Channel: "c", Frame: evs[2].Frame}, pos.Epoch) // 3: a gap, a fill starts
	old.mu.Lock()                                                                           // the fill is slow
	s.drop("app", "c")                                                                      // the last subscriber left
	s.want("app", "c")                                                                      // a new one subscribed at 5
	s.Seed("app", "c", channels.Position{Epoch: pos.Epoch, Serial: 5})
	s.receive(channels.Message{AppID: "app", Channel: "c", Frame: evs[5].Frame}, pos.Epoch) // 6 through the new stream
	old.mu.Unlock()
	time.Sleep(300 * time.Millisecond)
	if got := log.all(); fmt.Sprint(got) != "[6]" {
		t.Fatalf("delivered %v, want [6]", got)
	}
}

// The channel's first event here and its first subscriber's position race: the event
// starts the stream under its lock and the position is then ignored, so the next event
// follows without a fill that would deliver the first one again.
func TestStreamFirstEventRacesTheSeed(t *testing.T) {
	log := &probeLog{}
	s, h, _, lim := probeStreams(t, log)
	appendN(t, h, lim, 12)
	pos, _ := h.Position(context.Background(), "app", "c", lim)
	_, evs, _, _ := h.Since(context.Background(), "app", "c", lim, 10)
	s.want("app", "c")
	s.receive(channels.Message{AppID: "app", Channel: "c", Frame: evs[0].Frame}, pos.Epoch) // 11, before the seed
	s.Seed("app", "c", channels.Position{Epoch: pos.Epoch, Serial: 10})                     // read before 11 was appended
	s.receive(channels.Message{AppID: "app", Channel: "c", Frame: evs[1].Frame}, pos.Epoch) // 12
	time.Sleep(300 * time.Millisecond)
	if got := log.all(); fmt.Sprint(got) != "[11 12]" {
		t.Fatalf("delivered %v, want [11 12]", got)
	}
}
