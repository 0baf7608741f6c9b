package bridge

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/reverbgo/reverbgo/internal/cluster"
	"github.com/reverbgo/reverbgo/internal/redisx"
)

// socketsSuffix names each node's index hashes: NodeBucketKey(node, "sockets", b), socket id
// -> encodeIndexed, b the socket's bucket. Every node of a cluster reads the others' under this name.
const socketsSuffix = "sockets"

// indexWriteTimeout bounds one write-through: the subscription waits for it (off the pollers).
const indexWriteTimeout = time.Second

// RedisSocketIndex is the cluster's socket index: this node's entries (a MemorySocketIndex)
// written through to one Redis hash per node and bucket before Subscribed and Unsubscribed return,
// because a page may POST to another node right after subscription_succeeded. Lookups of
// other nodes' sockets read only the nodes LiveNodes lists, and a reaped node's hash is
// deleted with it, so a dead node's sockets vanish within NodeTimeout. When Redis lost the
// hash, the node's heartbeat writes it again from memory (Resync).
type RedisSocketIndex struct {
	local *MemorySocketIndex
	rdb   redis.UniversalClient
	nodes cluster.Membership
	log   *slog.Logger

	// resync is held shared by every write-through and exclusively by Resync, so a resync's
	// snapshot of memory is never written over a newer entry: a write that raced it waits and
	// lands after it.
	resync sync.RWMutex
}

var _ SocketIndex = (*RedisSocketIndex)(nil)

// NewRedisSocketIndex returns the index of this node (nodes.NodeID()) over rdb and registers
// its hash with nodes for reaping and resync; call it before the heartbeat starts.
func NewRedisSocketIndex(rdb redis.UniversalClient, nodes cluster.Membership, logger *slog.Logger) *RedisSocketIndex {
	if logger == nil {
		logger = slog.Default()
	}
	x := &RedisSocketIndex{local: NewMemorySocketIndex(), rdb: rdb, nodes: nodes, log: logger}
	nodes.TrackNodeBucketState("socket index", x.Resync, socketsSuffix)
	return x
}

// key is node's index hash of bucket b.
func (x *RedisSocketIndex) key(node string, b int) string {
	return x.nodes.NodeBucketKey(node, socketsSuffix, b)
}

// keyOf is node's index hash holding socketID.
func (x *RedisSocketIndex) keyOf(node, socketID string) string {
	return x.key(node, x.nodes.SocketBucket(socketID))
}

// Subscribed implements SocketIndex.
func (x *RedisSocketIndex) Subscribed(app, channel, socketID string) {
	x.write(socketID, x.local.subscribed(app, channel, socketID))
}

// Unsubscribed implements SocketIndex.
func (x *RedisSocketIndex) Unsubscribed(_, channel, socketID string) {
	x.write(socketID, x.local.unsubscribed(channel, socketID))
}

// SetCredential implements SocketIndex.
func (x *RedisSocketIndex) SetCredential(app, channel, socketID, credential string) {
	x.local.SetCredential(app, channel, socketID, credential)
}

// write stores the socket's entry ("" deletes it). A failure is logged and asks for a
// resync at the next heartbeat: the entry in memory stays right.
func (x *RedisSocketIndex) write(socketID, value string) {
	ctx, cancel := context.WithTimeout(context.Background(), indexWriteTimeout)
	defer cancel()
	x.resync.RLock()
	defer x.resync.RUnlock()
	var err error
	key := x.keyOf(x.nodes.NodeID(), socketID)
	if value == "" {
		err = x.rdb.HDel(ctx, key, socketID).Err()
	} else {
		pipe := x.rdb.Pipeline()
		pipe.HSet(ctx, key, socketID, value)
		pipe.PExpire(ctx, key, x.nodes.NodeKeyTTL())
		_, err = pipe.Exec(ctx)
	}
	if err != nil {
		// Memory is right; the next heartbeat writes this node's hashes again from it.
		x.nodes.ResyncSoon()
		x.log.Warn("socket index not written; the next heartbeat rewrites it", "error", err)
	}
}

// Socket implements SocketIndex: this node's sockets from memory, the others' from the
// hashes of every other live node, read in one pipeline.
func (x *RedisSocketIndex) Socket(ctx context.Context, socketID string) (string, map[string]string, bool, error) {
	if app, subs, ok, _ := x.local.Socket(ctx, socketID); ok {
		return app, subs, true, nil
	}
	nodes, err := x.nodes.LiveNodes(ctx)
	if err != nil {
		return "", nil, false, err
	}
	self := x.nodes.NodeID()
	pipe := x.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, 0, len(nodes))
	for _, n := range nodes {
		if n != self {
			cmds = append(cmds, pipe.HGet(ctx, x.keyOf(n, socketID), socketID))
		}
	}
	if len(cmds) == 0 {
		return "", nil, false, nil
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return "", nil, false, err
	}
	for _, c := range cmds {
		if v, err := c.Result(); err == nil {
			app, subs := decodeIndexed(v)
			return app, subs, true, nil
		}
	}
	return "", nil, false, nil
}

// Resync rewrites this node's hashes from memory, each atomically (a reader never sees a
// bucket's hash between its DEL and its HSET), in one pipeline: the registry runs it when
// Redis lost the node, and after its ResyncSoon (cluster.RedisNodes.ResyncSoon), when a
// promoted replica may lack the last HSET or HDEL (a page's POSTs answered 401 "Unknown
// socket", or a gone socket still found).
func (x *RedisSocketIndex) Resync(ctx context.Context) error {
	x.resync.Lock()
	defer x.resync.Unlock()
	self := x.nodes.NodeID()
	hashes := make(map[string]map[string]string, x.nodes.Buckets())
	for b := range x.nodes.Buckets() {
		hashes[x.key(self, b)] = nil // deleted unless it has entries
	}
	for id, v := range x.local.encoded() {
		key := x.keyOf(self, id)
		if hashes[key] == nil {
			hashes[key] = map[string]string{}
		}
		hashes[key][id] = v.(string)
	}
	return redisx.ReplaceHashes(ctx, x.rdb, hashes, x.nodes.NodeKeyTTL())
}
