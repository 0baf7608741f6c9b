package pusher

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/reverbgo/reverbgo/channels"
	"github.com/reverbgo/reverbgo/internal/cluster"
	"github.com/reverbgo/reverbgo/internal/testutil"
)

// recoveryNodes are n servers of one cluster on be, each with a broker that assigns serials
// (the cluster's History, as cmd/reverbgo wires it) and recovery on every channel.
func recoveryNodes(t *testing.T, be testutil.RedisBackend, n, size int, routing cluster.Routing) []*tserver {
	t.Helper()
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	rdb := be.Client(t)
	ch := "rec:" + uuid.NewString()
	keys := cluster.NewKeySpace(ch, routing == cluster.RoutingInterest)
	hist := cluster.NewRedisHistory(rdb, keys)
	if err := cluster.LoadScripts(ctx, rdb); err != nil {
		t.Fatal(err)
	}
	out := make([]*tserver, n)
	for i := range out {
		broker, err := cluster.NewRedisBroker(ctx, rdb, cluster.RedisBrokerOptions{Channel: ch, Routing: routing, Keys: keys, Logger: quiet, History: hist})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = broker.Close() })
		reg := channels.NewRegistry(channels.Options{Broker: broker})
		out[i] = newServer(t, withRecovery(size, "*"), withOptions(func(o *Options) {
			o.Registry, o.History = reg, hist
		}))
		broker.SetRecovery(out[i].s.RecoveryLimits, out[i].s.ToldGap) // as cmd/reverbgo wires it
		broker.Start(reg.DeliverLocal)
		<-broker.Dialled()
	}
	return out
}

// TestRecoveryClusterResume: on a cluster a subscriber on node A sees the serials of events
// published through node A and node B in one sequence; after it goes away it resumes on
// node B and gets exactly the events it missed, byte-identical to their live frames, then
// live events from either node. With scaling the resume used to answer not_enabled.
func TestRecoveryClusterResume(t *testing.T) {
	for _, be := range testutil.RedisBackends(t, true) {
		for _, routing := range []cluster.Routing{cluster.RoutingInterest, cluster.RoutingBroadcast} {
			t.Run(be.Name+"/"+routing.String(), func(t *testing.T) {
				nodes := recoveryNodes(t, be, 2, 100, routing)
				a, b := nodes[0], nodes[1]
				c := a.connect(t)
				ok := c.Subscribe("orders")
				pos := positionOf(t, ok)
				if pos.Serial == nil || *pos.Serial != 0 || pos.Epoch == "" {
					t.Fatalf("subscription_succeeded = %s", ok.Raw)
				}
				live := map[uint64]string{}
				for i := 1; i <= 6; i++ {
					nodes[i%2].apiPublish(t, "orders", "e", strconv.Itoa(i), "")
					ev := c.WaitEvent("e", "orders")
					if s := positionOf(t, ev).Serial; s == nil || *s != uint64(i) || ev.DataString(t) != strconv.Itoa(i) {
						t.Fatalf("live %d = %s", i, ev.Raw)
					}
					live[uint64(i)] = string(ev.Raw)
				}
				old := c.SocketID
				_ = c.WS.Close()
				for i := 7; i <= 10; i++ { // missed; 9 is the old socket's own (toOthers())
					except := ""
					if i == 9 {
						except = old
					}
					nodes[i%2].apiPublish(t, "orders", "e", strconv.Itoa(i), except)
				}
				r := b.connect(t)
				subscribeResume(r, "orders", map[string]any{"epoch": pos.Epoch, "serial": 4, "socket_id": old})
				ok = r.WaitEvent("pusher_internal:subscription_succeeded", "orders")
				if p := positionOf(t, ok); p.Serial == nil || *p.Serial < 4 || p.Epoch != pos.Epoch {
					t.Fatalf("resumed at %s, want epoch %s", ok.Raw, pos.Epoch)
				}
				// The publishes of 7..10 are queued for Redis by two nodes' writers: their serials
				// follow Redis's order, and some may land after the position and come live.
				// Either way: the events 5..10 but 9 (toOthers() of the old socket), each once,
				// in serial order.
				last, got := uint64(4), map[string]bool{}
				for range 5 {
					ev := r.Next()
					s := positionOf(t, ev).Serial
					if ev.Event != "e" || s == nil || *s <= last || got[ev.DataString(t)] {
						t.Fatalf("after serial %d got %s", last, ev.Raw)
					}
					if f, seen := live[*s]; seen && f != string(ev.Raw) {
						t.Fatalf("replayed %s, live it was %s", ev.Raw, f)
					}
					last, got[ev.DataString(t)] = *s, true
				}
				for _, d := range []string{"5", "6", "7", "8", "10"} {
					if !got[d] {
						t.Fatalf("event %s missing after the resume (got %v)", d, got)
					}
				}
				a.apiPublish(t, "orders", "live", "x", "")
				if ev := r.Next(); ev.Event != "live" || *positionOf(t, ev).Serial != 11 {
					t.Fatalf("after the resume got %s, want the live event 11", ev.Raw)
				}
				r.ExpectNone("", "orders")
			})
		}
	}
}

// TestRecoveryClusterNoGapOnRace: while node B publishes, subscribers resume from 0 on node
// A: each sees every serial exactly once and in order, the replay joining the live stream
// across nodes (the position is read after A's Redis subscription is confirmed).
func TestRecoveryClusterNoGapOnRace(t *testing.T) {
	for _, be := range testutil.RedisBackends(t, true) {
		t.Run(be.Name, func(t *testing.T) {
			nodes := recoveryNodes(t, be, 2, 1000, cluster.RoutingInterest)
			a, b := nodes[0], nodes[1]
			c0 := b.connect(t)
			epoch := positionOf(t, c0.Subscribe("orders")).Epoch
			const total = 300
			done := make(chan struct{})
			go func() {
				defer close(done)
				for i := 1; i <= total; i++ {
					b.apiPublish(t, "orders", "e", strconv.Itoa(i), "")
				}
			}()
			var clients []*client
			for range 8 {
				c := a.connect(t)
				subscribeResume(c, "orders", map[string]any{"epoch": epoch, "serial": 0})
				clients = append(clients, c)
				time.Sleep(2 * time.Millisecond) // spread the joins over the publishes
			}
			<-done
			for i, c := range clients {
				c.WaitEvent("pusher_internal:subscription_succeeded", "orders")
				for want := uint64(1); want <= total; want++ {
					ev := c.Next()
					if p := positionOf(t, ev); ev.Event != "e" || p.Serial == nil || *p.Serial != want {
						t.Fatalf("client %d: got %s, want serial %d", i, ev.Raw, want)
					}
				}
				c.ExpectNone("e", "orders")
			}
		})
	}
}
