package channels

import (
	"context"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
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
	Prefix string // key prefix (default DefaultRedisPrefix) of the legacy layout, when Keys is nil
	// Keys names the keys (default LegacyKeySpace(Prefix)): under the spread layout each
	// channel's hashes and the per-node membership sets live in the channel's bucket.
	Keys   *KeySpace
	NodeID string // this node (default NewNodeID()); use the broker's
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
}

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
// Every script gets all its keys in KEYS, and every key shares the prefix; give the prefix a
// hash tag ("{reverbgo:reverb}:") and the store runs on Redis Cluster too, all in one slot.
type RedisPresence struct {
	rdb    redis.UniversalClient
	keys   *KeySpace
	node   string
	ttl    time.Duration
	log    *slog.Logger
	onGone func(app, channel, userID string)

	mu      sync.Mutex
	mirror  map[string]Member // entry (app, channel, socket, user) -> member
	pending []string          // entries whose Leave failed, retried by the heartbeat
	// resyncs write other per-node state again (TrackNodeState), nodeKeys are its key
	// suffixes, deleted with a reaped node.
	resyncs    []func(context.Context) error
	nodeKeys   []string
	bucketKeys []string // suffixes of per-node keys kept in every bucket (TrackNodeBucketState)
	// inflight counts Joins and Leaves under way and ops those finished, so the heartbeat
	// compares the mirror with Redis only at a quiet moment.
	inflight atomic.Int64
	ops      atomic.Uint64

	stop     chan struct{}
	done     chan struct{}
	start    sync.Once
	started  bool
	stopOnce sync.Once
}

var _ PresenceStore = (*RedisPresence)(nil)

// NewRedisPresence returns a store over rdb; call Start to heartbeat and reap. The client
// stays the caller's.
func NewRedisPresence(rdb redis.UniversalClient, opts RedisPresenceOptions) *RedisPresence {
	if opts.Prefix == "" {
		opts.Prefix = DefaultRedisPrefix
	}
	if opts.NodeID == "" {
		opts.NodeID = NewNodeID()
	}
	if opts.NodeTimeout <= 0 {
		opts.NodeTimeout = DefaultNodeTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Keys == nil {
		opts.Keys = LegacyKeySpace(opts.Prefix)
	}
	return &RedisPresence{
		rdb: rdb, keys: opts.Keys, node: opts.NodeID, ttl: opts.NodeTimeout, log: opts.Logger,
		onGone: opts.OnGone, mirror: map[string]Member{}, stop: make(chan struct{}), done: make(chan struct{}),
	}
}

// Key names (keys.go): a channel's three hashes, the node set, a node's membership set of
// the channel's bucket (the scripts touch it with the channel's hashes: one slot).
func (p *RedisPresence) users(app, ch string) string   { return p.keys.ChannelKey("pu", app, ch) }
func (p *RedisPresence) sockets(app, ch string) string { return p.keys.ChannelKey("ps", app, ch) }
func (p *RedisPresence) counts(app, ch string) string  { return p.keys.ChannelKey("pc", app, ch) }
func (p *RedisPresence) nodes() string                 { return p.keys.Prefix() + "nodes" }
func (p *RedisPresence) memberSet(node, app, ch string) string {
	return p.keys.NodeBucketKey(node, "presence", p.keys.Bucket(app, ch))
}

// interval is the heartbeat period; deadAfter the silence after which a node is dead.
func (p *RedisPresence) interval() time.Duration  { return p.ttl / 10 }
func (p *RedisPresence) deadAfter() time.Duration { return p.ttl * 8 / 10 }

// NodeKey is the per-node key with the given suffix; every key under it is deleted when the
// node is reaped.
func (p *RedisPresence) NodeKey(node, suffix string) string { return p.keys.NodeKey(node, suffix) }

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

var joinScript = redis.NewScript(`
local prev = redis.call('HGET', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[1], ARGV[2], ARGV[3])
redis.call('SADD', KEYS[4], ARGV[4])
if prev == ARGV[2] then return 0 end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
if redis.call('HINCRBY', KEYS[3], ARGV[2], 1) == 1 then return 1 end
return 0`)

// Join implements PresenceStore.
func (p *RedisPresence) Join(ctx context.Context, app, channel, socketID string, m Member) (bool, error) {
	e := entry(app, channel, socketID, m.UserID)
	p.inflight.Add(1)
	defer p.opDone()
	n, err := joinScript.Run(ctx, p.rdb, []string{p.users(app, channel), p.sockets(app, channel), p.counts(app, channel), p.memberSet(p.node, app, channel)},
		socketID, m.UserID, m.Info, e).Int()
	if err != nil {
		return false, err
	}
	p.mu.Lock()
	p.mirror[e] = m
	p.mu.Unlock()
	return n == 1, nil
}

var leaveScript = redis.NewScript(`
if redis.call('HGET', KEYS[2], ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('SREM', KEYS[4], ARGV[3])
if redis.call('HINCRBY', KEYS[3], ARGV[2], -1) <= 0 then
  redis.call('HDEL', KEYS[3], ARGV[2])
  redis.call('HDEL', KEYS[1], ARGV[2])
  return 1
end
return 0`)

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
	app, ch, socket, user, _ := splitEntry(e)
	n, err := leaveScript.Run(ctx, p.rdb, []string{p.users(app, ch), p.sockets(app, ch), p.counts(app, ch), p.memberSet(p.node, app, ch)},
		socket, user, e).Int()
	return n == 1, err
}

// Members implements PresenceStore.
func (p *RedisPresence) Members(ctx context.Context, app, channel string) ([]Member, error) {
	all, err := p.rdb.HGetAll(ctx, p.users(app, channel)).Result()
	if err != nil {
		return nil, err
	}
	out := make([]Member, 0, len(all))
	for id, info := range all {
		out = append(out, Member{UserID: id, Info: []byte(info)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].UserID < out[j].UserID })
	return out, nil
}

// Start heartbeats at once, then every NodeTimeout/10, reaping dead nodes each time.
func (p *RedisPresence) Start() {
	p.start.Do(func() {
		p.started = true
		go p.loop()
	})
}

func (p *RedisPresence) loop() {
	defer close(p.done)
	t := time.NewTicker(p.interval())
	defer t.Stop()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), max(p.interval(), time.Second))
		if err := p.Heartbeat(ctx); err != nil {
			p.log.Warn("redis presence heartbeat failed", "error", err, "node", p.node)
		}
		cancel()
		select {
		case <-p.stop:
			return
		case <-t.C:
		}
	}
}

// Heartbeat marks this node alive, repairs its memberships if Redis forgot the node,
// retries failed leaves and reaps nodes silent for 8/10 of NodeTimeout.
func (p *RedisPresence) Heartbeat(ctx context.Context) error {
	now := time.Now()
	added, err := p.rdb.ZAdd(ctx, p.nodes(), redis.Z{Score: float64(now.UnixMilli()), Member: p.node}).Result()
	if err != nil {
		return err
	}
	if added == 1 {
		if err := p.rejoin(ctx); err != nil {
			return err
		}
	}
	if err := p.retryLeaves(ctx); err != nil {
		return err
	}
	if added == 0 {
		if err := p.verify(ctx); err != nil {
			return err
		}
	}
	dead, err := p.rdb.ZRangeByScore(ctx, p.nodes(), &redis.ZRangeBy{Min: "-inf", Max: strconv.FormatInt(now.Add(-p.deadAfter()).UnixMilli(), 10)}).Result()
	if err != nil {
		return err
	}
	for _, node := range dead {
		if node == p.node {
			continue
		}
		n, err := p.Reap(ctx, node, now.Add(-p.deadAfter()))
		if err != nil {
			return err
		}
		p.log.Info("reaped a dead node", "node", node, "users_gone", n, "by", p.node)
	}
	return nil
}

func (p *RedisPresence) rejoin(ctx context.Context) error {
	p.mu.Lock()
	mirror := make(map[string]Member, len(p.mirror))
	for e, m := range p.mirror {
		mirror[e] = m
	}
	resyncs := p.resyncs
	p.mu.Unlock()
	if err := runResyncs(ctx, resyncs); err != nil {
		return err
	}
	if len(mirror) > 0 {
		p.log.Warn("redis had forgotten this node; joining its presence members again", "node", p.node, "memberships", len(mirror))
	}
	for e, m := range mirror {
		app, ch, socket, _, _ := splitEntry(e)
		if err := joinScript.Run(ctx, p.rdb, []string{p.users(app, ch), p.sockets(app, ch), p.counts(app, ch), p.memberSet(p.node, app, ch)},
			socket, m.UserID, m.Info, e).Err(); err != nil {
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
	card, err := p.cardAll(ctx, p.node)
	if err != nil || int(card) == n || p.inflight.Load() != 0 || p.ops.Load() != ops {
		return err
	}
	have, err := p.membersAll(ctx, p.node)
	if err != nil {
		return err
	}
	p.mu.Lock()
	if p.inflight.Load() != 0 || p.ops.Load() != ops {
		p.mu.Unlock()
		return nil // changed meanwhile: the next heartbeat looks again
	}
	mirror := make(map[string]Member, len(p.mirror))
	for e, m := range p.mirror {
		mirror[e] = m
	}
	resyncs := p.resyncs
	p.mu.Unlock()
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
		app, ch, socket, _, _ := splitEntry(e)
		if err := joinScript.Run(ctx, p.rdb, []string{p.users(app, ch), p.sockets(app, ch), p.counts(app, ch), p.memberSet(p.node, app, ch)},
			socket, m.UserID, m.Info, e).Err(); err != nil {
			return err
		}
	}
	return runResyncs(ctx, resyncs)
}

func (p *RedisPresence) retryLeaves(ctx context.Context) error {
	p.mu.Lock()
	pending := p.pending
	p.pending = nil
	p.mu.Unlock()
	for i, e := range pending {
		last, err := p.leave(ctx, e)
		if err != nil {
			p.mu.Lock()
			p.pending = append(p.pending, pending[i:]...)
			p.mu.Unlock()
			return err
		}
		if last && p.onGone != nil {
			app, ch, _, user, _ := splitEntry(e)
			p.onGone(app, ch, user)
		}
	}
	return nil
}

// reapScript removes the given memberships (ARGV[3..], each as entry, socket, user) of a dead node and, once none are
// left, forgets the node and deletes its other keys. KEYS are the node's membership set, the
// node heartbeat set, then the sockets, counts and users hashes of each membership in turn,
// then the node's other keys: every key arrives in KEYS, as Redis Cluster requires. A node
// that heartbeated since it was found dead (ZSCORE above ARGV[2]) is left alone. A
// membership another reaper already removed (SREM answers 0) is skipped, so concurrent
// reapers remove each exactly once. It returns {done, i, ...}: the 1-based indexes of the
// memberships whose user lost their last socket in the channel.
var reapScript = redis.NewScript(`
local score = redis.call('ZSCORE', KEYS[2], ARGV[1])
if score and tonumber(score) > tonumber(ARGV[2]) then return {1} end
local out = {0}
local n = (#ARGV - 2) / 3
for i = 1, n do
  local e, socket, user = ARGV[3 * i], ARGV[3 * i + 1], ARGV[3 * i + 2]
  if redis.call('SREM', KEYS[1], e) == 1 then
    local S, C, U = KEYS[3 * i], KEYS[3 * i + 1], KEYS[3 * i + 2]
    if redis.call('HGET', S, socket) == user then
      redis.call('HDEL', S, socket)
      if redis.call('HINCRBY', C, user, -1) <= 0 then
        redis.call('HDEL', C, user)
        redis.call('HDEL', U, user)
        table.insert(out, i)
      end
    end
  end
end
if redis.call('SCARD', KEYS[1]) == 0 then
  out[1] = 1
  redis.call('ZREM', KEYS[2], ARGV[1])
  for k = 3 * n + 3, #KEYS do redis.call('DEL', KEYS[k]) end
end
return out`)

// Reap removes a node whose last heartbeat is not after cutoff, batch by batch, calling
// OnGone for each user who left; it returns how many did. Survivors may reap the same node
// concurrently: the script's SREM hands each membership to exactly one of them.
func (p *RedisPresence) Reap(ctx context.Context, node string, cutoff time.Time) (int, error) {
	return p.reapBuckets(ctx, node, cutoff)
}

// reapSet reaps one membership set of node: set's slot holds the memberships' hashes,
// nodesKey (the node set, or a key of that slot that never exists) and delKeys, the node's
// keys of that slot deleted once the set is empty.
func (p *RedisPresence) reapSet(ctx context.Context, node string, cutoff time.Time, set, nodesKey string, delKeys []string) (int, error) {
	gone := 0
	for {
		batch, err := p.rdb.SRandMemberN(ctx, set, reapBatch).Result()
		if err != nil {
			return gone, err
		}
		keys := []string{set, nodesKey}
		args := []any{node, cutoff.UnixMilli()}
		for _, e := range batch {
			app, ch, socket, user, _ := splitEntry(e)
			keys = append(keys, p.sockets(app, ch), p.counts(app, ch), p.users(app, ch))
			args = append(args, e, socket, user)
		}
		keys = append(keys, delKeys...)
		res, err := reapScript.Run(ctx, p.rdb, keys, args...).Slice()
		if err != nil {
			return gone, err
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
		if done, _ := res[0].(int64); done == 1 {
			return gone, nil
		}
	}
}

// Close stops the heartbeat and reaps this node's leftovers (memberships whose leave never
// reached Redis), reporting them through OnGone, so a clean shutdown leaves nothing for
// the survivors. Close the pusher server first so that its sockets leave normally.
func (p *RedisPresence) Close() error {
	p.stopOnce.Do(func() { close(p.stop) })
	p.start.Do(func() {})
	if p.started {
		<-p.done
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = p.retryLeaves(ctx)
	_, err := p.Reap(ctx, p.node, time.Now().Add(time.Hour))
	return err
}
