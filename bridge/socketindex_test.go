package bridge_test

import (
	"context"
	"errors"
	"maps"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/reverbgo/reverbgo/bridge"
	"github.com/reverbgo/reverbgo/internal/cluster"
	"github.com/reverbgo/reverbgo/internal/testutil"
)

// indexNode is one node's socket index, with its presence when it runs over Redis.
type indexNode struct {
	idx  bridge.SocketIndex
	pres *cluster.RedisPresence // nil for the memory index
	keys *cluster.KeySpace      // the cluster's key names in Redis
}

// indexBackend builds n nodes of one cluster; the memory index has one node only.
type indexBackend struct {
	name     string
	maxNodes int
	nodes    func(t *testing.T, n int) ([]indexNode, redis.UniversalClient)
}

// indexTTL is the node timeout of the Redis cases: short, so that a silent node dies fast,
// with room for a first heartbeat of the spread layout on miniredis under -race (64 gate
// scripts, a Lua state each: ~150 ms per node).
const indexTTL = 1500 * time.Millisecond

func indexBackends(t *testing.T) []indexBackend {
	out := []indexBackend{{"memory", 1, func(t *testing.T, n int) ([]indexNode, redis.UniversalClient) {
		return []indexNode{{idx: bridge.NewMemorySocketIndex()}}, nil
	}}}
	for _, be := range testutil.RedisBackends(t, true) {
		for _, spread := range []bool{false, true} {
			name := be.Name + "/legacy"
			if spread {
				name = be.Name + "/spread" // each socket's entries in its bucket
			}
			out = append(out, indexBackend{name, 3, func(t *testing.T, n int) ([]indexNode, redis.UniversalClient) {
				// A fresh key space per case, as the node's own ({reverbgo:<channel>}:).
				ks := cluster.NewKeySpace("test:"+uuid.NewString(), spread)
				var rdb redis.UniversalClient
				out := make([]indexNode, n)
				for i := range out {
					rdb = be.Client(t)
					p := cluster.NewRedisPresence(rdb, cluster.RedisPresenceOptions{Keys: ks, NodeTimeout: indexTTL})
					out[i] = indexNode{bridge.NewRedisSocketIndex(rdb, p, nil), p, ks}
					if err := p.Heartbeat(context.Background()); err != nil {
						t.Fatal(err)
					}
				}
				return out, rdb
			}})
		}
	}
	return out
}

// sockets is the name of node n's index hash holding socket.
func (n indexNode) sockets(socket string) string {
	return n.keys.NodeBucketKey(n.pres.NodeID(), "sockets", n.keys.SocketBucket(socket))
}

// TestSocketIndex runs every case on every backend: the single-node cases on each node of a
// cluster too (on Redis looked up from another node), the multi-node ones on Redis only.
func TestSocketIndex(t *testing.T) {
	cases := []struct {
		name  string
		nodes int
		f     func(t *testing.T, writer, reader bridge.SocketIndex)
	}{
		{"CredentialGoesWithTheNextSubscribe", 1, credentialWithSubscribe},
		{"CredentialReplacesWhenSubscribed", 1, credentialReplaces},
		{"LastChannelForgetsTheSocket", 1, lastChannelForgets},
		{"UnknownSocket", 1, unknownSocket},
	}
	for _, be := range indexBackends(t) {
		t.Run(be.name, func(t *testing.T) {
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					ns, _ := be.nodes(t, 1)
					c.f(t, ns[0].idx, ns[0].idx)
				})
				if be.maxNodes < 2 {
					continue
				}
				t.Run(c.name+"/OtherNode", func(t *testing.T) {
					ns, _ := be.nodes(t, 2)
					c.f(t, ns[1].idx, ns[0].idx)
				})
			}
			if be.maxNodes < 3 {
				return
			}
			t.Run("DeadNodeDropsOutAndIsReaped", func(t *testing.T) { deadNodeDropsOut(t, be) })
			t.Run("ResyncAfterRedisLostTheNode", func(t *testing.T) { resyncAfterLoss(t, be) })
			t.Run("ResyncSoonRepairsLostWrites", func(t *testing.T) { resyncSoonRepairs(t, be) })
			t.Run("FailedWriteIsRewrittenAtTheNextHeartbeat", func(t *testing.T) { failedWriteRewritten(t, be) })
		})
	}
}

const (
	pageCh  = "private-toolmark.u1.c1"
	otherCh = "private-toolmark.u1.c2"
)

func lookup(t *testing.T, x bridge.SocketIndex, socket string) (string, map[string]string, bool) {
	t.Helper()
	app, subs, ok, err := x.Socket(context.Background(), socket)
	if err != nil {
		t.Fatal(err)
	}
	return app, subs, ok
}

func wantSocket(t *testing.T, x bridge.SocketIndex, socket, app string, subs map[string]string) {
	t.Helper()
	gotApp, got, ok := lookup(t, x, socket)
	if !ok || gotApp != app || !maps.Equal(got, subs) {
		t.Fatalf("socket %s = %q %q %v, want %q %q", socket, gotApp, got, ok, app, subs)
	}
}

func credentialWithSubscribe(t *testing.T, w, r bridge.SocketIndex) {
	w.SetCredential("app", pageCh, "2.1", "abc123")
	w.Subscribed("app", pageCh, "2.1")
	w.Subscribed("app", otherCh, "2.1") // no credential
	wantSocket(t, r, "2.1", "app", map[string]string{pageCh: "abc123", otherCh: ""})
	// A credential set for another socket's channel stays with that socket.
	w.SetCredential("app", pageCh, "2.2", "def456")
	w.Subscribed("app", pageCh, "2.2")
	wantSocket(t, r, "2.2", "app", map[string]string{pageCh: "def456"})
}

func credentialReplaces(t *testing.T, w, r bridge.SocketIndex) {
	w.Subscribed("app", pageCh, "2.1")
	w.SetCredential("app", pageCh, "2.1", "abc123")
	// The new hash reaches other nodes with the socket's next change.
	w.Subscribed("app", otherCh, "2.1")
	wantSocket(t, r, "2.1", "app", map[string]string{pageCh: "abc123", otherCh: ""})
}

func lastChannelForgets(t *testing.T, w, r bridge.SocketIndex) {
	w.Subscribed("app", pageCh, "2.1")
	w.Subscribed("app", otherCh, "2.1")
	w.Unsubscribed("app", pageCh, "2.1")
	wantSocket(t, r, "2.1", "app", map[string]string{otherCh: ""})
	w.Unsubscribed("app", otherCh, "2.1")
	if _, _, ok := lookup(t, r, "2.1"); ok {
		t.Fatal("socket still indexed after its last channel")
	}
	// A new subscription after that starts from nothing: no stale credential.
	w.SetCredential("app", pageCh, "2.1", "old")
	w.Unsubscribed("app", pageCh, "2.1") // e.g. the subscribe failed and was undone
	w.Subscribed("app", pageCh, "2.1")
	wantSocket(t, r, "2.1", "app", map[string]string{pageCh: ""})
}

func unknownSocket(t *testing.T, w, r bridge.SocketIndex) {
	w.Subscribed("app", pageCh, "2.1")
	if _, _, ok := lookup(t, r, "2.9"); ok {
		t.Fatal("an unknown socket was found")
	}
}

// deadNodeDropsOut: node C stops heartbeating; A stops finding C's sockets within the node
// timeout, and once B (heartbeating) reaps C, C's hash is gone from Redis.
func deadNodeDropsOut(t *testing.T, be indexBackend) {
	ns, rdb := be.nodes(t, 3)
	ns[2].idx.Subscribed("app", pageCh, "3.1")
	ns[1].idx.Subscribed("app", pageCh, "2.1")
	wantSocket(t, ns[0].idx, "3.1", "app", map[string]string{pageCh: ""})
	key := ns[2].sockets("3.1")
	if n, err := rdb.Exists(context.Background(), key).Result(); err != nil || n != 1 {
		t.Fatalf("node C's hash %s: exists=%d %v", key, n, err)
	}
	for _, n := range ns[:2] {
		n.pres.Start()
		t.Cleanup(func() { _ = n.pres.Close() })
	}
	testutil.WaitFor(t, "node C's socket to drop out and its hash to be reaped", func() bool {
		_, _, ok, err := ns[0].idx.Socket(context.Background(), "3.1")
		n, xerr := rdb.Exists(context.Background(), key).Result()
		return err == nil && !ok && xerr == nil && n == 0
	})
	wantSocket(t, ns[0].idx, "2.1", "app", map[string]string{pageCh: ""})
}

// resyncAfterLoss: Redis forgets node B (a restart without persistence); B's next heartbeat
// writes its hash again from memory, so A finds B's socket again with its credential.
func resyncAfterLoss(t *testing.T, be indexBackend) {
	ctx := context.Background()
	ns, rdb := be.nodes(t, 3)
	b := ns[1]
	b.idx.SetCredential("app", pageCh, "2.1", "abc123")
	b.idx.Subscribed("app", pageCh, "2.1")
	key := b.sockets("2.1")
	nodesKey := b.keys.NodeSetKey() // the heartbeat set (cluster.RedisPresence)
	if err := rdb.Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ZRem(ctx, nodesKey, b.pres.NodeID()).Err(); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := lookup(t, ns[0].idx, "2.1"); ok {
		t.Fatal("found a socket whose node Redis forgot")
	}
	if err := b.pres.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	wantSocket(t, ns[0].idx, "2.1", "app", map[string]string{pageCh: "abc123"})
}

// resyncSoonRepairs: a failover lost node B's last HSET (socket 2.1) and an HDEL (socket 2.9
// left) while B stayed listed, so no heartbeat resyncs by itself; after the registry's
// ResyncSoon (the server calls it on every restored subscription gap) B's next heartbeat
// writes its hashes again: A finds 2.1 and no longer finds 2.9.
func resyncSoonRepairs(t *testing.T, be indexBackend) {
	ctx := context.Background()
	ns, rdb := be.nodes(t, 2)
	b := ns[1]
	b.idx.Subscribed("app", pageCh, "2.1")
	b.idx.Subscribed("app", pageCh, "2.2")
	b.idx.Subscribed("app", pageCh, "2.9")
	b.idx.Unsubscribed("app", pageCh, "2.9")
	stale, err := rdb.HGet(ctx, b.sockets("2.2"), "2.2").Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.HDel(ctx, b.sockets("2.1"), "2.1").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.HSet(ctx, b.sockets("2.9"), "2.9", stale).Err(); err != nil {
		t.Fatal(err)
	}
	if err := b.pres.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := lookup(t, ns[0].idx, "2.1"); ok {
		t.Fatal("a heartbeat alone repaired the lost entry: the case does not test ResyncSoon")
	}
	b.pres.ResyncSoon()
	if err := b.pres.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	wantSocket(t, ns[0].idx, "2.1", "app", map[string]string{pageCh: ""})
	wantSocket(t, ns[0].idx, "2.2", "app", map[string]string{pageCh: ""})
	if _, _, ok := lookup(t, ns[0].idx, "2.9"); ok {
		t.Fatal("a socket that left is still found after the resync")
	}
}

// failPipelines fails the pipelines of its client while armed (a write-through that times
// out while the node stays listed and its subscriptions up).
type failPipelines struct{ armed *atomic.Bool }

func (failPipelines) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (failPipelines) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h failPipelines) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.armed.Load() {
			return errors.New("write failed (test)")
		}
		return next(ctx, cmds)
	}
}

// A socket-index write that fails is not left to a failover's resync: the next heartbeat
// writes the node's hashes again from memory.
func failedWriteRewritten(t *testing.T, be indexBackend) {
	ctx := context.Background()
	ns, rdb := be.nodes(t, 1) // rdb is the index's own client
	n := ns[0]
	var armed atomic.Bool
	rdb.AddHook(failPipelines{&armed})
	armed.Store(true)
	n.idx.Subscribed("app", pageCh, "2.1")
	armed.Store(false)
	if ok, err := rdb.HExists(ctx, n.sockets("2.1"), "2.1").Result(); err != nil || ok {
		t.Fatalf("the failed write reached Redis (%v, %v): the case tests nothing", ok, err)
	}
	if err := n.pres.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, err := rdb.HExists(ctx, n.sockets("2.1"), "2.1").Result(); err != nil || !ok {
		t.Fatalf("after a heartbeat the entry is still missing (%v, %v)", ok, err)
	}
}
