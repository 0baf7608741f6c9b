package cluster_test

import (
	"context"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/reverbgo/reverbgo/channels"
	"github.com/reverbgo/reverbgo/internal/cluster"
)

// A registry over the Redis broker reports Remote, and over RedisOccupancy indexes only the
// channels under its prefix.
func TestRedisRegistryIsRemote(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	b, err := cluster.NewRedisBroker(context.Background(), rdb, cluster.RedisBrokerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	p := cluster.NewRedisPresence(rdb, cluster.RedisPresenceOptions{NodeID: b.NodeID()})
	t.Cleanup(func() { _ = p.Close() })
	occ := cluster.NewRedisOccupancy(p, "private-toolmark.", nil)
	t.Cleanup(occ.Close)
	r := channels.NewRegistry(channels.Options{Broker: b, Presence: p, Occupancy: occ})
	if !r.Remote() {
		t.Fatal("a registry over Redis must report Remote")
	}
	if !r.SubscribeWaits("private-toolmark.page") || r.SubscribeWaits("private-orders") {
		t.Fatal("only the indexed prefix waits")
	}
}
