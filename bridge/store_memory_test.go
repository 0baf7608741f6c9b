package bridge_test

import (
	"encoding/json"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/reverbgo/reverbgo/bridge"
	"github.com/reverbgo/reverbgo/bridge/storetest"
)

func TestMemoryStore(t *testing.T) {
	storetest.Run(t, func(t *testing.T) bridge.Store {
		s := bridge.NewMemoryStore(bridge.MemoryOptions{SweepInterval: 20 * time.Millisecond})
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}

// TestMemoryStoreSweepBoundsMemory checks that expired entries are dropped by the sweeper
// even when nobody reads them again.
func TestMemoryStoreSweepBoundsMemory(t *testing.T) {
	now := time.Unix(1000, 0)
	var clock = func() time.Time { return now }
	s := bridge.NewMemoryStore(bridge.MemoryOptions{Now: clock, SweepInterval: -1})
	defer s.Close()
	ctx := t.Context()
	k := bridge.ConvKey{App: "a", User: "u", Conversation: "c"}
	if _, err := s.PutManifest(ctx, k, bridge.Manifest{ClientID: "x"}, time.Second); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100; i++ {
		b := bridge.Binding{ID: string(rune('a'+i%26)) + time.Duration(i).String(), Key: k, Deadline: now}
		if err := s.Bind(ctx, b, time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if m, c, _ := s.Len(); m != 1 || c != 100 {
		t.Fatalf("Len = %d, %d", m, c)
	}
	now = now.Add(2 * time.Second)
	s.Sweep()
	if m, c, f := s.Len(); m+c+f != 0 {
		t.Fatalf("after sweep Len = %d, %d, %d", m, c, f)
	}
}

func TestMemoryStoreMaxEntries(t *testing.T) {
	s := bridge.NewMemoryStore(bridge.MemoryOptions{MaxEntries: 2, SweepInterval: -1})
	defer s.Close()
	ctx := t.Context()
	for i, want := range []error{nil, nil, bridge.ErrStoreFull} {
		err := s.Bind(ctx, bridge.Binding{ID: string(rune('a' + i)), Deadline: time.Now().Add(time.Hour)}, time.Hour)
		if err != want {
			t.Fatalf("Bind #%d = %v, want %v", i, err, want)
		}
	}
}

// TestMemoryStoreTombstones: a settled call shrinks to a tomb that answers 409 until LateGrace
// after settling (bounded by the binding's TTL), then 404; tombs never count against
// MaxEntries, and over MaxTombstones the oldest goes first.
func TestMemoryStoreTombstones(t *testing.T) {
	start := time.Unix(1000, 0)
	k := bridge.ConvKey{App: "a", User: "u", Conversation: "c"}
	for _, tc := range []struct {
		name      string
		settleAt  time.Duration // after Bind
		checkAt   time.Duration // after Bind
		maxTombs  int
		calls     int // bound and settled in order; the last one is checked
		checkID   int
		wantClaim bridge.ClaimOutcome
	}{
		// timeout 30 s, grace 60 s: TTL 90 s.
		{"answered early, within grace", time.Second, 60 * time.Second, 0, 1, 0, bridge.ClaimDuplicate},
		{"answered early, grace over", time.Second, 62 * time.Second, 0, 1, 0, bridge.ClaimNotFound},
		{"timed out, within grace", 30 * time.Second, 89 * time.Second, 0, 1, 0, bridge.ClaimTimedOut},
		{"timed out, grace over", 30 * time.Second, 91 * time.Second, 0, 1, 0, bridge.ClaimNotFound},
		{"cap keeps the newest", time.Second, 2 * time.Second, 3, 5, 4, bridge.ClaimDuplicate},
		{"cap drops the oldest", time.Second, 2 * time.Second, 3, 5, 1, bridge.ClaimNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := start
			s := bridge.NewMemoryStore(bridge.MemoryOptions{Now: func() time.Time { return now },
				SweepInterval: -1, MaxEntries: 2, MaxTombstones: tc.maxTombs})
			defer s.Close()
			ctx := t.Context()
			for i := 0; i < tc.calls; i++ {
				now = start
				id := fmt.Sprint("call", i)
				b := bridge.Binding{ID: id, Key: k, ClientID: "x", Kind: bridge.KindCall, Deadline: now.Add(30 * time.Second)}
				if err := s.Bind(ctx, b, 90*time.Second); err != nil { // MaxEntries 2: only open calls count
					t.Fatalf("Bind %d: %v", i, err)
				}
				now = start.Add(tc.settleAt)
				if tc.wantClaim != bridge.ClaimTimedOut {
					if o, err := s.ClaimResult(ctx, id, json.RawMessage(`{"status":"ok"}`), now, nil, time.Hour); err != nil || o != bridge.Claimed {
						t.Fatalf("ClaimResult %d = %v, %v", i, o, err)
					}
				}
				if _, _, err := s.ClaimTimeout(ctx, id); err != nil {
					t.Fatal(err)
				}
			}
			now = start.Add(tc.checkAt)
			s.Sweep()
			id := fmt.Sprint("call", tc.checkID)
			o, err := s.ClaimResult(ctx, id, json.RawMessage(`{"status":"ok"}`), now, nil, time.Hour)
			if err != nil || o != tc.wantClaim {
				t.Fatalf("claim = %v, %v; want %v", o, err, tc.wantClaim)
			}
			b, _ := s.GetBinding(ctx, id)
			if (b != nil) != (tc.wantClaim != bridge.ClaimNotFound) {
				t.Fatalf("binding %+v", b)
			}
			if tc.maxTombs > 0 && s.Tombstones() > tc.maxTombs {
				t.Fatalf("%d tombstones over the cap %d", s.Tombstones(), tc.maxTombs)
			}
		})
	}
}

// TestMemoryStoreFootprint measures the retained heap per open call and per tombstone (the
// figures in MemoryStore's doc comment) and guards them against regressions. Tombstones are
// measured on their own: calls bound and settled one at a time, as at a steady rate.
func TestMemoryStoreFootprint(t *testing.T) {
	const n = 20000
	ctx := t.Context()
	heap := func() uint64 {
		var ms runtime.MemStats
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	ids := make([]string, n)
	for i := range ids {
		ids[i] = uuid.NewString()
	}
	bind := func(s *bridge.MemoryStore, id string) {
		// Strings as decodeCallRequest makes them: fresh per call.
		b := bridge.Binding{ID: id, Key: bridge.ConvKey{App: "app1", User: string([]byte("user-1")),
			Conversation: string([]byte("conversation-1"))}, ClientID: "k7c1e0de-0000-4000-8000-000000000001",
			Kind: bridge.KindCall, Tool: string([]byte("form.fill")), ToolUseID: string([]byte("toolu_01ABCDEFGHIJ")),
			Deadline: time.Now().Add(30 * time.Second)}
		if err := s.Bind(ctx, b, 90*time.Second); err != nil {
			t.Fatal(err)
		}
		s.Watch(id)
		if _, err := s.ClaimResult(ctx, id, json.RawMessage(`{"data":{"n":1},"status":"ok"}`), time.Now(), nil, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	per := func(f func(s *bridge.MemoryStore)) float64 {
		s := bridge.NewMemoryStore(bridge.MemoryOptions{SweepInterval: -1})
		defer s.Close()
		base := heap()
		f(s)
		used := float64(int64(heap())-int64(base)) / n
		runtime.KeepAlive(s)
		return used
	}
	perOpen := per(func(s *bridge.MemoryStore) {
		for _, id := range ids {
			bind(s, id)
		}
	})
	perTomb := per(func(s *bridge.MemoryStore) {
		for _, id := range ids {
			bind(s, id)
			if _, _, err := s.ClaimTimeout(ctx, id); err != nil {
				t.Fatal(err)
			}
		}
	})
	t.Logf("retained heap: %.0f B per open (answered, watched) call, %.0f B per tombstone", perOpen, perTomb)
	if perTomb > 160 || perOpen > 1024 {
		t.Fatalf("footprint grew: %.0f B per open call, %.0f B per tombstone", perOpen, perTomb)
	}
	runtime.KeepAlive(ids)
}
