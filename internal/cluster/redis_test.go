package cluster_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/reverbgo/reverbgo/channels"
	"github.com/reverbgo/reverbgo/channels/channelstest"
	"github.com/reverbgo/reverbgo/internal/cluster"
	"github.com/reverbgo/reverbgo/internal/testutil"
)

// backends are the Redis servers the shared suites run against, Redis Cluster included.
func backends(t *testing.T) []testutil.RedisBackend { return testutil.RedisBackends(t, true) }

// testPrefix is a fresh key prefix per case (isolating cases on a shared real server) with
// a hash tag, as the node's own prefix has, so every script's keys share a Cluster slot.
func testPrefix() string { return "{test:" + uuid.NewString() + "}:" }

func TestMemoryBroker(t *testing.T) {
	channelstest.RunBroker(t, 1, func(t *testing.T, n int) []*channels.Registry {
		return []*channels.Registry{channels.NewRegistry(channels.Options{})}
	})
}

func TestRedisBroker(t *testing.T) {
	for _, be := range backends(t) {
		for _, routing := range []cluster.Routing{cluster.RoutingInterest, cluster.RoutingBroadcast} {
			t.Run(be.Name+"/"+routing.String(), func(t *testing.T) { runRedisBroker(t, be, routing) })
		}
	}
}

func runRedisBroker(t *testing.T, be testutil.RedisBackend, routing cluster.Routing) {
	channelstest.RunBroker(t, 2, func(t *testing.T, n int) []*channels.Registry {
		ch := "test:" + uuid.NewString() // isolates cases on a shared real server
		regs := make([]*channels.Registry, n)
		for i := range regs {
			b, err := cluster.NewRedisBroker(context.Background(), be.Client(t), cluster.RedisBrokerOptions{Channel: ch, Routing: routing})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = b.Close() })
			regs[i] = channels.NewRegistry(channels.Options{Broker: b})
			b.Start(regs[i].DeliverLocal)
		}
		return regs
	})
}

// layout is a key layout the Redis stores are tested under: the legacy single-tag one and
// the spread one (presence, counts and the socket index in their channel's bucket).
type layout struct {
	name string
	keys func() *cluster.KeySpace // a fresh key space, isolating cases on a shared server
}

func layouts() []layout {
	return []layout{
		{"legacy", func() *cluster.KeySpace { return cluster.LegacyKeySpace(testPrefix()) }},
		{"spread", func() *cluster.KeySpace { return cluster.NewKeySpace("test:"+uuid.NewString(), true) }},
	}
}

func newRedisPresenceIn(t *testing.T, rdb redis.UniversalClient, ks *cluster.KeySpace, node string, ttl time.Duration, onGone func(app, ch, user string)) *cluster.RedisPresence {
	p := cluster.NewRedisPresence(rdb, cluster.RedisPresenceOptions{Keys: ks, NodeID: node, NodeTimeout: ttl, OnGone: onGone})
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func newRedisPresence(t *testing.T, rdb redis.UniversalClient, prefix, node string, ttl time.Duration, onGone func(app, ch, user string)) *cluster.RedisPresence {
	p := cluster.NewRedisPresence(rdb, cluster.RedisPresenceOptions{Prefix: prefix, NodeID: node, NodeTimeout: ttl, OnGone: onGone})
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func TestRedisPresence(t *testing.T) {
	for _, be := range backends(t) {
		for _, l := range layouts() {
			t.Run(be.Name+"/"+l.name, func(t *testing.T) {
				channelstest.RunPresence(t, func(t *testing.T) channels.PresenceStore {
					return newRedisPresenceIn(t, be.Client(t), l.keys(), "", 0, nil)
				})
			})
		}
	}
}

// gone records OnGone calls.
type gone struct {
	mu  sync.Mutex
	got []string
}

func (g *gone) add(app, ch, user string) {
	g.mu.Lock()
	g.got = append(g.got, app+"/"+ch+"/"+user)
	g.mu.Unlock()
}

func (g *gone) list() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.got)
}

func TestRedisPresenceTwoNodes(t *testing.T) {
	ctx := context.Background()
	m := channels.Member{UserID: "u1", Info: []byte(`{"name":"a"}`)}
	for _, be := range backends(t) {
		for _, l := range layouts() {
			t.Run(be.Name+"/"+l.name, func(t *testing.T) {
				ks := l.keys()
				a := newRedisPresenceIn(t, be.Client(t), ks, "A", 0, nil)
				b := newRedisPresenceIn(t, be.Client(t), ks, "B", 0, nil)
				steps := []struct {
					name string
					do   func() (bool, error)
					want bool
				}{
					{"join on A is first", func() (bool, error) { return a.Join(ctx, "app", "presence-r", "1.1", m) }, true},
					{"same user on B is not first", func() (bool, error) { return b.Join(ctx, "app", "presence-r", "2.1", m) }, false},
					{"leave on A is not last", func() (bool, error) { return a.Leave(ctx, "app", "presence-r", "1.1", "u1") }, false},
					{"leave on B is last", func() (bool, error) { return b.Leave(ctx, "app", "presence-r", "2.1", "u1") }, true},
				}
				for i, st := range steps {
					got, err := st.do()
					if err != nil || got != st.want {
						t.Fatalf("%s: got %v err %v, want %v", st.name, got, err, st.want)
					}
					if i == 1 {
						for _, p := range []*cluster.RedisPresence{a, b} {
							ms, err := p.Members(ctx, "app", "presence-r")
							if err != nil || len(ms) != 1 || ms[0].UserID != "u1" || string(ms[0].Info) != `{"name":"a"}` {
								t.Fatalf("one member on both nodes: %+v %v", ms, err)
							}
						}
					}
				}
			})
		}
	}
}

// TestRedisPresenceReapsDeadNode: a node that stops heartbeating loses its members to a
// survivor, which reports each user whose last socket went once; users still connected
// through the survivor stay.
func TestRedisPresenceReapsDeadNode(t *testing.T) {
	ctx := context.Background()
	for _, be := range backends(t) {
		for _, l := range layouts() {
			t.Run(be.Name+"/"+l.name, func(t *testing.T) {
				ks := l.keys()
				const ttl = 300 * time.Millisecond
				var g gone
				// The survivor joins (and so lists itself, a heartbeat that reaps) before the
				// dead node exists, and the dead node never reaps: the reap comes from the
				// survivor's Start however slowly the joins run. (A join of the survivor's
				// after the dead node's last heartbeat had aged past 8/10 of ttl would reap
				// it before its sockets had all joined.)
				alive := newRedisPresenceIn(t, be.Client(t), ks, "alive", ttl, g.add)
				if _, err := alive.Join(ctx, "app", "presence-r", "2.1", channels.Member{UserID: "u2", Info: []byte(`{}`)}); err != nil {
					t.Fatal(err)
				}
				dead := cluster.NewRedisPresence(be.Client(t), cluster.RedisPresenceOptions{Keys: ks, NodeID: "dead", NodeTimeout: time.Hour})
				if err := dead.Heartbeat(ctx); err != nil { // one heartbeat, then silence: a crash
					t.Fatal(err)
				}
				for _, j := range []struct {
					p          *cluster.RedisPresence
					sock, user string
				}{{dead, "1.1", "u1"}, {dead, "1.2", "u1"}, {dead, "1.3", "u2"}, {dead, "1.4", "u3"}} {
					if _, err := j.p.Join(ctx, "app", "presence-r", j.sock, channels.Member{UserID: j.user, Info: []byte(`{}`)}); err != nil {
						t.Fatal(err)
					}
				}
				alive.Start()
				testutil.WaitFor(t, "the dead node reaped", func() bool { return len(g.list()) == 2 })
				got := g.list()
				slices.Sort(got)
				if !slices.Equal(got, []string{"app/presence-r/u1", "app/presence-r/u3"}) {
					t.Fatalf("gone = %q", got)
				}
				ms, err := alive.Members(ctx, "app", "presence-r")
				if err != nil || len(ms) != 1 || ms[0].UserID != "u2" {
					t.Fatalf("members after reap: %+v %v", ms, err)
				}
				if last, err := alive.Leave(ctx, "app", "presence-r", "2.1", "u2"); err != nil || !last {
					t.Fatalf("u2's remaining socket leaving: last=%v err=%v", last, err)
				}
			})
		}
	}
}

// TestRedisPresenceRejoinsAfterFlush: when Redis loses everything, the next heartbeat puts
// this node's members back.
func TestRedisPresenceRejoinsAfterFlush(t *testing.T) {
	ctx := context.Background()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	p := newRedisPresence(t, rdb, "", "n1", 0, nil)
	if err := p.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Join(ctx, "app", "presence-r", "1.1", channels.Member{UserID: "u1", Info: []byte(`{"a":1}`)}); err != nil {
		t.Fatal(err)
	}
	mr.FlushAll()
	if err := p.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	ms, err := p.Members(ctx, "app", "presence-r")
	if err != nil || len(ms) != 1 || string(ms[0].Info) != `{"a":1}` {
		t.Fatalf("members after flush and heartbeat: %+v %v", ms, err)
	}
	if last, err := p.Leave(ctx, "app", "presence-r", "1.1", "u1"); err != nil || !last {
		t.Fatalf("leave after rejoin: %v %v", last, err)
	}
}

// TestRedisPresenceRetriesFailedLeave: a leave that could not reach Redis is retried by the
// heartbeat, and a last leave is then reported through OnGone.
func TestRedisPresenceRetriesFailedLeave(t *testing.T) {
	ctx := context.Background()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	var g gone
	p := newRedisPresence(t, rdb, "", "n1", 0, g.add)
	if _, err := p.Join(ctx, "app", "presence-r", "1.1", channels.Member{UserID: "u1", Info: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	addr := mr.Addr()
	mr.Close()
	if _, err := p.Leave(ctx, "app", "presence-r", "1.1", "u1"); err == nil {
		t.Fatal("leave during an outage reported no error")
	}
	if err := mr.StartAddr(addr); err != nil {
		t.Fatal(err)
	}
	if err := p.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	if got := g.list(); !slices.Equal(got, []string{"app/presence-r/u1"}) {
		t.Fatalf("gone = %q", got)
	}
	if ms, err := p.Members(ctx, "app", "presence-r"); err != nil || len(ms) != 0 {
		t.Fatalf("members: %+v %v", ms, err)
	}
}

// TestRedisOccupancy: counts and channel lists answer for every node (a written-through
// channel's at once); a node that stops heartbeating drops out of the answers. (The socket
// index that used to live here is the bridge's: bridge/socketindex_test.go.)
func TestRedisOccupancy(t *testing.T) {
	ctx := context.Background()
	for _, be := range backends(t) {
		for _, l := range layouts() {
			t.Run(be.Name+"/"+l.name, func(t *testing.T) {
				ks := l.keys()
				const ttl = 1500 * time.Millisecond // room for the spread layout's first heartbeats on miniredis under -race
				var regs [2]*channels.Registry
				var occs [2]*cluster.RedisOccupancy
				var pres [2]*cluster.RedisPresence
				for i := range regs {
					pres[i] = cluster.NewRedisPresence(be.Client(t), cluster.RedisPresenceOptions{Keys: ks, NodeTimeout: ttl})
					occs[i] = cluster.NewRedisOccupancy(pres[i], "private-toolmark.", nil)
					t.Cleanup(occs[i].Close)
					regs[i] = channels.NewRegistry(channels.Options{Presence: pres[i], Occupancy: occs[i]})
					if err := pres[i].Heartbeat(ctx); err != nil {
						t.Fatal(err)
					}
				}
				regs[0].Subscribe("app", "news", &channelstest.Sink{ID: "1.1"})
				regs[1].Subscribe("app", "news", &channelstest.Sink{ID: "2.1"})
				regs[1].Subscribe("app", "private-toolmark.u1.c1", &channelstest.Sink{ID: "2.1"})
				// Written through: node A sees it as soon as Subscribe returned on node B.
				if n, err := occs[0].SubscriptionCount(ctx, "app", "private-toolmark.u1.c1"); err != nil || n != 1 {
					t.Fatalf("written-through channel right after its subscribe: %d %v", n, err)
				}
				regs[1].Subscribe("app2", "news", &channelstest.Sink{ID: "2.2"})
				testutil.WaitFor(t, "counts from both nodes", func() bool {
					n, err := occs[0].SubscriptionCount(ctx, "app", "news")
					return err == nil && n == 2
				})
				list, err := occs[0].Channels(ctx, "app", "")
				if err != nil || len(list) != 2 || list[0] != (channels.ChannelInfo{Name: "news", SubscriptionCount: 2}) || list[1].Name != "private-toolmark.u1.c1" {
					t.Fatalf("channels = %+v %v", list, err)
				}
				regs[1].Unsubscribe("app", "private-toolmark.u1.c1", "2.1")
				// Written through: gone from node A's answer without waiting for a batch.
				if n, err := occs[0].SubscriptionCount(ctx, "app", "private-toolmark.u1.c1"); err != nil || n != 0 {
					t.Fatalf("written-through channel after its unsubscribe: %d %v", n, err)
				}
				occs[0].SetConnections(func() map[string]int64 { return map[string]int64{"app": 1} })
				occs[1].SetConnections(func() map[string]int64 { return map[string]int64{"app": 3, "app2": 1} })
				testutil.WaitFor(t, "node B's connections seen from A", func() bool {
					n, err := occs[0].RemoteConnections(ctx, "app")
					return err == nil && n == 3
				})
				if n, err := occs[1].RemoteConnections(ctx, "app2"); err != nil || n != 0 {
					t.Fatalf("app2 elsewhere: %d %v", n, err)
				}
				// Node B goes silent: A keeps heartbeating and stops counting B.
				pres[0].Start()
				t.Cleanup(func() { _ = pres[0].Close() })
				testutil.WaitFor(t, "node B to drop out", func() bool {
					n, err := occs[0].SubscriptionCount(ctx, "app", "news")
					c, cerr := occs[0].RemoteConnections(ctx, "app")
					return err == nil && n == 1 && cerr == nil && c == 0
				})
			})
		}
	}
}

// TestRedisCacheAcrossNodes: a cache channel's last event published through node A is
// replayed by node B, an event through B replaces it for A, and a channel never published
// on is a miss everywhere.
func TestRedisCacheAcrossNodes(t *testing.T) {
	ctx := context.Background()
	for _, be := range backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			prefix := testPrefix()
			ch := "test:" + uuid.NewString()
			var regs [2]*channels.Registry
			for i := range regs {
				rdb := be.Client(t)
				cache := cluster.NewRedisCache(rdb, prefix)
				b, err := cluster.NewRedisBroker(ctx, rdb, cluster.RedisBrokerOptions{Channel: ch, Cache: cache})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = b.Close() })
				regs[i] = channels.NewRegistry(channels.Options{Broker: b, Cache: cache})
				b.Start(regs[i].DeliverLocal)
			}
			last := func(r *channels.Registry) string {
				f, ok, err := r.LastEvent(ctx, "app", "cache-news")
				if err != nil {
					t.Fatal(err)
				}
				if !ok {
					return "<miss>"
				}
				return string(f)
			}
			if got := last(regs[1]); got != "<miss>" {
				t.Fatalf("fresh channel: %q", got)
			}
			pub := func(r *channels.Registry, frame string, cacheable bool) {
				if err := r.Publish(ctx, channels.Message{AppID: "app", Channel: "cache-news", Frame: []byte(frame), Cacheable: cacheable}); err != nil {
					t.Fatal(err)
				}
			}
			pub(regs[0], "one", true)
			testutil.WaitFor(t, "node B to replay node A's event", func() bool { return last(regs[1]) == "one" })
			pub(regs[1], "two", true)
			testutil.WaitFor(t, "node A to replay node B's event", func() bool { return last(regs[0]) == "two" })
			pub(regs[0], "internal", false) // pusher_internal and client events are never cached
			pub(regs[0], "three", true)
			testutil.WaitFor(t, "node B to see three", func() bool { return last(regs[1]) == "three" })
			// A node that starts now never delivered it: its answer can only come from Redis.
			rdb := be.Client(t)
			cache := cluster.NewRedisCache(rdb, prefix)
			late := channels.NewRegistry(channels.Options{Cache: cache})
			if got := last(late); got != "three" {
				t.Fatalf("a node started later replays %q", got)
			}
		})
	}
}
