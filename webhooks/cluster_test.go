package webhooks

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/reverbgo/reverbgo/config"
	"github.com/reverbgo/reverbgo/internal/testutil"
)

// sharedStores returns, per backend (miniredis, and a real server when
// REVERBGO_TEST_REDIS_URL is set), a constructor of one more node's store on a Redis shared
// by the test.
func sharedStores(t *testing.T) map[string]func(t *testing.T) func() Store {
	out := map[string]func(t *testing.T) func() Store{}
	for _, be := range testutil.RedisBackends(t, false) {
		out[be.Name] = func(t *testing.T) func() Store {
			prefix := "t:" + uuid.NewString() + ":"
			return func() Store { return redisStore(be.Client(t), prefix, "") }
		}
	}
	return out
}

func clusterNode(t *testing.T, store Store, apps ...config.App) *Dispatcher {
	t.Helper()
	opts := testOptions(&syncBuffer{})
	opts.Store = store
	opts.Hold = 300 * time.Millisecond
	opts.Poll = 50 * time.Millisecond
	return start(t, opts, apps...)
}

// names of every event delivered with a 2xx, as name:channel[:user].
func delivered(r *receiver) []string {
	var out []string
	for _, dv := range r.successful() {
		for _, e := range dv.Events {
			s, _ := e["name"].(string)
			if c, ok := e["channel"].(string); ok {
				s += ":" + c
			}
			if u, ok := e["user_id"].(string); ok {
				s += ":" + u
			}
			out = append(out, s)
		}
	}
	return out
}

// TestClusterOnce: two nodes of one cluster send each webhook once: occupied when the first
// node gets a subscriber, vacated after the hold when the last node lost its last one, and
// an event emitted on one node is delivered by exactly one node.
func TestClusterOnce(t *testing.T) {
	for name, newBackend := range sharedStores(t) {
		t.Run(name, func(t *testing.T) {
			rcv := newReceiver(t, nil)
			a := app("1", "k", "s", hook(rcv.srv.URL))
			node := newBackend(t)
			n1, n2 := clusterNode(t, node(), a), clusterNode(t, node(), a)

			n1.Emit("1", Event{"name": ChannelOccupied, "channel": "c"})
			n2.Emit("1", Event{"name": ChannelOccupied, "channel": "c"})
			n1.Emit("1", Event{"name": "client_event", "channel": "c"})
			n2.Emit("1", Event{"name": ChannelVacated, "channel": "c"}) // n1 still has it
			testutil.WaitFor(t, "occupied and client_event", func() bool { return len(delivered(rcv)) == 2 })
			n1.Emit("1", Event{"name": ChannelVacated, "channel": "c"})
			testutil.WaitFor(t, "vacated", func() bool { return len(delivered(rcv)) == 3 })
			time.Sleep(500 * time.Millisecond) // longer than the hold and several polls: nothing else
			want := []string{"channel_occupied:c", "client_event:c", "channel_vacated:c"}
			if got := delivered(rcv); !slices.Equal(got, want) {
				t.Fatalf("delivered %v, want %v", got, want)
			}
		})
	}
}

// TestClusterHold: a user who leaves through one node and rejoins through another within
// the hold produces neither member_removed nor a second member_added; one who stays away
// produces member_removed once, after the hold.
func TestClusterHold(t *testing.T) {
	for name, newBackend := range sharedStores(t) {
		t.Run(name, func(t *testing.T) {
			rcv := newReceiver(t, nil)
			a := app("1", "k", "s", hook(rcv.srv.URL, MemberAdded, MemberRemoved))
			node := newBackend(t)
			n1, n2 := clusterNode(t, node(), a), clusterNode(t, node(), a)
			ev := func(name, user string) Event { return Event{"name": name, "channel": "presence-c", "user_id": user} }

			n1.Emit("1", ev(MemberAdded, "back"))
			n1.Emit("1", ev(MemberAdded, "gone"))
			began := time.Now()
			n1.Emit("1", ev(MemberRemoved, "back"))
			n1.Emit("1", ev(MemberRemoved, "gone"))
			testutil.WaitFor(t, "both removals held", func() bool {
				hs, _ := n2.store.Due(context.Background(), time.Now().Add(time.Hour), 10)
				return len(hs) == 2
			})
			n2.Emit("1", ev(MemberAdded, "back"))
			testutil.WaitFor(t, "gone removed", func() bool { return len(delivered(rcv)) == 3 })
			if el := time.Since(began); el < 250*time.Millisecond {
				t.Errorf("member_removed after %v, before the hold", el)
			}
			time.Sleep(400 * time.Millisecond)
			want := []string{"member_added:presence-c:back", "member_added:presence-c:gone", "member_removed:presence-c:gone"}
			if got := delivered(rcv); !slices.Equal(got, want) {
				t.Fatalf("delivered %v, want %v", got, want)
			}
		})
	}
}

// TestClusterRestart: events queued by a node that stops (its receiver refusing them) are
// sent, once, by the node that comes after it; nothing is dropped at Close.
func TestClusterRestart(t *testing.T) {
	for name, newBackend := range sharedStores(t) {
		t.Run(name, func(t *testing.T) {
			var up = make(chan struct{})
			rcv := newReceiver(t, func(int) int {
				select {
				case <-up:
					return 200
				default:
					return 500
				}
			})
			a := app("1", "k", "s", hook(rcv.srv.URL))
			node := newBackend(t)
			opts := testOptions(&syncBuffer{})
			opts.Store = node()
			opts.MaxBatch = 2
			n1 := New(opts)
			n1.SetApps([]config.App{a})
			for _, id := range []string{"c1", "c2", "c3"} {
				n1.Emit("1", Event{"name": "toolmark_confirmed", "call_id": id})
			}
			testutil.WaitFor(t, "a failed attempt", func() bool { return n1.Stats().Failed >= 1 })
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := n1.Close(ctx); err != nil {
				t.Fatal(err)
			}
			if s := n1.Stats(); s.Dropped != 0 || s.Sent != 0 {
				t.Fatalf("stopping node: %+v", s)
			}
			close(up)
			n2 := clusterNode(t, node(), a)
			testutil.WaitFor(t, "all three", func() bool { return n2.Stats().Sent == 3 })
			time.Sleep(200 * time.Millisecond)
			var ids []string
			for _, dv := range rcv.successful() {
				for _, e := range dv.Events {
					ids = append(ids, e["call_id"].(string))
				}
			}
			if !slices.Equal(ids, []string{"c1", "c2", "c3"}) {
				t.Fatalf("delivered %v, want each once in order", ids)
			}
		})
	}
}

// TestStoreOutage: while Redis is unreachable, emitted events wait in order in memory and
// reach the outbox once it is back.
func TestStoreOutage(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	rcv := newReceiver(t, nil)
	d := clusterNode(t, redisStore(rdb, "t:", "n1"), app("1", "k", "s", hook(rcv.srv.URL)))
	mr.Close()
	for _, n := range []string{"a", "b", "c"} {
		d.Emit("1", ev("client_event", n))
	}
	time.Sleep(300 * time.Millisecond) // several failed attempts
	if s := d.Stats(); s.Dropped != 0 || s.Pending != 3 {
		t.Fatalf("during the outage: %+v", s)
	}
	if err := mr.Restart(); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "delivered after the outage", func() bool { return len(rcv.eventNames()) == 3 })
	if got := rcv.eventNames(); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("delivered %v", got)
	}
}
