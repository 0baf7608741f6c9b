package channels

import (
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

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
	deliver := func(m Message) int {
		mu.Lock()
		got = append(got, strconv.FormatUint(SerialOf(m.Frame), 10))
		mu.Unlock()
		return 1
	}
	told := func(app, ch, reason, epoch string, serial uint64) {
		mu.Lock()
		got = append(got, fmt.Sprintf("told %s %s %d", reason, epoch, serial))
		mu.Unlock()
	}
	lim := HistoryLimits{Size: 10, TTL: time.Minute}
	s := newStreams(NewRedisHistory(rdb, NewKeySpace("t", true)), func(string, string) (HistoryLimits, bool) { return lim, true },
		told, slog.New(slog.NewTextHandler(io.Discard, nil)), deliver)
	frame := func(n uint64) Message {
		return Message{AppID: "app", Channel: "c", Frame: AppendSerial(ws.TextFrame([]byte(`{"event":"e","channel":"c","data":"x"}`)), n)}
	}
	s.Seed("app", "c", Position{Epoch: "E", Serial: 1})
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
