package channelstest

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/reverbgo/reverbgo/internal/cluster"
	"github.com/reverbgo/reverbgo/internal/testutil"
)

// NewNode returns node id's registry on the case's shared backend (one per case: every call
// within one case reaches the same nodes); the suite closes what it does not close itself.
type NewNode func(t *testing.T, id string, timeout time.Duration) cluster.NodeRegistry

// stateLog records what a registry asked of one NodeState.
type stateLog struct {
	mu      sync.Mutex
	reaped  []string
	resyncs int
	closing int
	fail    int // Reap calls still to fail
}

func (l *stateLog) state() cluster.NodeState {
	return cluster.NodeState{
		Reap: func(_ context.Context, node string, _ time.Time) error {
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.fail > 0 {
				l.fail--
				return errors.New("reap failed midway")
			}
			l.reaped = append(l.reaped, node)
			return nil
		},
		Resync:  func(context.Context) error { l.mu.Lock(); l.resyncs++; l.mu.Unlock(); return nil },
		Closing: func(context.Context) { l.mu.Lock(); l.closing++; l.mu.Unlock() },
	}
}

func (l *stateLog) get() (reaped []string, resyncs, closing int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.reaped), l.resyncs, l.closing
}

// RunNodeRegistry is the NodeRegistry contract, run against every implementation: liveness,
// the reap of a dead node (once, resumed after a reaper's failure), the resync of a node the
// registry lost, and Close reaping the node itself.
func RunNodeRegistry(t *testing.T, newNode NewNode) {
	ctx := context.Background()
	const timeout = 1500 * time.Millisecond // 1.2 s of silence is death: margin for a loaded machine
	live := func(t *testing.T, r cluster.NodeRegistry) []string {
		t.Helper()
		ids, err := r.LiveNodes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(ids)
		return ids
	}
	beat := func(t *testing.T, r cluster.NodeRegistry) {
		t.Helper()
		if err := r.Heartbeat(ctx); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("live nodes", func(t *testing.T) {
		a, b, c := newNode(t, "a", timeout), newNode(t, "b", timeout), newNode(t, "c", timeout)
		beat(t, a)
		beat(t, b)
		if got := live(t, a); !slices.Equal(got, []string{"a", "b"}) {
			t.Fatalf("a sees %q", got)
		}
		if got := live(t, c); !slices.Equal(got, []string{"a", "b", "c"}) {
			t.Fatalf("c, never heartbeated, sees %q (itself always included)", got)
		}
		if a.NodeID() != "a" {
			t.Fatalf("NodeID %q", a.NodeID())
		}
	})

	t.Run("a dead node is reaped once, and resyncs when it comes back", func(t *testing.T) {
		a, b := newNode(t, "a", timeout), newNode(t, "b", timeout)
		var la, lb stateLog
		a.Track(la.state())
		b.Track(lb.state())
		beat(t, a)
		beat(t, b) // then b goes silent
		if _, resyncs, _ := lb.get(); resyncs != 1 {
			t.Fatalf("a new node resyncs once: %d", resyncs)
		}
		testutil.WaitFor(t, "b reaped by a", func() bool {
			beat(t, a)
			reaped, _, _ := la.get()
			return len(reaped) > 0
		})
		beat(t, a)
		if reaped, _, _ := la.get(); !slices.Equal(reaped, []string{"b"}) {
			t.Fatalf("reaped %q, want b once", reaped)
		}
		if got := live(t, a); !slices.Equal(got, []string{"a"}) {
			t.Fatalf("after the reap a sees %q", got)
		}
		beat(t, b) // b wakes up: the registry had lost it
		if _, resyncs, _ := lb.get(); resyncs != 2 {
			t.Fatalf("b resynced %d times, want 2", resyncs)
		}
		beat(t, b)
		if _, resyncs, _ := lb.get(); resyncs != 2 {
			t.Fatalf("a listed node resyncs again: %d", resyncs)
		}
		if got := live(t, a); !slices.Equal(got, []string{"a", "b"}) {
			t.Fatalf("b back: a sees %q", got)
		}
	})

	t.Run("a reap that fails midway is resumed", func(t *testing.T) {
		a, b := newNode(t, "a", timeout), newNode(t, "b", timeout)
		var la stateLog
		la.fail = 1
		a.Track(la.state())
		beat(t, a)
		beat(t, b)
		testutil.WaitFor(t, "b dead", func() bool {
			_ = a.Heartbeat(ctx) // the first reap fails
			return !slices.Contains(live(t, a), "b")
		})
		testutil.WaitFor(t, "b reaped", func() bool {
			_ = a.Heartbeat(ctx)
			reaped, _, _ := la.get()
			return slices.Equal(reaped, []string{"b"})
		})
	})

	t.Run("close reaps the node itself", func(t *testing.T) {
		a, b := newNode(t, "a", timeout), newNode(t, "b", timeout)
		var la stateLog
		a.Track(la.state())
		beat(t, a)
		beat(t, b)
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
		if reaped, _, closing := la.get(); !slices.Equal(reaped, []string{"a"}) || closing != 1 {
			t.Fatalf("close: reaped %q closing %d", reaped, closing)
		}
		if got := live(t, b); !slices.Equal(got, []string{"b"}) {
			t.Fatalf("after a's close b sees %q", got)
		}
		if err := a.Heartbeat(ctx); !errors.Is(err, cluster.ErrNodeClosed) {
			t.Fatalf("heartbeat after close: %v", err)
		}
	})
}
