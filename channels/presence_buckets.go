package channels

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// Presence over the spread key layout (keys.go): a node's memberships are kept in one set per
// bucket, beside the hashes of that bucket's channels, so every script stays in one Redis
// Cluster slot while the channels spread over the masters. In the legacy layout there is one
// bucket, the node-level slot itself, and everything below is what it always was.

// TrackNodeBucketState is TrackNodeState for per-node state kept in every bucket, under
// KeySpace.NodeBucketKey(node, suffix, b): a reaped node's keys of each bucket are deleted
// with that bucket's memberships.
func (p *RedisPresence) TrackNodeBucketState(resync func(context.Context) error, suffixes ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if resync != nil {
		p.resyncs = append(p.resyncs, resync)
	}
	p.bucketKeys = append(p.bucketKeys, suffixes...)
}

// NodeSocketKey is node's per-socket state key (suffix) of the socket's bucket, for state
// registered with TrackNodeBucketState.
func (p *RedisPresence) NodeSocketKey(node, suffix, socketID string) string {
	return p.keys.NodeBucketKey(node, suffix, p.keys.SocketBucket(socketID))
}

// NodeBucketKeys lists node's per-node keys of suffix, one per bucket.
func (p *RedisPresence) NodeBucketKeys(node, suffix string) []string {
	out := make([]string, p.keys.Buckets())
	for b := range out {
		out[b] = p.keys.NodeBucketKey(node, suffix, b)
	}
	return out
}

// Keys is the store's key space (shared with the per-node state of other packages).
func (p *RedisPresence) Keys() *KeySpace { return p.keys }

// memberSets lists node's membership sets, one per bucket.
func (p *RedisPresence) memberSets(node string) []string {
	out := make([]string, p.keys.Buckets())
	for b := range out {
		out[b] = p.keys.NodeBucketKey(node, "presence", b)
	}
	return out
}

// cardAll is how many memberships node has in Redis, over every bucket, in one pipeline.
func (p *RedisPresence) cardAll(ctx context.Context, node string) (int64, error) {
	pipe := p.rdb.Pipeline()
	sets := p.memberSets(node)
	cmds := make([]*redis.IntCmd, len(sets))
	for i, s := range sets {
		cmds[i] = pipe.SCard(ctx, s)
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

// membersAll is node's memberships in Redis, over every bucket.
func (p *RedisPresence) membersAll(ctx context.Context, node string) ([]string, error) {
	pipe := p.rdb.Pipeline()
	sets := p.memberSets(node)
	cmds := make([]*redis.StringSliceCmd, len(sets))
	for i, s := range sets {
		cmds[i] = pipe.SMembers(ctx, s)
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

// reapBuckets reaps node bucket by bucket and, last, in the node-level slot, where the
// node leaves the node set and its node-level keys are deleted: a reaper that stops half-way
// (an error, a crash) leaves the node listed, so the next heartbeat finishes the work.
// Scripts of a bucket cannot read the node set (another slot), so whether the node came
// back since it was found dead is checked once, before the buckets.
func (p *RedisPresence) reapBuckets(ctx context.Context, node string, cutoff time.Time) (int, error) {
	p.mu.Lock()
	suffixes, bucketed := p.nodeKeys, p.bucketKeys
	p.mu.Unlock()
	bucketKeys := func(b int) []string {
		out := make([]string, 0, len(bucketed))
		for _, s := range bucketed {
			out = append(out, p.keys.NodeBucketKey(node, s, b))
		}
		return out
	}
	home := make([]string, 0, len(suffixes)+len(bucketed))
	for _, s := range suffixes {
		home = append(home, p.NodeKey(node, s))
	}
	if !p.keys.Spread() {
		return p.reapSet(ctx, node, cutoff, p.NodeKey(node, "presence"), p.nodes(), append(home, bucketKeys(0)...))
	}
	if score, err := p.rdb.ZScore(ctx, p.nodes(), node).Result(); err == nil && score > float64(cutoff.UnixMilli()) {
		return 0, nil // heartbeated since it was found dead
	}
	gone := 0
	for b := range p.keys.Buckets() {
		n, err := p.reapSet(ctx, node, cutoff, p.keys.NodeBucketKey(node, "presence", b), p.keys.BucketPrefix(b)+"nodes:never", bucketKeys(b))
		gone += n
		if err != nil {
			return gone, err
		}
	}
	n, err := p.reapSet(ctx, node, cutoff, p.NodeKey(node, "presence"), p.nodes(), home)
	return gone + n, err
}
