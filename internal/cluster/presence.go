package cluster

import (
	"context"
	"errors"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/reverbgo/reverbgo/channels"
	"github.com/reverbgo/reverbgo/internal/redisx"
)

// DefaultNodeTimeout is scaling.node_timeout's default: within this long after a node
// stops (SIGKILL, power loss), the survivors have removed its members and sockets.
const DefaultNodeTimeout = 10 * time.Second

// DefaultRedisPrefix namespaces every key reverbgo keeps in Redis for channels.
const DefaultRedisPrefix = "reverbgo:"

// reapBatch bounds the work of one reap script, so a dead node with many sockets never
// blocks Redis for long.
const reapBatch = 500

// RedisPresenceOptions configure a RedisPresence.
type RedisPresenceOptions struct {
	// Nodes is the cluster's node registry the store tracks its memberships with (its
	// prefix is the store's); nil makes the store its own, from Prefix, NodeID and
	// NodeTimeout, started and closed with it.
	Nodes  *RedisNodes
	Prefix string    // key prefix (default DefaultRedisPrefix); ignored when Keys is set
	Keys   *KeySpace // the key layout of a registry the store makes (RedisNodesOptions.Keys)
	NodeID string    // this node (default NewNodeID()); use the broker's
	// NodeTimeout bounds how long a dead node's state outlives it (default
	// DefaultNodeTimeout): nodes heartbeat every NodeTimeout/10 and a node silent for
	// 8/10 of it is dead, so a survivor's next heartbeat reaps it within NodeTimeout.
	NodeTimeout time.Duration
	Logger      *slog.Logger
	// OnGone is called for every user whose last socket in a channel was removed by the
	// store itself rather than by a Leave that reported it: the sockets of a dead node,
	// reaped here, and leaves that failed during a Redis outage and were retried later. The
	// caller announces member_removed for them (a Leave's own result is announced by its
	// caller as usual). It runs on the heartbeat goroutine and must not block for long.
	OnGone func(app, channel, userID string)
	// OnBack is called for every user the store itself joined again as the user's first
	// socket in a channel: memberships this node still holds that Redis had lost (this node
	// reaped during a long pause, Redis restarted empty or failed over). Those users were
	// announced gone (or were never seen) elsewhere, so the caller announces member_added
	// (except to socketID). The join script decides "first" once for the cluster, so each
	// user is announced once, and only when Redis had actually removed it. Same goroutine
	// rule as OnGone.
	OnBack func(app, channel, socketID string, m channels.Member)
}

// ErrPresenceClosed is returned by Join after Close: a late join must not re-add a member
// under a node that has reaped itself.
var ErrPresenceClosed = errors.New("presence: store closed")

// errNodeUnknown is the join script's answer when the node is not in the node set.
var errNodeUnknown = errors.New("presence: node not registered")

// RedisPresence is the cluster PresenceStore. Per channel it keeps users' info, each
// socket's user and each user's socket count in three hashes changed only by Lua scripts,
// so member_added and member_removed fire once per user across all nodes. Each node also
// records its memberships in a per-node set and heartbeats into a sorted set; a node that
// misses heartbeats for 8/10 of NodeTimeout is reaped by a survivor, which removes its
// sockets and reports the users who left through OnGone. A crashed node's members therefore
// stay visible for less than NodeTimeout (10 s by default).
//
// The node also mirrors its own memberships in memory: when its heartbeat finds the node
// unknown to Redis (Redis restarted empty, or this node was reaped during a long pause) it
// joins them again, so presence heals without clients resubscribing.
//
// Every script gets all its keys in KEYS, all in one slot: the node-level one in the legacy
// layout, the channel's bucket in the spread one (the registry's Keys; nodes_gate.go), where
// the script checks the bucket's copy of the node liveness instead of the node set.
type RedisPresence struct {
	rdb    redis.UniversalClient
	prefix string
	node   string
	log    *slog.Logger
	onGone func(app, channel, userID string)
	onBack func(app, channel, socketID string, m channels.Member)
	nodes  *RedisNodes // liveness, heartbeat and reap
	own    bool        // nodes was made by (and is started and closed with) this store

	mu      sync.Mutex
	mirror  map[string]channels.Member // entry (app, channel, socket, user) -> member
	pending []string                   // entries whose Leave failed, retried by the heartbeat
	// inflight counts Joins and Leaves under way and ops those finished, so the heartbeat
	// compares the mirror with Redis only at a quiet moment.
	inflight  atomic.Int64
	ops       atomic.Uint64
	verifyAll atomic.Bool // VerifySoon: the next verify compares entries, not counts
}

var _ channels.PresenceStore = (*RedisPresence)(nil)

// NewRedisPresence returns a store over rdb; call Start (or the shared registry's Start) to
// heartbeat and reap. The client stays the caller's.
func NewRedisPresence(rdb redis.UniversalClient, opts RedisPresenceOptions) *RedisPresence {
	own := opts.Nodes == nil
	if own {
		opts.Nodes = NewRedisNodes(rdb, RedisNodesOptions{Prefix: opts.Prefix, Keys: opts.Keys, NodeID: opts.NodeID, NodeTimeout: opts.NodeTimeout, Logger: opts.Logger})
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	p := &RedisPresence{
		rdb: rdb, prefix: opts.Nodes.prefix, node: opts.Nodes.NodeID(), log: opts.Logger, nodes: opts.Nodes, own: own,
		onGone: opts.OnGone, onBack: opts.OnBack, mirror: map[string]channels.Member{},
	}
	p.nodes.Track(NodeState{Name: "presence", Reap: p.reapNode, Resync: p.rejoin, RejoinOnly: true, Tick: p.tick, Closing: p.closing})
	return p
}

// Channel names cannot contain ':', so "<channel>:<app>" is unambiguous whatever the app id.
// In the spread layout they live in the channel's bucket (KeySpace.ChannelKey).
func (p *RedisPresence) users(app, ch string) string   { return p.nodes.keys.ChannelKey("pu", app, ch) }
func (p *RedisPresence) sockets(app, ch string) string { return p.nodes.keys.ChannelKey("ps", app, ch) }
func (p *RedisPresence) counts(app, ch string) string  { return p.nodes.keys.ChannelKey("pc", app, ch) }
func (p *RedisPresence) nodeSet() string               { return p.nodes.key() }

// memberships is node's set of memberships of bucket b (the channel's bucket).
func (p *RedisPresence) memberships(node string, b int) string {
	return p.nodes.NodeBucketKey(node, "presence", b)
}

// bucketOf is the bucket of entry e's channel.
func (p *RedisPresence) bucketOf(e string) int {
	app, ch, _, _, _ := splitEntry(e)
	return p.nodes.keys.Bucket(app, ch)
}

// NodeKey is the registry's per-node key (RedisNodes.NodeKey).
func (p *RedisPresence) NodeKey(node, suffix string) string { return p.nodes.NodeKey(node, suffix) }

// entry is a node-set member: app, channel, socket and user separated by NUL bytes (the
// user id last, so it may contain anything).
func entry(app, ch, socket, user string) string {
	return app + "\x00" + ch + "\x00" + socket + "\x00" + user
}

func splitEntry(e string) (app, ch, socket, user string, ok bool) {
	f := strings.SplitN(e, "\x00", 4)
	if len(f) != 4 {
		return "", "", "", "", false
	}
	return f[0], f[1], f[2], f[3], true
}

// joinScript adds a membership (KEYS: users, sockets, counts, the node's set of the
// channel's bucket, the node liveness: the heartbeat set, or in the spread layout the
// bucket's gates, ARGV[6] saying which). A node that is not in the heartbeat set or is being
// reaped (RedisNodes' mark: reaped, or closed and reaping itself; its gate closed) is
// refused with -1: every membership in Redis is then owned by a node some survivor
// will reap, so no join landing late can leave a ghost member.
var joinScript = redisx.Script("channels_join")

// Join implements PresenceStore. A node the cluster does not list (before its first
// heartbeat, or reaped during a pause) heartbeats first, which rejoins what it holds; after
// Close every Join fails with ErrPresenceClosed.
func (p *RedisPresence) Join(ctx context.Context, app, channel, socketID string, m channels.Member) (bool, error) {
	e := entry(app, channel, socketID, m.UserID)
	p.inflight.Add(1)
	defer p.opDone()
	first, err := p.join(ctx, e, m)
	if errors.Is(err, errNodeUnknown) {
		if err = p.nodes.Heartbeat(ctx); err == nil {
			first, err = p.join(ctx, e, m)
		}
	}
	if err != nil {
		return false, err
	}
	p.mu.Lock()
	p.mirror[e] = m
	p.mu.Unlock()
	return first, nil
}

// join runs the join script for entry e; first reports the user's first socket in the
// channel, cluster-wide.
func (p *RedisPresence) join(ctx context.Context, e string, m channels.Member) (bool, error) {
	if p.nodes.closed.Load() {
		return false, ErrPresenceClosed
	}
	app, ch, socket, _, _ := splitEntry(e)
	b := p.nodes.keys.Bucket(app, ch)
	live, mode := p.nodes.liveKey(b)
	n, err := joinScript.Run(ctx, p.rdb, []string{p.users(app, ch), p.sockets(app, ch), p.counts(app, ch), p.memberships(p.node, b), live},
		socket, m.UserID, m.Info, e, p.node, mode).Int()
	switch {
	case err != nil:
		return false, err
	case n < 0 && p.nodes.closed.Load():
		return false, ErrPresenceClosed
	case n < 0:
		return false, errNodeUnknown
	}
	return n == 1, nil
}

// rejoinEntry joins e again for the store itself (rejoin, verify) and announces a user
// Redis had removed through OnBack.
func (p *RedisPresence) rejoinEntry(ctx context.Context, e string, m channels.Member) error {
	first, err := p.join(ctx, e, m)
	if err != nil {
		return err
	}
	p.mu.Lock()
	_, still := p.mirror[e]
	p.mu.Unlock()
	if !still {
		// The socket left while this ran (its Leave found the membership missing, or ran
		// before this join): undo the re-add. A user this re-added and removed again is
		// announced neither way; one that was there before and is gone now leaves.
		last, err := p.leave(ctx, e)
		if err == nil && last && !first && p.onGone != nil {
			app, ch, _, user, _ := splitEntry(e)
			p.onGone(app, ch, user)
		}
		return err
	}
	if first && p.onBack != nil {
		app, ch, socket, _, _ := splitEntry(e)
		p.onBack(app, ch, socket, m)
	}
	return nil
}

// leaveScript answers 1 for the user's last socket in the channel, 0 for another one, and -1
// when Redis does not hold the membership at all (it lost it: a restart or a failover).
var leaveScript = redisx.Script("channels_leave")

// Leave implements PresenceStore. When Redis cannot be reached the leave is remembered and
// retried by the heartbeat, which reports a last leave through OnGone.
func (p *RedisPresence) Leave(ctx context.Context, app, channel, socketID, userID string) (bool, error) {
	e := entry(app, channel, socketID, userID)
	p.inflight.Add(1)
	defer p.opDone()
	last, err := p.leave(ctx, e)
	p.mu.Lock()
	delete(p.mirror, e)
	if err != nil {
		p.pending = append(p.pending, e)
	}
	p.mu.Unlock()
	return last, err
}

func (p *RedisPresence) opDone() {
	p.ops.Add(1)
	p.inflight.Add(-1)
}

func (p *RedisPresence) leave(ctx context.Context, e string) (bool, error) {
	n, err := p.leaveN(ctx, e)
	return n == 1, err
}

// leaveN runs the leave script for entry e and returns its answer (1, 0 or -1, see there).
func (p *RedisPresence) leaveN(ctx context.Context, e string) (int, error) {
	app, ch, socket, user, _ := splitEntry(e)
	return leaveScript.Run(ctx, p.rdb, []string{p.users(app, ch), p.sockets(app, ch), p.counts(app, ch), p.memberships(p.node, p.nodes.keys.Bucket(app, ch))},
		socket, user, e).Int()
}

// Members implements PresenceStore.
func (p *RedisPresence) Members(ctx context.Context, app, channel string) ([]channels.Member, error) {
	all, err := p.rdb.HGetAll(ctx, p.users(app, channel)).Result()
	if err != nil {
		return nil, err
	}
	out := make([]channels.Member, 0, len(all))
	for id, info := range all {
		out = append(out, channels.Member{UserID: id, Info: []byte(info)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].UserID < out[j].UserID })
	return out, nil
}

var _ channels.PresenceLookup = (*RedisPresence)(nil)

// Present implements PresenceLookup with one HMGET of the channel's socket counts.
func (p *RedisPresence) Present(ctx context.Context, app, channel string, users []string) ([]bool, error) {
	out := make([]bool, len(users))
	if len(users) == 0 {
		return out, nil
	}
	vals, err := p.rdb.HMGet(ctx, p.counts(app, channel), users...).Result()
	if err != nil {
		return nil, err
	}
	for i, v := range vals {
		out[i] = v != nil
	}
	return out, nil
}
