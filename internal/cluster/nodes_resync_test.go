package cluster_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/reverbgo/reverbgo/internal/cluster"
)

// fakeState is a NodeState that keeps one field in its per-node key of bucket 0, writes it
// again on Resync, counts its Resyncs and fails the first fail of them.
type fakeState struct {
	name string
	key  string
	rdb  redis.UniversalClient

	mu   sync.Mutex
	runs int // Resyncs, failed ones included
	fail int
}

func (f *fakeState) resync(ctx context.Context) error {
	f.mu.Lock()
	f.runs++
	failing := f.fail > 0
	if failing {
		f.fail--
	}
	f.mu.Unlock()
	if failing {
		return errors.New("resync failed (fake)")
	}
	return f.rdb.HSet(ctx, f.key, "v", f.name).Err()
}

func (f *fakeState) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.runs
}

// resyncEnv is one node's registry with the written-through counts (a real RedisOccupancy)
// and fake states: alpha and beta, and once, resynced only when the registry lost the node.
type resyncEnv struct {
	t     *testing.T
	rdb   redis.UniversalClient
	ks    *cluster.KeySpace
	nodes *cluster.RedisNodes
	fakes map[string]*fakeState
	subs  string // the occupancy hash holding subsField
}

const (
	resyncNode = "n1"
	subsCh     = "private-toolmark.u1.c1"
	subsField  = "app\x00" + subsCh
	occupancy  = "occupancy" // the real state's name among the fakes' in has and del
)

func newResyncEnv(t *testing.T, rdb redis.UniversalClient, ks *cluster.KeySpace, fail map[string]int) *resyncEnv {
	e := &resyncEnv{t: t, rdb: rdb, ks: ks, fakes: map[string]*fakeState{},
		subs: ks.NodeBucketKey(resyncNode, "subs", ks.Bucket("app", subsCh))}
	e.nodes = cluster.NewRedisNodes(rdb, cluster.RedisNodesOptions{Keys: ks, NodeID: resyncNode})
	t.Cleanup(func() { _ = e.nodes.Close() })
	o := cluster.NewRedisOccupancy(e.nodes, "private-toolmark.", nil)
	t.Cleanup(o.Close)
	for _, name := range []string{"alpha", "beta", "once"} {
		f := &fakeState{name: name, key: ks.NodeBucketKey(resyncNode, name, 0), rdb: rdb}
		e.fakes[name] = f
		e.nodes.Track(cluster.NodeState{Name: name, BucketKeys: []string{name}, Resync: f.resync, RejoinOnly: name == "once"})
	}
	e.beat() // the first heartbeat is a rejoin: every state writes itself
	o.Subscribed("app", subsCh, "1.1")
	for _, s := range []string{occupancy, "alpha", "beta", "once"} {
		if !e.has(s) {
			t.Fatalf("%s not written at the start", s)
		}
	}
	for name, f := range e.fakes { // the cases count from here
		f.mu.Lock()
		f.runs, f.fail = 0, fail[name]
		f.mu.Unlock()
	}
	return e
}

func (e *resyncEnv) beat() {
	e.t.Helper()
	if err := e.nodes.Heartbeat(context.Background()); err != nil {
		e.t.Fatal(err)
	}
}

// has reports whether state s's entry is in Redis.
func (e *resyncEnv) has(s string) bool {
	e.t.Helper()
	key, field := e.subs, subsField
	if f := e.fakes[s]; f != nil {
		key, field = f.key, "v"
	}
	n, err := e.rdb.HExists(context.Background(), key, field).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

// lose drops the entries of states ss, as a failover to a replica that missed them would.
func (e *resyncEnv) lose(ss ...string) {
	e.t.Helper()
	for _, s := range ss {
		key, field := e.subs, subsField
		if f := e.fakes[s]; f != nil {
			key, field = f.key, "v"
		}
		if err := e.rdb.HDel(context.Background(), key, field).Err(); err != nil {
			e.t.Fatal(err)
		}
	}
}

// rejoin makes Redis forget the node (a restart), so its next heartbeat resyncs everything.
func (e *resyncEnv) rejoin() {
	e.t.Helper()
	if err := e.rdb.ZRem(context.Background(), e.ks.NodeSetKey(), resyncNode).Err(); err != nil {
		e.t.Fatal(err)
	}
}

// want checks which states' entries are in Redis and how often each fake resynced.
func (e *resyncEnv) want(step string, present map[string]bool, runs map[string]int) {
	e.t.Helper()
	for s, p := range present {
		if got := e.has(s); got != p {
			e.t.Errorf("%s: %s in Redis = %v, want %v", step, s, got, p)
		}
	}
	for s, n := range runs {
		if got := e.fakes[s].count(); got != n {
			e.t.Errorf("%s: %s resynced %d times, want %d", step, s, got, n)
		}
	}
	if e.t.Failed() {
		e.t.FailNow()
	}
}

// TestRedisNodesResyncSoon: the registry's ResyncSoon (the server calls it on every restored
// subscription gap) makes the next heartbeat resync every tracked state but the RejoinOnly
// ones, retries a failed one alone, and runs none twice when that heartbeat is a rejoin.
func TestRedisNodesResyncSoon(t *testing.T) {
	all := map[string]bool{occupancy: true, "alpha": true, "beta": true, "once": true}
	cases := []struct {
		name string
		fail map[string]int // Resyncs to fail, by state
		run  func(e *resyncEnv)
	}{
		{"one heartbeat repairs a deleted key of every state", nil, func(e *resyncEnv) {
			e.lose(occupancy, "alpha", "beta", "once")
			e.beat()
			e.want("a heartbeat alone", map[string]bool{occupancy: false, "alpha": false, "beta": false},
				map[string]int{"alpha": 0, "beta": 0, "once": 0})
			e.nodes.ResyncSoon()
			e.beat()
			e.want("after ResyncSoon", map[string]bool{occupancy: true, "alpha": true, "beta": true, "once": false},
				map[string]int{"alpha": 1, "beta": 1, "once": 0})
			e.beat()
			e.want("the heartbeat after", nil, map[string]int{"alpha": 1, "beta": 1, "once": 0})
		}},
		{"a failing resync is retried alone at the next heartbeat", map[string]int{"beta": 1}, func(e *resyncEnv) {
			e.lose(occupancy, "alpha", "beta")
			e.nodes.ResyncSoon()
			e.beat()
			e.want("beta failing", map[string]bool{occupancy: true, "alpha": true, "beta": false},
				map[string]int{"alpha": 1, "beta": 1, "once": 0})
			e.lose(occupancy, "alpha") // a rerun of theirs would write them again
			e.beat()
			e.want("the retry", map[string]bool{occupancy: false, "alpha": false, "beta": true},
				map[string]int{"alpha": 1, "beta": 2, "once": 0})
			e.beat()
			e.want("the heartbeat after", nil, map[string]int{"alpha": 1, "beta": 2, "once": 0})
		}},
		{"a rejoin heartbeat runs none twice", nil, func(e *resyncEnv) {
			e.lose(occupancy, "alpha", "beta", "once")
			e.nodes.ResyncSoon()
			e.rejoin()
			e.beat()
			e.want("the rejoin", all, map[string]int{"alpha": 1, "beta": 1, "once": 1})
			e.beat()
			e.want("the heartbeat after", nil, map[string]int{"alpha": 1, "beta": 1, "once": 1})
		}},
		{"a failed rejoin resync: the failed state and those after it retried alone", map[string]int{"alpha": 1}, func(e *resyncEnv) {
			e.lose(occupancy, "alpha", "beta", "once")
			e.rejoin()
			if err := e.nodes.Heartbeat(context.Background()); err == nil {
				e.t.Fatal("the rejoin heartbeat reported no error with alpha's resync failing")
			}
			e.want("the failed rejoin", map[string]bool{occupancy: true, "alpha": false, "beta": false, "once": false},
				map[string]int{"alpha": 1, "beta": 0, "once": 0})
			e.beat() // listed again, so no rejoin: the retries (once, RejoinOnly, is left to its verify)
			e.want("the heartbeat after", map[string]bool{occupancy: true, "alpha": true, "beta": true, "once": false},
				map[string]int{"alpha": 2, "beta": 1, "once": 0})
			e.beat()
			e.want("the next one", nil, map[string]int{"alpha": 2, "beta": 1, "once": 0})
		}},
		{"a rejoin's resync covers a pending retry", map[string]int{"beta": 1}, func(e *resyncEnv) {
			e.nodes.ResyncSoon()
			e.beat()
			e.want("beta failing", nil, map[string]int{"alpha": 1, "beta": 1, "once": 0})
			e.rejoin()
			e.beat()
			e.want("the rejoin", all, map[string]int{"alpha": 2, "beta": 2, "once": 1})
			e.beat()
			e.want("the heartbeat after", nil, map[string]int{"alpha": 2, "beta": 2, "once": 1})
		}},
	}
	for _, be := range backends(t) {
		for _, l := range layouts() {
			t.Run(be.Name+"/"+l.name, func(t *testing.T) {
				for _, c := range cases {
					t.Run(c.name, func(t *testing.T) {
						c.run(newResyncEnv(t, be.Client(t), l.keys(), c.fail))
					})
				}
			})
		}
	}
}
