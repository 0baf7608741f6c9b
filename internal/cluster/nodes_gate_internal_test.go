package cluster

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/reverbgo/reverbgo/channels"
	"github.com/reverbgo/reverbgo/internal/testutil"
)

// TestJoinRacingTheReaperIsRefused: a survivor reaping node n1 first marks it and (spread
// layout) closes its gate in every bucket; a join of n1 reaching Redis after that, while the
// reap is under way (a paused node's join already on the wire), is refused in either layout,
// so nothing joins under a node about to be unlisted. Once the reap is over, a late opening
// of n1's gates with the epoch it was reaped at is refused by the floors, and its joins still
// are; the node's next Join registers it again, under a new epoch.
func TestJoinRacingTheReaperIsRefused(t *testing.T) {
	ctx := context.Background()
	layouts := []struct {
		name string
		keys func() *KeySpace
	}{
		{"legacy", func() *KeySpace { return LegacyKeySpace("{test:" + uuid.NewString() + "}:") }},
		{"spread", func() *KeySpace { return NewKeySpace("test:"+uuid.NewString(), true) }},
	}
	m := channels.Member{UserID: "u1", Info: []byte(`{}`)}
	for _, be := range testutil.RedisBackends(t, true) {
		for _, l := range layouts {
			t.Run(be.Name+"/"+l.name, func(t *testing.T) {
				rdb := be.Client(t)
				ks := l.keys()
				p := NewRedisPresence(rdb, RedisPresenceOptions{Keys: ks, NodeID: "n1"})
				survivor := NewRedisPresence(rdb, RedisPresenceOptions{Keys: ks, NodeID: "n2"})
				t.Cleanup(func() { _ = p.Close(); _ = survivor.Close() })
				if err := p.Heartbeat(ctx); err != nil {
					t.Fatal(err)
				}
				if _, err := p.Join(ctx, "app", "presence-a", "1.1", m); err != nil {
					t.Fatal(err)
				}
				epoch := p.nodes.gate.open
				var during, lateOpen error
				survivor.nodes.Track(NodeState{Reap: func(ctx context.Context, node string, _ time.Time) error {
					_, during = p.join(ctx, entry("app", "presence-b", "1.2", "u1"), m)
					return nil
				}})
				if err := survivor.nodes.reap(ctx, survivor.nodes.snapshot(), "n1", time.Now().Add(time.Hour)); err != nil {
					t.Fatal(err)
				}
				if !errors.Is(during, errNodeUnknown) {
					t.Fatalf("a join racing its node's reap: err %v, want errNodeUnknown", during)
				}
				if ks.Spread() {
					_, lateOpen = p.nodes.openGates(ctx, epoch, true)
					if !errors.Is(lateOpen, errGateRefused) {
						t.Fatalf("opening the gates with the reaped epoch %d: %v, want errGateRefused", epoch, lateOpen)
					}
				}
				if _, err := p.join(ctx, entry("app", "presence-c", "1.3", "u1"), m); !errors.Is(err, errNodeUnknown) {
					t.Fatalf("a join after the reap: err %v, want errNodeUnknown", err)
				}
				for _, ch := range []string{"presence-a", "presence-b", "presence-c"} {
					if ms, err := p.Members(ctx, "app", ch); err != nil || len(ms) != 0 {
						t.Fatalf("%s after the reap: %+v %v (a ghost)", ch, ms, err)
					}
				}
				if first, err := p.Join(ctx, "app", "presence-b", "1.2", m); err != nil || !first {
					t.Fatalf("Join re-registering the node: first=%v err=%v", first, err)
				}
				if ks.Spread() && p.nodes.gate.open <= epoch {
					t.Fatalf("re-registered under epoch %d, not newer than the reaped %d", p.nodes.gate.open, epoch)
				}
				if _, err := rdb.ZScore(ctx, p.nodeSet(), "n1").Result(); err != nil {
					t.Fatalf("the node owning the member is not listed: %v", err)
				}
			})
		}
	}
}

// TestLostGateReopened: a bucket's master loses this node's gate (a failover dropped the
// write), also while that bucket's floor is above the node's epoch (a newer node was reaped
// there, or the epoch counter itself lost increments to a failover). The node's next Join
// there is refused, heartbeats, finds the gate missing, is refused by the floor, takes a new
// epoch above it and reopens its gates: the Join succeeds without a restart.
func TestLostGateReopened(t *testing.T) {
	ctx := context.Background()
	m := channels.Member{UserID: "u1", Info: []byte(`{}`)}
	for _, be := range testutil.RedisBackends(t, true) {
		t.Run(be.Name, func(t *testing.T) {
			rdb := be.Client(t)
			ks := NewKeySpace("test:"+uuid.NewString(), true)
			p := NewRedisPresence(rdb, RedisPresenceOptions{Keys: ks, NodeID: "n1"})
			t.Cleanup(func() { _ = p.Close() })
			if err := p.Heartbeat(ctx); err != nil {
				t.Fatal(err)
			}
			epoch := p.nodes.gate.open
			for _, c := range []struct {
				name  string
				floor int64 // the bucket's floor after the loss (0: untouched)
			}{{"gate lost", 0}, {"gate lost under a higher floor", epoch + 5}} {
				ch := "presence-" + c.name[:4] + uuid.NewString()[:8]
				gates, floor := ks.GateKeys(ks.Bucket("app", ch))
				if err := rdb.HDel(ctx, gates, "n1").Err(); err != nil {
					t.Fatal(err)
				}
				if c.floor > 0 {
					if err := rdb.Set(ctx, floor, c.floor, 0).Err(); err != nil {
						t.Fatal(err)
					}
				}
				if first, err := p.Join(ctx, "app", ch, "1.1", m); err != nil || !first {
					t.Fatalf("%s: Join = %v %v, want a first join", c.name, first, err)
				}
				if c.floor > 0 && p.nodes.gate.open <= c.floor {
					t.Fatalf("%s: epoch %d, want above the floor %d", c.name, p.nodes.gate.open, c.floor)
				}
			}
		})
	}
}
