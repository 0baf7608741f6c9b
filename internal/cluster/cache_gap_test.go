package cluster_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/reverbgo/reverbgo/channels"
	"github.com/reverbgo/reverbgo/channels/channelstest"
	"github.com/reverbgo/reverbgo/internal/cluster"
	"github.com/reverbgo/reverbgo/internal/testutil"
)

// cachedNodes builds two interest-routed nodes with the cluster cache on the real Redis, as
// cmd/reverbgo wires them (the broker's OnGap is the registry's CacheGap): node 0 publishes
// on Redis directly, node 1 subscribes through a fault proxy.
func cachedNodes(t *testing.T) (pub, sub *channels.Registry, cache *cluster.RedisCache, proxy *testutil.Proxy) {
	t.Helper()
	direct, via, proxy := viaProxy(t)
	ch := "test:" + uuid.NewString()
	keys := cluster.NewKeySpace(ch, true)
	regs := make([]*channels.Registry, 2)
	for i, rdb := range []redis.UniversalClient{direct, via} {
		var reg atomic.Pointer[channels.Registry]
		c := cluster.NewRedisCacheIn(rdb, keys)
		b, err := cluster.NewRedisBroker(context.Background(), rdb, cluster.RedisBrokerOptions{
			Channel: ch, Keys: keys, Cache: c,
			OnGap: func(cause string, restored bool) {
				if r := reg.Load(); r != nil {
					r.CacheGap(cause, restored)
				}
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		regs[i] = channels.NewRegistry(channels.Options{Broker: b, Cache: c})
		reg.Store(regs[i])
		b.Start(regs[i].DeliverLocal)
		<-b.Dialled()
	}
	return regs[0], regs[1], cluster.NewRedisCacheIn(direct, keys), proxy
}

// TestCacheReplayAfterAGap (issue 24): an event published on another node while this node's
// subscription connection was silent never reaches this node through pub/sub; once the
// subscription is made anew, the node reads the cache channel's last event from Redis and
// delivers it to its subscriber. A cache channel whose last event the node had delivered
// is not delivered again. Before the replay the event never arrived.
func TestCacheReplayAfterAGap(t *testing.T) {
	pub, sub, cache, proxy := cachedNodes(t)
	ctx := context.Background()
	orders, quiet := &channelstest.Sink{ID: "1.1"}, &channelstest.Sink{ID: "1.2"}
	for _, s := range []struct {
		name string
		sink *channelstest.Sink
	}{{"cache-orders", orders}, {"private-cache-quiet", quiet}} {
		sub.Subscribe("app", s.name, s.sink)
		if err := sub.AwaitRouted(ctx, "app", s.name); err != nil {
			t.Fatal(err)
		}
		frame := s.name + ":before"
		if err := pub.Publish(ctx, channels.Message{AppID: "app", Channel: s.name, Frame: []byte(frame), Cacheable: true}); err != nil {
			t.Fatal(err)
		}
		testutil.WaitFor(t, frame+" delivered", func() bool { return slices.Contains(s.sink.Frames(), frame) })
	}

	if n := proxy.Deafen(testutil.IsSubscriber); n == 0 {
		t.Fatal("no subscription connection went through the proxy")
	}
	if err := pub.Publish(ctx, channels.Message{AppID: "app", Channel: "cache-orders", Frame: []byte("dark"), Cacheable: true}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the dark event in Redis", func() bool {
		f, ok, _ := cache.LastEvent(ctx, "app", "cache-orders")
		return ok && string(f) == "dark"
	})
	testutil.WaitForWithin(t, 8*time.Second, "the event published while dark replayed", func() bool {
		return slices.Contains(orders.Frames(), "dark")
	})
	if got := orders.Frames(); !slices.Equal(got, []string{"cache-orders:before", "dark"}) {
		t.Fatalf("cache-orders got %q", got)
	}
	if n := sub.ReplayCaches(ctx); n != 0 {
		t.Fatalf("a second replay corrected %d channels, want 0", n)
	}
	if got := quiet.Frames(); !slices.Equal(got, []string{"private-cache-quiet:before"}) {
		t.Fatalf("a channel that missed nothing got %q", got)
	}
}
