package asynclog

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// sink records every write to it; gate, when set, holds each write until it is closed.
type sink struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	writes int
	gate   chan struct{}
	err    error
}

func (s *sink) Write(p []byte) (int, error) {
	if s.gate != nil {
		<-s.gate
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes++
	s.buf.Write(p)
	return len(p), s.err
}

func (s *sink) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestOrderAndBatching(t *testing.T) {
	s := &sink{}
	w := New(s, Options{Delay: 20 * time.Millisecond})
	const writers, lines = 8, 500
	var wg sync.WaitGroup
	for g := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range lines {
				fmt.Fprintf(w, "g%d %d\n", g, i)
			}
		}()
	}
	wg.Wait()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	next := make([]int, writers)
	got := strings.Split(strings.TrimSuffix(s.String(), "\n"), "\n")
	if len(got) != writers*lines {
		t.Fatalf("%d lines, want %d", len(got), writers*lines)
	}
	for _, l := range got {
		var g, i int
		if _, err := fmt.Sscanf(l, "g%d %d", &g, &i); err != nil {
			t.Fatalf("torn line %q: %v", l, err)
		}
		if i != next[g] {
			t.Fatalf("writer %d: line %d after %d", g, i, next[g]-1)
		}
		next[g]++
	}
	st := w.Stats()
	if st.Writes != writers*lines || st.Flushes >= st.Writes/10 {
		t.Fatalf("stats %+v: want every write buffered and at least 10 lines per flush", st)
	}
}

func TestDelayedNotLost(t *testing.T) {
	s := &sink{}
	w := New(s, Options{Delay: time.Millisecond})
	defer w.Close()
	_, _ = w.Write([]byte("one\n"))
	waitFor(t, "the drain to write a line without Close", func() bool { return s.String() == "one\n" })
}

func TestCloseFlushesAndPassesThrough(t *testing.T) {
	s := &sink{}
	w := New(s, Options{Delay: time.Hour})
	_, _ = w.Write([]byte("a\n"))
	_, _ = w.Write([]byte("b\n"))
	if s.String() != "" {
		t.Fatalf("written before the delay: %q", s.String())
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if s.String() != "a\nb\n" {
		t.Fatalf("after Close: %q", s.String())
	}
	_, _ = w.Write([]byte("c\n"))
	if s.String() != "a\nb\nc\n" {
		t.Fatalf("write after Close: %q", s.String())
	}
	if err := w.Close(); err != nil {
		t.Fatal("second Close:", err)
	}
}

// TestBoundBlocks holds the underlying writer: the buffer fills to its bound, then Write
// blocks (counted) instead of growing or dropping; releasing the writer lets every line out.
func TestBoundBlocks(t *testing.T) {
	s := &sink{gate: make(chan struct{})}
	w := New(s, Options{MaxBuffer: 64, Delay: time.Millisecond})
	line := []byte("0123456789abcde\n") // 16 bytes
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 20 {
			_, _ = w.Write(line)
		}
	}()
	waitFor(t, "a blocked write", func() bool { return w.Stats().Blocked > 0 })
	select {
	case <-done:
		t.Fatal("20 lines fit a 64-byte bound with the underlying writer held")
	default:
	}
	w.mu.Lock()
	held := len(w.buf)
	w.mu.Unlock()
	if held > 64 {
		t.Fatalf("%d bytes buffered over a bound of 64", held)
	}
	close(s.gate)
	<-done
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if got := s.String(); got != strings.Repeat(string(line), 20) {
		t.Fatalf("lost or reordered lines: %q", got)
	}
}

// TestOversizedLine: a line over the bound still goes out whole.
func TestOversizedLine(t *testing.T) {
	s := &sink{}
	w := New(s, Options{MaxBuffer: 8, Delay: time.Millisecond})
	big := strings.Repeat("x", 100) + "\n"
	_, _ = w.Write([]byte("a\n"))
	_, _ = w.Write([]byte(big))
	_, _ = w.Write([]byte("b\n"))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if s.String() != "a\n"+big+"b\n" {
		t.Fatalf("got %q", s.String())
	}
}

func TestCloseReportsWriteError(t *testing.T) {
	boom := errors.New("boom")
	s := &sink{err: boom}
	w := New(s, Options{Delay: time.Millisecond})
	_, _ = w.Write([]byte("a\n"))
	if err := w.Close(); !errors.Is(err, boom) {
		t.Fatalf("Close = %v, want %v", err, boom)
	}
}

// TestCloseWakesBlockedWriter: a writer blocked on a full buffer when Close runs is not lost.
func TestCloseWakesBlockedWriter(t *testing.T) {
	s := &sink{gate: make(chan struct{})}
	w := New(s, Options{MaxBuffer: 16, Delay: time.Millisecond})
	line := []byte("0123456789abcde\n")
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 4 {
			_, _ = w.Write(line)
		}
	}()
	waitFor(t, "a blocked write", func() bool { return w.Stats().Blocked > 0 })
	closed := make(chan error)
	go func() { closed <- w.Close() }()
	close(s.gate)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	<-done
	if got := s.String(); got != strings.Repeat(string(line), 4) {
		t.Fatalf("got %q", got)
	}
}
