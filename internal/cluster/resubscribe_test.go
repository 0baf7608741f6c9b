package cluster_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/reverbgo/reverbgo/channels"
	"github.com/reverbgo/reverbgo/channels/channelstest"
	"github.com/reverbgo/reverbgo/internal/cluster"
	"github.com/reverbgo/reverbgo/internal/testenv"
	"github.com/reverbgo/reverbgo/internal/testutil"
)

// viaProxy is a client of the real Redis and one that reaches it through a fault proxy.
func viaProxy(t *testing.T) (direct, via *redis.Client, proxy *testutil.Proxy) {
	t.Helper()
	u := testenv.RedisURL(t)
	if u == "" {
		t.Skip("REVERBGO_TEST_REDIS_URL not set")
	}
	opt, err := redis.ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	proxy = testutil.NewProxy(t, opt.Addr)
	direct = redis.NewClient(opt)
	popt := *opt
	popt.Addr = proxy.Addr()
	via = redis.NewClient(&popt)
	t.Cleanup(func() { _ = direct.Close(); _ = via.Close() })
	return direct, via, proxy
}

// proxiedNodes builds two interest-routed nodes on the real Redis: node 0 (the publisher)
// talks to Redis directly, node 1 (the subscriber) through a fault proxy.
func proxiedNodes(t *testing.T) (pub, sub *channels.Registry, keys *cluster.KeySpace, proxy *testutil.Proxy, gaps *atomic.Int32) {
	t.Helper()
	direct, via, proxy := viaProxy(t)
	ch := "test:" + uuid.NewString()
	keys = cluster.NewKeySpace(ch, true)
	gaps = &atomic.Int32{}
	regs := make([]*channels.Registry, 2)
	for i, rdb := range []redis.UniversalClient{direct, via} {
		b, err := cluster.NewRedisBroker(context.Background(), rdb, cluster.RedisBrokerOptions{
			Channel: ch, Keys: keys, OnGap: func(string, bool) { gaps.Add(1) },
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		regs[i] = channels.NewRegistry(channels.Options{Broker: b})
		b.Start(regs[i].DeliverLocal)
		<-b.Dialled()
	}
	return regs[0], regs[1], keys, proxy, gaps
}

// deliveredAgain publishes on pub until sink has a frame of the channel again, and fails
// when that takes longer than within.
func deliveredAgain(t *testing.T, pub *channels.Registry, name string, sink *channelstest.Sink, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	tag := uuid.NewString()[:8]
	for i := 0; ; i++ {
		frame := fmt.Sprintf("%s-%d", tag, i)
		if err := pub.PublishNoWait(channels.Message{AppID: "app", Channel: name, Frame: []byte(frame)}); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(50 * time.Millisecond)
		for time.Now().Before(deadline) {
			for _, f := range sink.Frames() {
				if f == frame {
					return time.Since(start)
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
		if time.Since(start) > within {
			t.Fatalf("no publish reached the subscriber for %v after the fault", within)
		}
	}
}

// Redis may end a subscription on its own: on Cluster a moved slot (resharding) or a master
// that changed sends every client subscribed to its shard channels a sunsubscribe. The proxy
// makes the same happen on a standalone Redis (it sends the UNSUBSCRIBE the node never
// did, and Redis answers the node). Before, the receive loop dropped the notice, the
// channel stayed marked routed and went dark on that node for good; now the loop makes a
// fresh subscription from the owner's set.
func TestAServerSentUnsubscribeIsMadeGoodAgain(t *testing.T) {
	pub, sub, keys, proxy, gaps := proxiedNodes(t)
	sink := &channelstest.Sink{ID: "1.1"}
	sub.Subscribe("app", "orders", sink)
	if err := sub.AwaitRouted(context.Background(), "app", "orders"); err != nil {
		t.Fatal(err)
	}
	deliveredAgain(t, pub, "orders", sink, 2*time.Second)
	name := keys.Topic("app", "orders")
	if n := proxy.Inject(testutil.IsSubscriber, testutil.RESP("UNSUBSCRIBE", name)); n == 0 {
		t.Fatal("no subscription connection went through the proxy")
	}
	took := deliveredAgain(t, pub, "orders", sink, 3*time.Second)
	t.Logf("delivered again %v after the server-sent unsubscribe", took)
	testutil.WaitFor(t, "the gap announced", func() bool { return gaps.Load() > 0 })
}

// A subscription connection can stay open and answer nothing the cluster publishes (a
// Sentinel master demoted under it, a half-open TCP connection). Pings on that connection
// prove nothing; a probe published through the normal path and not coming back does.
// Before, such a channel stayed dark for at least the 15 s keepalive; now it is made anew
// within about a second.
func TestASilentSubscriptionIsMadeAnewByTheProbe(t *testing.T) {
	pub, sub, _, proxy, gaps := proxiedNodes(t)
	sink := &channelstest.Sink{ID: "1.1"}
	sub.Subscribe("app", "orders", sink)
	if err := sub.AwaitRouted(context.Background(), "app", "orders"); err != nil {
		t.Fatal(err)
	}
	deliveredAgain(t, pub, "orders", sink, 2*time.Second)
	if n := proxy.Deafen(testutil.IsSubscriber); n == 0 {
		t.Fatal("no subscription connection went through the proxy")
	}
	took := deliveredAgain(t, pub, "orders", sink, 4*time.Second)
	t.Logf("delivered again %v after the subscription went silent", took)
	testutil.WaitFor(t, "the gap announced", func() bool { return gaps.Load() > 0 })
}

// A subscriber that leaves before its subscription is confirmed gets no answer: the waiter
// is dropped (told false), not released as if routed, so no subscription_succeeded goes out
// after the unsubscribe. The subscription connection is deaf, so no confirmation can come
// first.
func TestAWaiterOfAChannelLeftBeforeItsConfirmationIsDropped(t *testing.T) {
	_, sub, _, proxy, _ := proxiedNodes(t)
	if n := proxy.Deafen(testutil.IsSubscriber); n == 0 {
		t.Fatal("no subscription connection went through the proxy")
	}
	sink := &channelstest.Sink{ID: "1.1"}
	sub.Subscribe("app", "flap", sink)
	got := make(chan bool, 1)
	sub.WhenRouted("app", "flap", func(routed bool) { got <- routed })
	sub.Unsubscribe("app", "flap", sink.ID)
	select {
	case routed := <-got:
		if routed {
			t.Fatal("a waiter whose subscriber left was answered as routed")
		}
	case <-time.After(time.Second):
		t.Fatal("the waiter of a channel nobody wants any more was never told")
	}
}
