package channels

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Per-node state beside presence.
//
// Other packages keep state per node in Redis too (this package's RedisOccupancy, the
// bridge's socket index): hashes under NodeKey(node, suffix), read only for the nodes
// LiveNodes lists. RedisPresence owns the node's lifecycle, so it is the one that deletes
// those keys with a reaped node and asks their owners to write them again when Redis lost
// them; TrackNodeState tells it about them, so it need not know what they hold.

// TrackNodeState registers per-node state kept under NodeKey(node, suffix) for each suffix:
// those keys of a reaped node are deleted with it, and resync (unless nil) writes this
// node's state again whenever the heartbeat finds Redis lost it (a restart without
// persistence, a failover, this node reaped during a long pause). Call it before Start.
func (p *RedisPresence) TrackNodeState(resync func(context.Context) error, suffixes ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if resync != nil {
		p.resyncs = append(p.resyncs, resync)
	}
	p.nodeKeys = append(p.nodeKeys, suffixes...)
}

// runResyncs runs every registered resync, stopping at the first error (the next heartbeat
// tries again).
func runResyncs(ctx context.Context, resyncs []func(context.Context) error) error {
	for _, r := range resyncs {
		if err := r(ctx); err != nil {
			return err
		}
	}
	return nil
}

// NodeID is this node's id, the one NodeKey and LiveNodes use.
func (p *RedisPresence) NodeID() string { return p.node }

// LiveNodes lists the nodes not yet dead (heartbeat within 8/10 of NodeTimeout), always
// including this one: a dead node's per-node state drops out of every answer at once, before
// a survivor reaps it.
func (p *RedisPresence) LiveNodes(ctx context.Context) ([]string, error) {
	min := strconv.FormatInt(time.Now().Add(-p.deadAfter()).UnixMilli(), 10)
	nodes, err := p.rdb.ZRangeByScore(ctx, p.nodes(), &redis.ZRangeBy{Min: min, Max: "+inf"}).Result()
	if err != nil {
		return nil, err
	}
	for _, n := range nodes {
		if n == p.node {
			return nodes, nil
		}
	}
	return append(nodes, p.node), nil
}
