package cluster_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/reverbgo/reverbgo/bridge"
	"github.com/reverbgo/reverbgo/channels"
	"github.com/reverbgo/reverbgo/internal/cluster"
	"github.com/reverbgo/reverbgo/internal/testutil"
)

// TestPresenceSpreadOverClusterMasters is issue 24's "done when" for presence: a node of the
// spread layout joins 300 presence channels (each with its subscription count and a toolmark
// socket index entry) on a three-master Redis Cluster, and every master holds some of the
// keys, none more than 60 % of them. In the legacy layout everything shares one hash tag.
func TestPresenceSpreadOverClusterMasters(t *testing.T) {
	ctx := context.Background()
	rdb := testutil.RedisCluster(t)
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		t.Fatal("not a cluster client")
	}
	channel := "test:" + uuid.NewString()
	ks := cluster.NewKeySpace(channel, true)
	nodes := cluster.NewRedisNodes(rdb, cluster.RedisNodesOptions{Keys: ks, NodeID: "n1", NodeTimeout: time.Minute})
	pres := cluster.NewRedisPresence(rdb, cluster.RedisPresenceOptions{Nodes: nodes})
	occ := cluster.NewRedisOccupancy(nodes, bridge.ChannelPrefix, nil)
	idx := bridge.NewRedisSocketIndex(rdb, nodes, nil)
	t.Cleanup(func() { _ = nodes.Close() })
	if err := nodes.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		ch, sock := fmt.Sprintf("presence-room-%d", i), fmt.Sprintf("1.%d", i)
		if _, err := pres.Join(ctx, "app", ch, sock, channels.Member{UserID: fmt.Sprint("u", i), Info: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
		occ.Subscribed("app", ch, sock)
		idx.Subscribed("app", fmt.Sprintf("%su%d.c1", bridge.ChannelPrefix, i), sock)
	}
	occ.Close() // its last batch
	if n, err := occ.SubscriptionCount(ctx, "app", "presence-room-7"); err != nil || n != 1 {
		t.Fatalf("count of a channel: %d %v", n, err)
	}
	if _, _, found, err := idx.Socket(ctx, "1.7"); err != nil || !found {
		t.Fatalf("socket index entry: %v %v", found, err)
	}

	var mu sync.Mutex
	perMaster := map[string]int{}
	total := 0
	err := cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		n := 0
		iter := m.Scan(ctx, 0, "{"+cluster.DefaultRedisPrefix+channel+"*", 1000).Iterator()
		for iter.Next(ctx) {
			n++
		}
		mu.Lock()
		perMaster[m.Options().Addr] = n
		total += n
		mu.Unlock()
		return iter.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("keys per master: %v (total %d)", perMaster, total)
	if len(perMaster) != 3 {
		t.Fatalf("%d masters, want 3", len(perMaster))
	}
	for addr, n := range perMaster {
		if n == 0 {
			t.Errorf("master %s holds none of the keys", addr)
		}
		if n*100 > total*60 {
			t.Errorf("master %s holds %d of %d keys (over 60 %%)", addr, n, total)
		}
	}
	if total < 900 {
		t.Fatalf("only %d keys: the presence hashes are missing", total)
	}
}
