package cluster_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/reverbgo/reverbgo/channels"
	"github.com/reverbgo/reverbgo/channels/channelstest"
	"github.com/reverbgo/reverbgo/internal/cluster"
)

// TestRedisKeysBounded: "no key without a bound" (issue 20). While a node runs, its per-node
// hashes carry a TTL; once it closed, a late write-through (a subscription whose task ran
// after the shutdown reap) leaves only keys that expire, and no presence key survives.
func TestRedisKeysBounded(t *testing.T) {
	ctx := context.Background()
	for _, be := range backends(t) {
		if be.Name == "cluster" {
			continue // SCAN of one node
		}
		for _, l := range layouts() {
			t.Run(be.Name+"/"+l.name, func(t *testing.T) {
				rdb := be.Client(t)
				ks := l.keys()
				// Every key of the case starts with its node-level tag, bucket tags included
				// ("{reverbgo:test:<id>}:", "{reverbgo:test:<id>:<n>}:"); names are compared
				// without their tag.
				match := strings.TrimSuffix(ks.Prefix(), "}:") + "*"
				nodes := cluster.NewRedisNodes(rdb, cluster.RedisNodesOptions{Keys: ks, NodeID: "a", NodeTimeout: time.Second})
				pres := cluster.NewRedisPresence(rdb, cluster.RedisPresenceOptions{Nodes: nodes})
				occ := cluster.NewRedisOccupancy(nodes, "private-toolmark.", nil)
				reg := channels.NewRegistry(channels.Options{Presence: pres, Occupancy: occ})
				occ.SetConnections(func() map[string]int64 { return map[string]int64{"app": 1} })
				if err := nodes.Heartbeat(ctx); err != nil {
					t.Fatal(err)
				}
				reg.Subscribe("app", "private-toolmark.u1.c1", &channelstest.Sink{ID: "1.1"})
				reg.Subscribe("app", "news", &channelstest.Sink{ID: "1.1"})
				if _, err := pres.Join(ctx, "app", "presence-r", "1.1", channels.Member{UserID: "u1", Info: []byte(`{}`)}); err != nil {
					t.Fatal(err)
				}
				occ.Close() // its last batch
				if err := nodes.Heartbeat(ctx); err != nil {
					t.Fatal(err)
				}
				// The spread layout's epoch counter and its buckets' floors are the cluster's (one
				// each, whatever the nodes), so they never expire: a late gate opening must stay
				// refused, and epochs only grow.
				cluster := func(k string) bool { return ks.Spread() && (k == "epoch" || k == "gatefloor") }
				check := func(when string, allowUnbounded func(key string) bool) {
					t.Helper()
					keys, err := rdb.Keys(ctx, match).Result()
					if err != nil {
						t.Fatal(err)
					}
					for _, k := range keys {
						ttl, err := rdb.PTTL(ctx, k).Result()
						if err != nil {
							t.Fatal(err)
						}
						_, name, _ := strings.Cut(k, "}:")
						if ttl <= 0 && !allowUnbounded(name) && !cluster(name) {
							t.Errorf("%s: key %q has no TTL (%v)", when, k, ttl)
						}
					}
				}
				// Running: the node set, its epochs, the gates and presence keys are reaper-owned;
				// every per-node hash expires.
				check("running", func(k string) bool {
					return k == "nodes" || k == "epochs" || k == "gates" || k == "node:a:presence" || strings.HasPrefix(k, "p")
				})
				if err := pres.Close(); err != nil { // not the owner: a no-op
					t.Fatal(err)
				}
				if err := nodes.Close(); err != nil {
					t.Fatal(err)
				}
				reg.Subscribe("app", "private-toolmark.u1.c2", &channelstest.Sink{ID: "1.2"}) // a late write-through
				if _, err := pres.Join(ctx, "app", "presence-r", "1.2", channels.Member{UserID: "u2", Info: []byte(`{}`)}); err == nil {
					t.Fatal("a join after the node closed was accepted")
				}
				check("closed", func(string) bool { return false })
			})
		}
	}
}

// TestWebhookKeys: the webhooks' names are the ones their store always used, and every one
// hashes to the slot of the cluster's node-level prefix.
func TestWebhookKeys(t *testing.T) {
	ks := cluster.NewKeySpace("c", true)
	k := cluster.NewWebhookKeys(ks.Prefix())
	want := map[string]string{
		k.Queue("o"): "q:o", k.Inflight("o"): "f:o", k.Lease("o"): "l:o", k.Since("o"): "t:o",
		k.State("o"): "s:o", k.NodeSet("n"): "n:n", k.Occupancy(): "occ", k.Holds(): "holds",
		k.CacheMiss(): "cm",
	}
	if len(want) != 9 {
		t.Fatalf("%d distinct names, want 9", len(want))
	}
	for name, suffix := range want {
		if name != ks.Prefix()+"{webhooks}:"+suffix {
			t.Errorf("name %q, want %q", name, ks.Prefix()+"{webhooks}:"+suffix)
		}
		if cluster.Slot(name) != cluster.Slot(ks.Prefix()) {
			t.Errorf("%q is in slot %d, the prefix in %d", name, cluster.Slot(name), cluster.Slot(ks.Prefix()))
		}
	}
}

// TestToolmarkKeys: the bridge's names are the ones its store and feed always used, and
// every one hashes to the slot of the cluster's node-level prefix.
func TestToolmarkKeys(t *testing.T) {
	ks := cluster.NewKeySpace("c", true)
	p := ks.ToolmarkPrefix()
	if p != ks.Prefix()+"toolmark:" {
		t.Fatalf("ToolmarkPrefix %q, want %q", p, ks.Prefix()+"toolmark:")
	}
	k := cluster.NewToolmarkKeys(p)
	want := map[string]string{
		k.Results(): "results", k.Manifests(): "manifests", k.Manifest("a", "u", "c"): "m:a:u:c",
		k.Call("i"): "c:i", k.Confirm("a", "i"): "f:a:i", k.NoConfirm(): "f:-",
	}
	for name, suffix := range want {
		if name != p+suffix {
			t.Errorf("name %q, want %q", name, p+suffix)
		}
		if cluster.Slot(name) != cluster.Slot(ks.Prefix()) {
			t.Errorf("%q is in slot %d, the prefix in %d", name, cluster.Slot(name), cluster.Slot(ks.Prefix()))
		}
	}
}
