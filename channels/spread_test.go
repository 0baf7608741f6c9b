package channels_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/reverbgo/reverbgo/channels"
	"github.com/reverbgo/reverbgo/channels/channelstest"
	"github.com/reverbgo/reverbgo/internal/testutil"
)

// spreadKeys is a fresh spread key space per case.
func spreadKeys() *channels.KeySpace { return channels.NewKeySpace("test:"+uuid.NewString(), true) }

// The spread layout's bucket tags sit in distinct slots, evenly over the slot range, and a
// channel's keys, its topic and the node's membership set of it share one slot (the
// scripts need that on Redis Cluster); the legacy layout keeps every name it always had.
func TestKeySpaceLayouts(t *testing.T) {
	k := channels.NewKeySpace("reverb", true)
	slots := map[int]bool{}
	for b := range k.Buckets() {
		s := channels.Slot(k.BucketPrefix(b) + "x")
		if lo, hi := b*16384/channels.KeyBuckets, (b+1)*16384/channels.KeyBuckets; s < lo || s >= hi {
			t.Fatalf("bucket %d in slot %d, want [%d,%d)", b, s, lo, hi)
		}
		slots[s] = true
	}
	if len(slots) != channels.KeyBuckets {
		t.Fatalf("%d distinct slots, want %d", len(slots), channels.KeyBuckets)
	}
	for i := range 100 {
		ch := fmt.Sprintf("presence-%d", i)
		s := channels.Slot(k.ChannelKey("pu", "app", ch))
		for _, name := range []string{k.ChannelKey("ps", "app", ch), k.Topic("app", ch), k.NodeBucketKey("n", "presence", k.Bucket("app", ch))} {
			if channels.Slot(name) != s {
				t.Fatalf("%q is not in the slot of its channel's keys", name)
			}
		}
	}
	l := channels.NewKeySpace("reverb", false)
	for _, c := range []struct{ got, want string }{
		{l.ChannelKey("pu", "app", "presence-x"), "{reverbgo:reverb}:pu:presence-x:app"},
		{l.ChannelKey("cache", "app", "cache-x"), "{reverbgo:reverb}:cache:cache-x:app"},
		{l.NodeKey("n1", "subs"), "{reverbgo:reverb}:node:n1:subs"},
		{l.NodeBucketKey("n1", "presence", l.Bucket("app", "presence-x")), "{reverbgo:reverb}:node:n1:presence"},
		{l.BroadcastChannel(), "reverb"},
	} {
		if c.got != c.want {
			t.Fatalf("legacy name %q, want %q (what earlier versions wrote)", c.got, c.want)
		}
	}
}

// The presence contract and the dead-node reap hold in the spread layout: a dead node's
// memberships in 100 channels (spread over the buckets) and its per-bucket counts are
// removed within the node timeout.
func TestSpreadPresenceReapsDeadNode(t *testing.T) {
	ctx := context.Background()
	for _, be := range backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			channelstest.RunPresence(t, func(t *testing.T) channels.PresenceStore {
				p := channels.NewRedisPresence(be.Client(t), channels.RedisPresenceOptions{Keys: spreadKeys()})
				t.Cleanup(func() { _ = p.Close() })
				return p
			})
			keys := spreadKeys()
			const ttl = 500 * time.Millisecond
			rdb := be.Client(t)
			var g gone
			dead := channels.NewRedisPresence(rdb, channels.RedisPresenceOptions{Keys: keys, NodeID: "dead", NodeTimeout: ttl})
			deadOcc := channels.NewRedisOccupancy(dead, "", nil)
			if err := dead.Heartbeat(ctx); err != nil {
				t.Fatal(err)
			}
			const n = 100
			for i := range n {
				ch := fmt.Sprintf("presence-%d", i)
				if _, err := dead.Join(ctx, "app", ch, "1.1", channels.Member{UserID: "u1", Info: []byte(`{}`)}); err != nil {
					t.Fatal(err)
				}
				deadOcc.Subscribed("app", ch, "1.1")
			}
			deadOcc.Close()                             // flushes the counts
			if err := dead.Heartbeat(ctx); err != nil { // a last heartbeat, then silence: a crash
				t.Fatal(err)
			}
			alive := channels.NewRedisPresence(rdb, channels.RedisPresenceOptions{Keys: keys, NodeID: "alive", NodeTimeout: ttl, OnGone: g.add})
			t.Cleanup(func() { _ = alive.Close() })
			occ := channels.NewRedisOccupancy(alive, "", nil)
			t.Cleanup(occ.Close)
			if got, err := occ.SubscriptionCount(ctx, "app", "presence-7"); err != nil || got != 1 {
				t.Fatalf("count before the reap: %d %v", got, err)
			}
			start := time.Now()
			alive.Start()
			testutil.WaitFor(t, "the dead node reaped", func() bool { return len(g.list()) == n })
			t.Logf("reaped %d memberships over %d buckets in %v after the heartbeat started", n, keys.Buckets(), time.Since(start))
			if time.Since(start) > ttl+5*time.Second {
				t.Fatalf("reap took %v, want within node_timeout + 5 s", time.Since(start))
			}
			for i := range n {
				if ms, err := alive.Members(ctx, "app", fmt.Sprintf("presence-%d", i)); err != nil || len(ms) != 0 {
					t.Fatalf("members of presence-%d after the reap: %v %v", i, ms, err)
				}
			}
			for b := range keys.Buckets() {
				for _, k := range []string{keys.NodeBucketKey("dead", "presence", b), keys.NodeBucketKey("dead", "subs", b)} {
					if n, err := rdb.Exists(ctx, k).Result(); err != nil || n != 0 {
						t.Fatalf("%s left after the reap (%d, %v)", k, n, err)
					}
				}
			}
			if s, err := rdb.ZScore(ctx, keys.Prefix()+"nodes", "dead").Result(); err == nil {
				t.Fatalf("dead node still in the node set (score %v)", s)
			}
			chs, err := occ.Channels(ctx, "app", "presence-")
			if err != nil || len(chs) != 0 {
				t.Fatalf("channels after the reap: %v %v", chs, err)
			}
			got := g.list()
			slices.Sort(got)
			if got[0] != "app/presence-0/u1" {
				t.Fatalf("gone = %q", got[:3])
			}
		})
	}
}
