package channels_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/reverbgo/reverbgo/channels"
	"github.com/reverbgo/reverbgo/channels/channelstest"
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
		t.Run(be.Name, func(t *testing.T) {
			rdb := be.Client(t)
			prefix := testPrefix()
			nodes := channels.NewRedisNodes(rdb, channels.RedisNodesOptions{Prefix: prefix, NodeID: "a", NodeTimeout: time.Second})
			pres := channels.NewRedisPresence(rdb, channels.RedisPresenceOptions{Nodes: nodes})
			occ := channels.NewRedisOccupancy(nodes, "private-toolmark.", nil)
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
			check := func(when string, allowUnbounded func(key string) bool) {
				t.Helper()
				keys, err := rdb.Keys(ctx, prefix+"*").Result()
				if err != nil {
					t.Fatal(err)
				}
				for _, k := range keys {
					ttl, err := rdb.PTTL(ctx, k).Result()
					if err != nil {
						t.Fatal(err)
					}
					if ttl <= 0 && !allowUnbounded(strings.TrimPrefix(k, prefix)) {
						t.Errorf("%s: key %q has no TTL (%v)", when, strings.TrimPrefix(k, prefix), ttl)
					}
				}
			}
			// Running: the node set and presence keys are reaper-owned; every per-node hash expires.
			check("running", func(k string) bool {
				return k == "nodes" || k == "node:a:presence" || strings.HasPrefix(k, "p")
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
