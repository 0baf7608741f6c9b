package cluster_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
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

// Broker-level tests of issue 24's topology faults, on the real Sentinel and Cluster with
// replicas of REVERBGO_TEST_SENTINEL / REVERBGO_TEST_CLUSTER_REPLICAS (.ci/run starts them;
// each test leaves its topology serving). The black-box version, three processes under load,
// is e2e/topology.

// nodeOn builds one node (registry over an interest- or broadcast-routed broker) on the
// shared pub/sub channel ch, as routedNodes does, once its subscription connections are made.
// The tests make their control node this way after the change, so its connections are made
// on the new shape.
func nodeOn(t *testing.T, rdb redis.UniversalClient, ch string, routing cluster.Routing) *channels.Registry {
	t.Helper()
	keys := cluster.NewKeySpace(ch, routing == cluster.RoutingInterest)
	b, err := cluster.NewRedisBroker(context.Background(), rdb, cluster.RedisBrokerOptions{Channel: ch, Routing: routing, Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	reg := channels.NewRegistry(channels.Options{Broker: b})
	b.Start(reg.DeliverLocal)
	select {
	case <-b.Dialled():
	case <-time.After(10 * time.Second):
		t.Fatal("subscription connections never made")
	}
	return reg
}

// settleAfterChange is how long after Redis changed shape a node may take to subscribe again:
// every publish from then on must be delivered (issue 24's "done when").
const settleAfterChange = 2 * time.Second

// publishAcross publishes "seq-N" from node a on channel every 50 ms for settle+2 s from
// moment, then checks that each sink received every one sent from moment+settle on (waiting
// up to 2 s for the last), and logs when the first arrived. The tests pass a control sink
// subscribed on a fresh node after the change besides the node under test: it receives
// everything today, so a failure is the old node's subscription, not the publishes.
func publishAcross(t *testing.T, a *channels.Registry, name string, moment time.Time, sinks ...*channelstest.Sink) {
	t.Helper()
	var from []string // the frames sent from moment+settle on
	sent := map[string]time.Time{}
	for i := 0; time.Since(moment) < settleAfterChange+2*time.Second; i++ {
		f := "seq-" + strconv.Itoa(i)
		sent[f] = time.Now()
		if time.Since(moment) >= settleAfterChange {
			from = append(from, f)
		}
		_ = a.PublishNoWait(channels.Message{AppID: "app", Channel: name, Frame: []byte(f)})
		time.Sleep(50 * time.Millisecond) // the publish rate
	}
	deadline := time.Now().Add(2 * time.Second)
	for _, sink := range sinks {
		for !allReceived(sink.Frames(), from) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
	}
	for _, sink := range sinks {
		got := sink.Frames()
		first := "none"
		for _, f := range got {
			if at, ok := sent[f]; ok {
				first = at.Sub(moment).Round(time.Millisecond).String() + " after the change"
				break
			}
		}
		var missing []string
		for _, f := range from {
			if !slices.Contains(got, f) {
				missing = append(missing, f)
			}
		}
		t.Logf("sink %s: first delivered publish sent %s; %d of the %d sent from %s after it missing", sink.ID, first, len(missing), len(from), settleAfterChange)
		if len(missing) > 0 {
			t.Errorf("sink %s: %d of %d publishes sent from %s after the change never arrived (first missing %s, last %s)",
				sink.ID, len(missing), len(from), settleAfterChange, missing[0], missing[len(missing)-1])
		}
	}
}

func allReceived(got, want []string) bool {
	for _, f := range want {
		if !slices.Contains(got, f) {
			return false
		}
	}
	return true
}

// When a slot moves to another master, Redis 7 unsubscribes every client from the shard
// channels of that slot (a server-sent sunsubscribe): the node must subscribe again on the
// slot's new master, for a routed channel's topic and for broadcast routing's single channel
// alike. Today the notice is dropped and the channel stays dark on that node.
func TestSubscriptionFollowsAMovedSlot(t *testing.T) {
	addrs := testenv.ClusterReplicasAddrs(t)
	if addrs == nil {
		t.Skip("REVERBGO_TEST_CLUSTER_REPLICAS not set")
	}
	for _, tc := range []struct {
		name    string
		routing cluster.Routing
		topic   func(k *cluster.KeySpace, app, ch string) string
	}{
		{"interest", cluster.RoutingInterest, func(k *cluster.KeySpace, app, ch string) string { return k.Topic(app, ch) }},
		{"broadcast", cluster.RoutingBroadcast, func(k *cluster.KeySpace, _, _ string) string { return k.BroadcastChannel() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
			t.Cleanup(func() { _ = rdb.Close() })
			ch := "test:" + uuid.NewString()
			keys := cluster.NewKeySpace(ch, tc.routing == cluster.RoutingInterest)
			a, b := nodeOn(t, rdb, ch, tc.routing), nodeOn(t, rdb, ch, tc.routing)
			const name = "private-moved"
			sink := &channelstest.Sink{ID: "9.1"}
			channelstest.Subscribe(t, b, "app", name, sink)
			_ = a.PublishNoWait(channels.Message{AppID: "app", Channel: name, Frame: []byte("before")})
			sink.WaitFor(t, "the event published before the move", func(f []string) bool { return slices.Contains(f, "before") })

			slot := cluster.Slot(tc.topic(keys, "app", name))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, fromAddr, _, toAddr, err := testutil.SlotOwner(ctx, rdb, slot)
			if err != nil {
				t.Fatal(err)
			}
			if err := testutil.MoveSlot(ctx, rdb, slot, fromAddr, toAddr); err != nil {
				t.Fatalf("move slot %d from %s to %s: %v", slot, fromAddr, toAddr, err)
			}
			moment := time.Now()
			t.Cleanup(func() { // leave the cluster as it was
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				if err := testutil.MoveSlot(ctx, rdb, slot, toAddr, fromAddr); err != nil {
					t.Errorf("move slot %d back: %v", slot, err)
				}
			})
			t.Logf("slot %d of %s moved from %s to %s", slot, tc.topic(keys, "app", name), fromAddr, toAddr)
			// The control node has a client of its own, whose slot map is read now.
			fresh := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
			t.Cleanup(func() { _ = fresh.Close() })
			control := &channelstest.Sink{ID: "control"}
			channelstest.Subscribe(t, nodeOn(t, fresh, ch, tc.routing), "app", name, control)
			publishAcross(t, a, name, moment, sink, control)
		})
	}
}

// After a planned Sentinel failover the node's subscriptions must move to the new master:
// a publish made there reaches a node still subscribed on the demoted one only once that
// has re-synced as a replica (about 10 s today).
func TestSubscriptionFollowsASentinelFailover(t *testing.T) {
	st := testenv.SentinelTopology(t)
	if st == nil {
		t.Skip("REVERBGO_TEST_SENTINEL not set")
	}
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: st.Master, SentinelAddrs: st.Addrs})
	t.Cleanup(func() { _ = rdb.Close() })
	ch := "test:" + uuid.NewString()
	a, b := nodeOn(t, rdb, ch, cluster.RoutingInterest), nodeOn(t, rdb, ch, cluster.RoutingInterest)
	const name = "private-failover"
	sink := &channelstest.Sink{ID: "9.2"}
	channelstest.Subscribe(t, b, "app", name, sink)
	_ = a.PublishNoWait(channels.Message{AppID: "app", Channel: name, Frame: []byte("before")})
	sink.WaitFor(t, "the event published before the failover", func(f []string) bool { return slices.Contains(f, "before") })

	sc := redis.NewSentinelClient(&redis.Options{Addr: st.Addrs[0]})
	t.Cleanup(func() { _ = sc.Close() })
	ctx := context.Background()
	old, err := sc.GetMasterAddrByName(ctx, st.Master).Result()
	if err != nil {
		t.Fatal(err)
	}
	// A failover needs a replica in sync (after an earlier run's failover the demoted master
	// may still be re-syncing): wait for one, as its own INFO says.
	testutil.WaitForWithin(t, 60*time.Second, "a replica in sync with the master", func() bool {
		reps, err := sc.Replicas(ctx, st.Master).Result()
		if err != nil {
			return false
		}
		for _, r := range reps {
			c := redis.NewClient(&redis.Options{Addr: r["ip"] + ":" + r["port"]})
			info, err := c.Info(ctx, "replication").Result()
			_ = c.Close()
			if err == nil && strings.Contains(info, "master_link_status:up") && strings.Contains(info, "master_sync_in_progress:0") &&
				!strings.Contains(r["flags"], "down") && !strings.Contains(r["flags"], "disconnected") {
				return true
			}
		}
		return false
	})
	// A failover is refused while the last one settles, and one the sentinel accepted may
	// still be aborted (its view of the replicas lags a recent failover): ask again every
	// 8 s until the sentinel names a new master.
	var moment time.Time
	asked := time.Time{}
	testutil.WaitForWithin(t, 60*time.Second, "the sentinel to name a new master", func() bool {
		if time.Since(asked) > 8*time.Second {
			err := sc.Failover(ctx, st.Master).Err()
			if err != nil && !strings.Contains(err.Error(), "INPROG") && !strings.Contains(err.Error(), "NOGOODSLAVE") {
				t.Fatal(err)
			}
			if err == nil {
				asked = time.Now()
			}
		}
		now, err := sc.GetMasterAddrByName(ctx, st.Master).Result()
		moment = time.Now()
		return err == nil && !slices.Equal(now, old)
	})
	t.Logf("master %v → new master named after the failover", old)
	// The control node has a client of its own, which asks a sentinel for the master once
	// every sentinel names the new one.
	newMaster, _ := sc.GetMasterAddrByName(ctx, st.Master).Result()
	for _, addr := range st.Addrs[1:] {
		other := redis.NewSentinelClient(&redis.Options{Addr: addr})
		testutil.WaitForWithin(t, 10*time.Second, "sentinel "+addr+" to name the new master", func() bool {
			m, err := other.GetMasterAddrByName(ctx, st.Master).Result()
			return err == nil && slices.Equal(m, newMaster)
		})
		_ = other.Close()
	}
	fresh := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: st.Master, SentinelAddrs: st.Addrs})
	t.Cleanup(func() { _ = fresh.Close() })
	control := &channelstest.Sink{ID: "control"}
	channelstest.Subscribe(t, nodeOn(t, fresh, ch, cluster.RoutingInterest), "app", name, control)
	publishAcross(t, a, name, moment, sink, control)
}
