package pusher

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/reverbgo/reverbgo/channels"
	"github.com/reverbgo/reverbgo/internal/cluster"
	"github.com/reverbgo/reverbgo/internal/testutil"
)

// clusterNode is one node of a two-node test cluster on one Redis: its broker's deliveries
// and its Health can be cut (lost), as when the node's Redis connection is down.
type clusterNode struct {
	ts      *tserver
	lost    atomic.Bool
	dropped atomic.Int64 // member events the cut delivery dropped
}

func newClusterNode(t *testing.T, be testutil.RedisBackend, channel, prefix string) *clusterNode {
	t.Helper()
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	rdb := be.Client(t)
	broker, err := cluster.NewRedisBroker(ctx, rdb, cluster.RedisBrokerOptions{Channel: channel, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = broker.Close() })
	presence := cluster.NewRedisPresence(rdb, cluster.RedisPresenceOptions{Prefix: prefix, NodeID: broker.NodeID(),
		NodeTimeout: 2 * time.Second, Logger: quiet})
	t.Cleanup(func() { _ = presence.Close() })
	reg := channels.NewRegistry(channels.Options{Broker: broker, Presence: presence})
	n := &clusterNode{}
	broker.Start(func(m channels.Message) int {
		if n.lost.Load() {
			n.dropped.Add(1)
			return 0
		}
		return reg.DeliverLocal(m)
	})
	n.ts = newServer(t,
		func(s *setup) { s.cfg.Scaling.NodeTimeout = 2 }, // reconcile interval 200 ms
		withOptions(func(o *Options) {
			o.Registry = reg
			o.Health = func(context.Context) map[string]string {
				if n.lost.Load() {
					return map[string]string{"redis": "unreachable"}
				}
				return nil
			}
		}))
	return n
}

// TestPresenceReconcileAfterRedisTrouble: node A's subscriber misses, while A's Redis
// subscription is down, a member leaving and a member joining on node B (pub/sub has no
// replay). Once A is healthy again its subscriber gets the corrective member_removed and
// member_added (with user_info) from A alone. With the reconcile off, it never does: the
// fault this fixes.
func TestPresenceReconcileAfterRedisTrouble(t *testing.T) {
	for _, be := range testutil.RedisBackends(t, false) {
		for _, tc := range []struct {
			name string
			on   bool
		}{{"reconcile", true}, {"off", false}} {
			t.Run(be.Name+"/"+tc.name, func(t *testing.T) {
				id := uuid.NewString()
				a := newClusterNode(t, be, "rc:"+id, "rc:"+id+":")
				b := newClusterNode(t, be, "rc:"+id, "rc:"+id+":")
				a.ts.s.reconcile.mu.Lock()
				a.ts.s.reconcile.off = !tc.on
				a.ts.s.reconcile.mu.Unlock()
				room := "presence-reconcile"

				ca := a.ts.connect(t)
				a.ts.subscribePresence(ca, room, `{"user_id":"ua","user_info":{}}`)
				old := b.ts.connect(t)
				b.ts.subscribePresence(old, room, `{"user_id":"u-old","user_info":{}}`)
				var ev map[string]any
				ca.WaitEvent("pusher_internal:member_added", room).DataInto(t, &ev)
				if ev["user_id"] != "u-old" {
					t.Fatalf("member_added %v", ev)
				}

				a.lost.Store(true)
				old.SendRaw(`{"event":"pusher:unsubscribe","data":{"channel":"` + room + `"}}`)
				joiner := b.ts.connect(t)
				b.ts.subscribePresence(joiner, room, `{"user_id":"u-new","user_info":{"name":"N"}}`)
				testutil.WaitFor(t, "A drops both member events", func() bool { return a.dropped.Load() >= 2 })
				ca.ExpectNone("", room)
				// Stay cut until A's loop (one look every 200 ms) has seen the trouble: on a
				// loaded machine the cut could otherwise end between two looks.
				testutil.WaitFor(t, "A's reconcile loop sees the trouble", func() bool {
					a.ts.s.reconcile.mu.Lock()
					defer a.ts.s.reconcile.mu.Unlock()
					return a.ts.s.reconcile.troubled
				})
				a.lost.Store(false)

				if !tc.on {
					// Six intervals of 200 ms: a reconcile would have run by now.
					for range 8 {
						ca.ExpectNone("", room)
					}
					return
				}
				got := map[string]map[string]any{}
				for len(got) < 2 {
					e := ca.Next()
					if e.Channel != room {
						continue
					}
					var d map[string]any
					e.DataInto(t, &d)
					got[e.Event] = d
				}
				if r := got["pusher_internal:member_removed"]; r == nil || r["user_id"] != "u-old" {
					t.Fatalf("member_removed %v", got)
				}
				add := got["pusher_internal:member_added"]
				if add == nil || add["user_id"] != "u-new" {
					t.Fatalf("member_added %v", got)
				}
				if info, _ := add["user_info"].(map[string]any); info["name"] != "N" {
					t.Fatalf("member_added user_info %v", add)
				}
				// The announced set now matches: no further corrections.
				a.ts.s.PresenceTrouble()
				ca.ExpectNone("", room)
				ca.ExpectNone("", room)
			})
		}
	}
}
