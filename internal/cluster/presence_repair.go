package cluster

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/reverbgo/reverbgo/channels"
	"github.com/reverbgo/reverbgo/internal/redisx"
)

// The RedisPresence's part in the node registry (RedisNodes): the NodeState it tracks,
// which repairs this node's memberships when Redis lost them (rejoin, verify), retries
// failed leaves, and reaps a dead node's memberships.

// Start starts the node registry's heartbeat when the store made its own (a shared registry
// is started by its owner).
func (p *RedisPresence) Start() {
	if p.own {
		p.nodes.Start()
	}
}

// Heartbeat runs one heartbeat of the registry (see NodeRegistry.Heartbeat).
func (p *RedisPresence) Heartbeat(ctx context.Context) error { return p.nodes.Heartbeat(ctx) }

// NodeID is this node's id, the one NodeKey and LiveNodes use.
func (p *RedisPresence) NodeID() string { return p.node }

// LiveNodes lists the registry's live nodes (NodeRegistry.LiveNodes).
func (p *RedisPresence) LiveNodes(ctx context.Context) ([]string, error) {
	return p.nodes.LiveNodes(ctx)
}

// TrackNodeState registers per-node state with the registry (RedisNodes.TrackNodeState).
func (p *RedisPresence) TrackNodeState(resync func(context.Context) error, suffixes ...string) {
	p.nodes.TrackNodeState(resync, suffixes...)
}

func (p *RedisPresence) redisNodes() *RedisNodes { return p.nodes }

// NodeKeyTTL is the registry's per-node key TTL (RedisNodes.NodeKeyTTL).
func (p *RedisPresence) NodeKeyTTL() time.Duration { return p.nodes.NodeKeyTTL() }

// Close closes the registry when the store made its own: the heartbeat stops and this node
// reaps its own leftovers (memberships whose leave never reached Redis), reporting them
// through OnGone, so a clean shutdown leaves nothing for the survivors. A shared registry is
// closed by its owner. Close the pusher server first so that its sockets leave normally.
func (p *RedisPresence) Close() error {
	if p.own {
		return p.nodes.Close()
	}
	return nil
}

// Drain retries failed leaves and reaps this node's leftover memberships (announcing them
// through OnGone) while the node is still listed; the registry's Close, later, reaps whatever
// joined since and unlists the node. The mirror forgets the reaped memberships first, so the
// heartbeat, still running, does not join them again.
func (p *RedisPresence) Drain(ctx context.Context) error {
	p.mu.Lock()
	p.mirror = map[string]channels.Member{}
	p.mu.Unlock()
	_ = p.retryLeaves(ctx)
	_, err := p.Reap(ctx, p.node, time.Now().Add(time.Hour))
	return err
}

// tick is the store's part of every heartbeat: failed leaves retried, and (unless the node
// just rejoined) the memberships compared with Redis.
func (p *RedisPresence) tick(ctx context.Context, rejoined bool) error {
	if err := p.retryLeaves(ctx); err != nil {
		return err
	}
	if rejoined {
		return nil
	}
	return p.verify(ctx)
}

// closing retries failed leaves before Close reaps this node.
func (p *RedisPresence) closing(ctx context.Context) { _ = p.retryLeaves(ctx) }

// reapNode is the store's NodeState.Reap.
func (p *RedisPresence) reapNode(ctx context.Context, node string, cutoff time.Time) error {
	n, err := p.Reap(ctx, node, cutoff)
	if n > 0 {
		p.log.Info("reaped a dead node's presence", "node", node, "users_gone", n, "by", p.node)
	}
	return err
}

// rejoin is the store's Resync: the registry had lost this node (Redis restarted empty, or
// a survivor reaped it during a long pause), so every membership of the mirror is joined
// again, and a user Redis had removed is announced back (OnBack).
func (p *RedisPresence) rejoin(ctx context.Context) error {
	p.mu.Lock()
	mirror := make(map[string]channels.Member, len(p.mirror))
	for e, m := range p.mirror {
		mirror[e] = m
	}
	p.mu.Unlock()
	if len(mirror) > 0 {
		p.log.Warn("redis had forgotten this node; joining its presence members again", "node", p.node, "memberships", len(mirror))
	}
	for e, m := range mirror {
		if err := p.rejoinEntry(ctx, e, m); err != nil {
			return err
		}
	}
	return nil
}

// verify repairs this node's memberships when Redis holds a different number of them than
// the mirror: writes lost to a Sentinel failover (replication is asynchronous) or to a
// Cluster shard's failover. Memberships Redis lacks are joined again; ones the node no
// longer has are left (a last one is reported through OnGone). The check is one SCARD, made
// only while no Join or Leave is under way.
func (p *RedisPresence) verify(ctx context.Context) error {
	ops := p.ops.Load()
	if p.inflight.Load() != 0 {
		return nil
	}
	p.mu.Lock()
	n := len(p.mirror)
	p.mu.Unlock()
	card, err := p.count(ctx)
	forced := p.verifyAll.Load()
	if err != nil || (int(card) == n && !forced) || p.inflight.Load() != 0 || p.ops.Load() != ops {
		return err
	}
	have, err := p.all(ctx)
	if err != nil {
		return err
	}
	p.mu.Lock()
	if p.inflight.Load() != 0 || p.ops.Load() != ops {
		p.mu.Unlock()
		return nil // changed meanwhile: the next heartbeat looks again
	}
	mirror := make(map[string]channels.Member, len(p.mirror))
	for e, m := range p.mirror {
		mirror[e] = m
	}
	p.mu.Unlock()
	p.verifyAll.Store(false) // compared below, whatever the counts say
	if int(card) == n && sameEntries(have, mirror) {
		return nil
	}
	p.log.Warn("redis presence differs from this node's; repairing", "node", p.node, "redis", card, "node_has", n)
	inRedis := make(map[string]bool, len(have))
	for _, e := range have {
		inRedis[e] = true
		if _, ok := mirror[e]; ok {
			continue
		}
		last, err := p.leave(ctx, e)
		if err != nil {
			return err
		}
		if last && p.onGone != nil {
			app, ch, _, user, _ := splitEntry(e)
			p.onGone(app, ch, user)
		}
	}
	for e, m := range mirror {
		if inRedis[e] {
			continue
		}
		if err := p.rejoinEntry(ctx, e, m); err != nil {
			return err
		}
	}
	// Writes were lost: the other per-node state may have lost some too. This runs on the
	// heartbeat (tick), which resyncs them once its ticks are done.
	p.nodes.ResyncSoon()
	return nil
}

// VerifySoon makes the next heartbeat compare this node's memberships with Redis entry by
// entry, not only by count: after a failover the promoted replica may have missed a leave
// and a join alike (asynchronous replication), which leaves the counts equal.
func (p *RedisPresence) VerifySoon() { p.verifyAll.Store(true) }

// sameEntries reports whether have (Redis's set) holds exactly mirror's entries.
func sameEntries(have []string, mirror map[string]channels.Member) bool {
	if len(have) != len(mirror) {
		return false
	}
	for _, e := range have {
		if _, ok := mirror[e]; !ok {
			return false
		}
	}
	return true
}

// count is how many memberships Redis holds for this node, over every bucket (one pipeline).
func (p *RedisPresence) count(ctx context.Context) (int64, error) {
	pipe := p.rdb.Pipeline()
	cmds := make([]*redis.IntCmd, p.nodes.Buckets())
	for b := range cmds {
		cmds[b] = pipe.SCard(ctx, p.memberships(p.node, b))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, err
	}
	var n int64
	for _, c := range cmds {
		n += c.Val()
	}
	return n, nil
}

// all are this node's memberships Redis holds, over every bucket (one pipeline).
func (p *RedisPresence) all(ctx context.Context) ([]string, error) {
	pipe := p.rdb.Pipeline()
	cmds := make([]*redis.StringSliceCmd, p.nodes.Buckets())
	for b := range cmds {
		cmds[b] = pipe.SMembers(ctx, p.memberships(p.node, b))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, err
	}
	var out []string
	for _, c := range cmds {
		out = append(out, c.Val()...)
	}
	return out, nil
}

func (p *RedisPresence) retryLeaves(ctx context.Context) error {
	p.mu.Lock()
	pending := p.pending
	p.pending = nil
	p.mu.Unlock()
	for i, e := range pending {
		n, err := p.leaveN(ctx, e)
		if err == nil && n < 0 {
			// Redis lost the membership while the leave could not reach it (it restarted
			// empty, or a failover dropped the write): the other nodes' clients still hold
			// the member, so it leaves unless another socket of the user has joined since
			// (or been joined again by its node's rejoin). A member announced gone here
			// whose other node rejoins later is announced back by that node (OnBack).
			app, ch, _, user, _ := splitEntry(e)
			var held bool
			held, err = p.rdb.HExists(ctx, p.users(app, ch), user).Result()
			if err == nil && !held {
				n = 1
			}
		}
		if err != nil {
			p.mu.Lock()
			p.pending = append(p.pending, pending[i:]...)
			p.mu.Unlock()
			return err
		}
		if n == 1 && p.onGone != nil {
			app, ch, _, user, _ := splitEntry(e)
			p.onGone(app, ch, user)
		}
	}
	return nil
}

// reapScript removes the given memberships (ARGV[4..], each as entry, socket, user) of a
// dead node in one bucket and answers whether any are left. KEYS are the node's membership
// set of the bucket, the node liveness (the heartbeat set, or the bucket's gates: ARGV[3]
// says which), then the sockets, counts and users hashes of each membership in turn: every
// key arrives in KEYS, as Redis Cluster requires. A node that heartbeated since it was found
// dead (ZSCORE above ARGV[2]), or whose gate was opened again for a newer epoch than the one
// it was marked at (ARGV[2]), is left alone. A membership another reaper already removed
// (SREM answers 0) is skipped, so concurrent reapers remove each exactly once. It returns
// {done, i, ...}: done 0 while memberships are left, 1 once none are, 2 when the node came
// back; then the 1-based indexes of the memberships whose user lost their last socket in the
// channel.
var reapScript = redisx.Script("channels_reap")

// Reap removes a node whose last heartbeat is not after cutoff, bucket by bucket and batch
// by batch, calling OnGone for each user who left; it returns how many did. Survivors may
// reap the same node concurrently: the script's SREM hands each membership to exactly one of
// them.
func (p *RedisPresence) Reap(ctx context.Context, node string, cutoff time.Time) (int, error) {
	bound := p.nodes.reapBound(node, cutoff)
	gone := 0
	for b := range p.nodes.Buckets() {
		n, back, err := p.reapBucket(ctx, node, b, bound)
		gone += n
		if err != nil || back {
			return gone, err
		}
	}
	return gone, nil
}

// reapBucket reaps node's memberships of bucket b; back reports that the node came back.
func (p *RedisPresence) reapBucket(ctx context.Context, node string, b int, bound int64) (gone int, back bool, err error) {
	set := p.memberships(node, b)
	live, mode := p.nodes.liveKey(b)
	for {
		batch, err := p.rdb.SRandMemberN(ctx, set, reapBatch).Result()
		if err != nil {
			return gone, false, err
		}
		if len(batch) == 0 && mode == "g" {
			return gone, false, nil // nothing to reap (the legacy script also checks the node set)
		}
		keys := []string{set, live}
		args := []any{node, bound, mode}
		for _, e := range batch {
			app, ch, socket, user, _ := splitEntry(e)
			keys = append(keys, p.sockets(app, ch), p.counts(app, ch), p.users(app, ch))
			args = append(args, e, socket, user)
		}
		res, err := reapScript.Run(ctx, p.rdb, keys, args...).Slice()
		if err != nil {
			return gone, false, err
		}
		for _, v := range res[1:] {
			i, _ := v.(int64)
			if i < 1 || int(i) > len(batch) {
				continue
			}
			gone++
			if p.onGone != nil {
				app, ch, _, user, _ := splitEntry(batch[i-1])
				p.onGone(app, ch, user)
			}
		}
		switch done, _ := res[0].(int64); done {
		case 1:
			return gone, false, nil
		case 2:
			return gone, true, nil
		}
	}
}

// NodeBucketKey is the registry's per-node key of bucket b (RedisNodes.NodeBucketKey).
func (p *RedisPresence) NodeBucketKey(node, suffix string, b int) string {
	return p.nodes.NodeBucketKey(node, suffix, b)
}

// Buckets is the registry's bucket count (RedisNodes.Buckets).
func (p *RedisPresence) Buckets() int { return p.nodes.Buckets() }

// SocketBucket is the bucket of a socket's per-node entries (RedisNodes.SocketBucket).
func (p *RedisPresence) SocketBucket(socketID string) int { return p.nodes.SocketBucket(socketID) }

// TrackNodeBucketState registers per-node bucket state (RedisNodes.TrackNodeBucketState).
func (p *RedisPresence) TrackNodeBucketState(name string, resync func(context.Context) error, suffixes ...string) {
	p.nodes.TrackNodeBucketState(name, resync, suffixes...)
}

// ResyncSoon asks the registry's next heartbeat for every other per-node state's resync
// (RedisNodes.ResyncSoon); presence's own repair is VerifySoon.
func (p *RedisPresence) ResyncSoon() { p.nodes.ResyncSoon() }
