package cluster

import (
	"context"
	"log/slog"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/reverbgo/reverbgo/internal/redisx"
)

// RedisNodes is the cluster's NodeRegistry in Redis: one sorted set (prefix+"nodes", node ->
// last heartbeat in ms) and, per node, the keys its NodeStates name (NodeKey(node, suffix)).
//
// Every per-node key has a bound twice over: a survivor deletes it with its reaped node, and
// it carries a TTL of 3×NodeTimeout that the owner's heartbeat refreshes, so a write that
// lands after its node was reaped or closed (a late write-through) expires instead of
// staying for good. A node whose heartbeat finds itself unknown, or silent for longer than a
// node may be (its keys may have expired), resyncs every NodeState.
type RedisNodes struct {
	*nodes
	rdb    redis.UniversalClient
	prefix string
	keys   *KeySpace
	gate   gate // the spread layout's per-bucket liveness (nodes_gate.go)
}

var _ NodeRegistry = (*RedisNodes)(nil)

// RedisNodesOptions configure a RedisNodes.
type RedisNodesOptions struct {
	Prefix string // key prefix (default DefaultRedisPrefix); ignored when Keys is set
	// Keys names the cluster's keys (default LegacyKeySpace(Prefix)). In the spread layout
	// presence, counts and the socket index live in the channel's (or socket's) bucket, and
	// every bucket keeps a copy of the node liveness the presence scripts check (gates).
	Keys        *KeySpace
	NodeID      string        // this node (default NewNodeID()); use the broker's
	NodeTimeout time.Duration // default DefaultNodeTimeout
	Logger      *slog.Logger
}

// NewRedisNodes returns the registry of this node over rdb; call Start to heartbeat and reap.
// The client stays the caller's.
func NewRedisNodes(rdb redis.UniversalClient, opts RedisNodesOptions) *RedisNodes {
	if opts.Keys == nil {
		if opts.Prefix == "" {
			opts.Prefix = DefaultRedisPrefix
		}
		opts.Keys = LegacyKeySpace(opts.Prefix)
	}
	r := &RedisNodes{rdb: rdb, prefix: opts.Keys.Prefix(), keys: opts.Keys}
	r.nodes = newNodes(redisNodeBackend{r}, opts.NodeID, opts.NodeTimeout, opts.Logger, r.NodeKey)
	// In the legacy layout every bucket key is a node key (one bucket, the node-level slot).
	r.nodes.flatBuckets = !opts.Keys.Spread()
	return r
}

func (r *RedisNodes) key() string { return r.keys.NodeSetKey() }

// Keys is the registry's key space.
func (r *RedisNodes) Keys() *KeySpace { return r.keys }

// Buckets is how many buckets per-node bucket keys are spread over (KeySpace.Buckets).
func (r *RedisNodes) Buckets() int { return r.keys.Buckets() }

// NodeBucketKey is the per-node key with the given suffix in bucket b (see
// NodeState.BucketKeys).
func (r *RedisNodes) NodeBucketKey(node, suffix string, b int) string {
	return r.keys.NodeBucketKey(node, suffix, b)
}

// SocketBucket is the bucket of a socket's per-node entries (KeySpace.SocketBucket).
func (r *RedisNodes) SocketBucket(socketID string) int { return r.keys.SocketBucket(socketID) }

// keyTTL bounds every per-node key; the owner refreshes it 30 times per TTL.
func (r *RedisNodes) keyTTL() time.Duration { return 3 * r.timeout }

// NodeKeyTTL is the TTL every per-node key carries (3×NodeTimeout): a writer of such a key
// sets it with each write, so a key written after its node left expires.
func (r *RedisNodes) NodeKeyTTL() time.Duration { return r.keyTTL() }

// NodeKey is the per-node key with the given suffix (see NodeState.Keys).
func (r *RedisNodes) NodeKey(node, suffix string) string {
	return r.prefix + "node:" + node + ":" + suffix
}

// TrackNodeState registers per-node hashes under NodeKey(node, suffix) and the resync that
// writes this node's again (Track with Keys and Resync), for the bridge's socket index.
func (r *RedisNodes) TrackNodeState(resync func(context.Context) error, suffixes ...string) {
	r.Track(NodeState{Keys: suffixes, Resync: resync})
}

// TrackNodeBucketState registers per-node hashes under NodeBucketKey(node, suffix, b) for
// every bucket b and the resync that writes this node's again (after a rejoin, and after
// ResyncSoon); name is the state's in logs.
func (r *RedisNodes) TrackNodeBucketState(name string, resync func(context.Context) error, suffixes ...string) {
	r.Track(NodeState{Name: name, BucketKeys: suffixes, Resync: resync})
}

// redisNodes is how the per-node state of this package finds its registry (a RedisNodes, or
// the one a RedisPresence runs on).
type redisNodeOwner interface{ redisNodes() *RedisNodes }

func (r *RedisNodes) redisNodes() *RedisNodes { return r }

type redisNodeBackend struct{ r *RedisNodes }

// beatScript: KEYS[1] the node set, KEYS[2..] the node's keys; ARGV node, now, dead-before,
// key TTL (ms). It answers 1 when the node was unknown or silent since before dead-before.
var beatScript = redisx.Script("channels_beat")

func (b redisNodeBackend) beat(ctx context.Context, node string, now, deadBefore time.Time, keys []string) (bool, error) {
	if b.r.keys.Spread() {
		return b.r.gatedBeat(ctx, node, now, deadBefore, keys)
	}
	n, err := beatScript.Run(ctx, b.r.rdb, append([]string{b.r.key()}, keys...),
		node, now.UnixMilli(), deadBefore.UnixMilli(), b.r.keyTTL().Milliseconds()).Int()
	return n == 1, err
}

func (b redisNodeBackend) alive(ctx context.Context, since time.Time) ([]string, error) {
	return b.r.rdb.ZRangeByScore(ctx, b.r.key(), &redis.ZRangeBy{Min: strconv.FormatInt(since.UnixMilli(), 10), Max: "+inf"}).Result()
}

func (b redisNodeBackend) dead(ctx context.Context, cutoff time.Time) ([]string, error) {
	return b.r.rdb.ZRangeByScore(ctx, b.r.key(), &redis.ZRangeBy{Min: "-inf", Max: "(" + strconv.FormatInt(cutoff.UnixMilli(), 10)}).Result()
}

// reapingMark is the score of a node being reaped: below every heartbeat, so the node counts
// as dead until unlisted, and refused by the presence join script (score < 0).
const reapingMark = -1

// markScript marks node ARGV[1] as being reaped unless it heartbeated after ARGV[2].
var markScript = redisx.Script("channels_mark")

func (b redisNodeBackend) mark(ctx context.Context, node string, cutoff time.Time) (bool, error) {
	if b.r.keys.Spread() {
		return b.r.gatedMark(ctx, node, cutoff)
	}
	n, err := markScript.Run(ctx, b.r.rdb, []string{b.r.key()}, node, cutoff.UnixMilli(), reapingMark).Int()
	return n == 1, err
}

// unlistScript forgets node ARGV[1] and deletes KEYS[2..] if it is still marked as reaped.
var unlistScript = redisx.Script("channels_unlist")

func (b redisNodeBackend) unlist(ctx context.Context, node string, cutoff time.Time, keys []string) error {
	if b.r.keys.Spread() {
		return b.r.gatedUnlist(ctx, node, keys)
	}
	return unlistScript.Run(ctx, b.r.rdb, append([]string{b.r.key()}, keys...), node, reapingMark).Err()
}

// Membership is the node membership that per-node state kept in buckets rides on
// (RedisNodes, or the RedisPresence on one; bridge.RedisSocketIndex uses it): this node's id,
// the per-node key names of each bucket (a socket's entries live in its bucket, so on a
// Cluster they spread over the masters), the nodes whose heartbeat is fresh, and the hook
// that deletes a reaped node's keys and asks for this node's to be written again.
type Membership interface {
	NodeID() string
	NodeBucketKey(node, suffix string, b int) string
	Buckets() int
	SocketBucket(socketID string) int
	LiveNodes(ctx context.Context) ([]string, error)
	TrackNodeBucketState(name string, resync func(context.Context) error, suffixes ...string)
	// NodeKeyTTL bounds a per-node key that a write creates after its node left (the
	// owner's heartbeat refreshes it meanwhile).
	NodeKeyTTL() time.Duration
	// ResyncSoon has the next heartbeat resync every per-node state (a write that failed).
	ResyncSoon()
}

var (
	_ Membership = (*RedisNodes)(nil)
	_ Membership = (*RedisPresence)(nil)
)
