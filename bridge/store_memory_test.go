package bridge_test

import (
	"testing"
	"time"

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
