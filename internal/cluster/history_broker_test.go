package cluster_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/reverbgo/reverbgo/channels"
	"github.com/reverbgo/reverbgo/channels/channelstest"
	"github.com/reverbgo/reverbgo/internal/cluster"
	"github.com/reverbgo/reverbgo/ws"
)

// historyNodes is routedNodes with the cluster's History in every broker.
func historyNodes(t *testing.T, rdb redis.UniversalClient, n int, routing cluster.Routing) ([]*channels.Registry, *cluster.RedisHistory) {
	t.Helper()
	ch := "test:" + uuid.NewString()
	keys := cluster.NewKeySpace(ch, routing == cluster.RoutingInterest)
	hist := cluster.NewRedisHistory(rdb, keys)
	if err := cluster.LoadScripts(context.Background(), rdb); err != nil {
		t.Fatal(err)
	}
	regs := make([]*channels.Registry, n)
	for i := range regs {
		b, err := cluster.NewRedisBroker(context.Background(), rdb, cluster.RedisBrokerOptions{Channel: ch, Routing: routing, Keys: keys, History: hist})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		regs[i] = channels.NewRegistry(channels.Options{Broker: b})
		b.Start(regs[i].DeliverLocal)
		select {
		case <-b.Dialled():
		case <-time.After(10 * time.Second):
			t.Fatal("subscription connections never made")
		}
	}
	return regs, hist
}

// TestRedisBrokerAssignsSerials: recovery events published from two nodes reach the
// subscribers of both (the publisher's own included, through its subscription) with the
// serials 1..N in one order, every frame exactly once and byte-identical to what the history
// keeps; the publishing node delivers nothing unserialled. Before the writer ran the append
// script, a cluster's recovery events carried no serial at all.
func TestRedisBrokerAssignsSerials(t *testing.T) {
	for _, be := range backends(t) {
		for _, routing := range []cluster.Routing{cluster.RoutingInterest, cluster.RoutingBroadcast} {
			t.Run(be.Name+"/"+routing.String(), func(t *testing.T) {
				ctx := context.Background()
				rdb := be.Client(t)
				regs, hist := historyNodes(t, rdb, 2, routing)
				lim := &channels.HistoryLimits{Size: 1000, TTL: time.Minute}
				sinks := []*channelstest.Sink{{ID: "1.1"}, {ID: "2.2"}}
				for i, r := range regs {
					r.Subscribe("app", "c", sinks[i])
					if err := r.AwaitRouted(ctx, "app", "c"); err != nil {
						t.Fatal(err)
					}
				}
				const n = 200
				for i := range n {
					frame := ws.TextFrame([]byte(`{"event":"e","channel":"c","data":"` + strconv.Itoa(i) + `"}`))
					m := channels.Message{AppID: "app", Channel: "c", Frame: frame, Cacheable: true, Recovery: lim}
					if err := regs[i%2].PublishAll(ctx, []channels.Message{m}); err != nil {
						t.Fatal(err)
					}
				}
				for _, s := range sinks {
					s.WaitFor(t, "every serialled event", func(f []string) bool { return len(f) >= n })
				}
				_, evs, complete, err := hist.Since(ctx, "app", "c", channels.HistoryLimits{Size: 1000, TTL: time.Minute}, 0)
				if err != nil || !complete || len(evs) != n {
					t.Fatalf("history: %d events, complete %v, %v", len(evs), complete, err)
				}
				for si, s := range sinks {
					got := s.Frames()
					if len(got) != n {
						t.Fatalf("sink %d: %d frames, want %d", si, len(got), n)
					}
					for i, f := range got {
						if serial := channels.SerialOf([]byte(f)); serial != uint64(i+1) {
							t.Fatalf("sink %d frame %d: serial %d (%q)", si, i, serial, f)
						}
						if f != string(evs[i].Frame) {
							t.Fatalf("sink %d frame %d differs from the history's: %q vs %q", si, i, f, evs[i].Frame)
						}
					}
				}
			})
		}
	}
}

// TestHistoryAppendSkipsARetriedPublish: the writer retries a batch that may have reached
// Redis with the same (node, sequence number); the script then assigns nothing and
// publishes nothing, so a retry never makes a second serial for one event.
func TestHistoryAppendSkipsARetriedPublish(t *testing.T) {
	for _, be := range backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			ctx := context.Background()
			rdb := be.Client(t)
			keys := cluster.NewKeySpace("test-"+uuid.NewString(), true)
			h := cluster.NewRedisHistory(rdb, keys)
			if err := cluster.LoadScripts(ctx, rdb); err != nil {
				t.Fatal(err)
			}
			lim := channels.HistoryLimits{Size: 10, TTL: time.Minute}
			in := ws.TextFrame([]byte(`{"event":"e","channel":"c","data":"x"}`))
			steps := []struct {
				node string
				seq  uint64
				want uint64
			}{{"n1", 1, 1}, {"n1", 1, 0}, {"n2", 1, 2}, {"n1", 2, 3}, {"n1", 2, 0}, {"n1", 1, 0}, {"n2", 5, 4}}
			for _, s := range steps {
				n, _, err := cluster.HistoryAppended(h.AppendCmd(ctx, rdb, "app", "c", lim, "", in, "", nil, s.node, s.seq, channels.Position{}))
				if err != nil || n != s.want {
					t.Fatalf("append %s/%d: serial %d, want %d (%v)", s.node, s.seq, n, s.want, err)
				}
			}
			if _, evs, _, err := h.Since(ctx, "app", "c", lim, 0); err != nil || len(evs) != 4 {
				t.Fatalf("kept %d events, want 4 (%v)", len(evs), err)
			}
		})
	}
}

// TestRedisBrokerReloadsLostScripts: a Redis that lost its script cache (SCRIPT FLUSH: what
// a restart or a failover to a replica that never ran it leaves) answers the writer's
// EVALSHA with NOSCRIPT; the writer loads the scripts and retries, and nothing is lost.
func TestRedisBrokerReloadsLostScripts(t *testing.T) {
	for _, be := range backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			ctx := context.Background()
			rdb := be.Client(t)
			regs, _ := historyNodes(t, rdb, 1, cluster.RoutingInterest)
			s := &channelstest.Sink{ID: "1.1"}
			regs[0].Subscribe("app", "c", s)
			if err := regs[0].AwaitRouted(ctx, "app", "c"); err != nil {
				t.Fatal(err)
			}
			lim := &channels.HistoryLimits{Size: 10, TTL: time.Minute}
			for i := range 3 {
				if i == 1 {
					flush(t, rdb)
				}
				frame := ws.TextFrame([]byte(`{"event":"e","channel":"c","data":"` + strconv.Itoa(i) + `"}`))
				if err := regs[0].PublishAll(ctx, []channels.Message{{AppID: "app", Channel: "c", Frame: frame, Cacheable: true, Recovery: lim}}); err != nil {
					t.Fatal(err)
				}
				s.WaitFor(t, "event "+strconv.Itoa(i), func(f []string) bool { return len(f) == i+1 })
			}
			for i, f := range s.Frames() {
				if channels.SerialOf([]byte(f)) != uint64(i+1) {
					t.Fatalf("frame %d: %q", i, f)
				}
			}
		})
	}
}

// flush empties the script cache of every master.
func flush(t *testing.T, rdb redis.UniversalClient) {
	t.Helper()
	ctx := context.Background()
	if c, ok := rdb.(*redis.ClusterClient); ok {
		if err := c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return m.ScriptFlush(ctx).Err() }); err != nil {
			t.Fatal(err)
		}
		return
	}
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
}
