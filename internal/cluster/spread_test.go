package cluster_test

import (
	"fmt"
	"testing"

	"github.com/reverbgo/reverbgo/internal/cluster"
)

// The spread layout's bucket tags sit in distinct slots, evenly over the slot range, and a
// channel's keys, its topic and a per-node key of its bucket share one slot; the legacy
// layout keeps every name it always had.
func TestKeySpaceLayouts(t *testing.T) {
	k := cluster.NewKeySpace("reverb", true)
	slots := map[int]bool{}
	for b := range k.Buckets() {
		s := cluster.Slot(k.BucketPrefix(b) + "x")
		if lo, hi := b*16384/cluster.KeyBuckets, (b+1)*16384/cluster.KeyBuckets; s < lo || s >= hi {
			t.Fatalf("bucket %d in slot %d, want [%d,%d)", b, s, lo, hi)
		}
		slots[s] = true
	}
	if len(slots) != cluster.KeyBuckets {
		t.Fatalf("%d distinct slots, want %d", len(slots), cluster.KeyBuckets)
	}
	for i := range 100 {
		ch := fmt.Sprintf("presence-%d", i)
		s := cluster.Slot(k.ChannelKey("pu", "app", ch))
		for _, name := range []string{k.ChannelKey("ps", "app", ch), k.Topic("app", ch), k.NodeBucketKey("n", "presence", k.Bucket("app", ch))} {
			if cluster.Slot(name) != s {
				t.Fatalf("%q is not in the slot of its channel's keys", name)
			}
		}
	}
	l := cluster.NewKeySpace("reverb", false)
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
