package cluster

import (
	"context"
	"errors"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/reverbgo/reverbgo/channels"
	"github.com/reverbgo/reverbgo/internal/redisx"
)

// occupancyFlush is how often batched counter changes are written: cluster-wide counts
// and channel lists lag the truth by about this much.
const occupancyFlush = 50 * time.Millisecond

// RedisOccupancy publishes this node's subscription counts to Redis, so that any node can
// answer counts and channel lists for the whole cluster.
//
// Counts live in one hash per node (field app NUL channel; in the spread layout one per node
// and bucket, in the channel's bucket), written as absolute values (so a
// lost write heals with the next one) in batches every occupancyFlush, except for channels
// starting with the sync prefix, written through before Subscribed returns: a reader on
// another node must see such a subscription as soon as the client is told of it (the bridge
// checks that a Toolmark page is subscribed before calling it). This node's connection count
// per app (a second hash, app -> count) rides on the same batch. Both are read only for nodes
// whose heartbeat is fresh (RedisNodes.LiveNodes) and are deleted when a node is reaped,
// so a dead node vanishes from answers within NodeTimeout. The node keeps the same state in
// memory and writes it again with Resync when Redis lost it.
//
// A stale absolute value is always repaired: every write (batch, write-through, Resync) is
// settled against memory once Redis answered, and a field whose count changed meanwhile (so
// the value just written may have landed after a newer one) or whose write failed is marked
// pending again for the next batch. Written-through fields are also written in the order
// they were counted (per-field stripes), so a reader never sees the loser of a race.
type RedisOccupancy struct {
	n      *RedisNodes // keys, node id and liveness
	prefix string      // channels whose counts are written through (SyncPrefix)
	log    *slog.Logger

	// through orders the writes of written-through fields: a change takes its field's
	// stripe before it counts and holds it until its write is answered, so two changes of one
	// channel reach Redis in the order they were counted (the later value lands last).
	through [throughStripes]sync.Mutex

	mu      sync.Mutex
	counts  map[string]int64        // app NUL channel -> local subscribers
	pending map[string]struct{}     // fields whose count changed since the last write
	conns   func() map[string]int64 // app -> open sockets on this node (SetConnections)
	wrote   map[string]int64        // conns as last written
	gen     uint64                  // bumped by Resync: a flush begun before it records nothing
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
}

var _ channels.Occupancy = (*RedisOccupancy)(nil)

// NewRedisOccupancy keeps its state under the node registry of nodes (a *RedisNodes, or the
// *RedisPresence running on one) and starts the batch writer; Close stops it. Counts of
// channels starting with syncPrefix ("" = none) are written through.
func NewRedisOccupancy(nodes redisNodeOwner, syncPrefix string, logger *slog.Logger) *RedisOccupancy {
	if logger == nil {
		logger = slog.Default()
	}
	o := &RedisOccupancy{
		n: nodes.redisNodes(), prefix: syncPrefix, log: logger,
		counts: map[string]int64{}, pending: map[string]struct{}{},
		stop: make(chan struct{}), done: make(chan struct{}),
	}
	o.n.Track(NodeState{Name: "occupancy", Keys: []string{"conns"}, BucketKeys: []string{"subs"}, Resync: o.Resync})
	go o.loop()
	return o
}

// subsKey is node's count hash of bucket b (the spread layout keeps one per bucket, in the
// bucket's slot, so counts spread over a Cluster's masters as their channels do).
func (o *RedisOccupancy) subsKey(node string, b int) string {
	return o.n.NodeBucketKey(node, "subs", b)
}

// bucket is the bucket of field f (app NUL channel).
func (o *RedisOccupancy) bucket(f string) int {
	app, ch, _ := strings.Cut(f, "\x00")
	return o.n.keys.Bucket(app, ch)
}

func (o *RedisOccupancy) connsKey(node string) string { return o.n.NodeKey(node, "conns") }

// SetConnections gives the batch writer this node's connection count per app, written
// whenever it changed, so Connections can sum every live node.
func (o *RedisOccupancy) SetConnections(counts func() map[string]int64) {
	o.mu.Lock()
	o.conns = counts
	o.wrote = nil
	o.mu.Unlock()
}

// connDelta returns the per-app counts that changed since the last write (nil = none).
func (o *RedisOccupancy) connDelta() map[string]int64 {
	if o.conns == nil {
		return nil
	}
	now := o.conns()
	var out map[string]int64
	for app, n := range now {
		if w, ok := o.wrote[app]; !ok || w != n {
			if out == nil {
				out = map[string]int64{}
			}
			out[app] = n
		}
	}
	return out
}

// Subscribed implements Occupancy.
func (o *RedisOccupancy) Subscribed(app, channel, _ string) {
	o.change(app, channel, 1)
}

// WritesThrough implements WriteThrough: the counts of these channels are written before
// Subscribed and Unsubscribed return.
func (o *RedisOccupancy) WritesThrough(channel string) bool {
	return o.prefix != "" && strings.HasPrefix(channel, o.prefix)
}

// Unsubscribed implements Occupancy.
func (o *RedisOccupancy) Unsubscribed(app, channel, _ string) {
	o.change(app, channel, -1)
}

// throughStripes is the number of write-through ordering locks (by field hash).
const throughStripes = 64

func (o *RedisOccupancy) change(app, channel string, delta int64) {
	f := app + "\x00" + channel
	if !o.WritesThrough(channel) {
		o.mu.Lock()
		o.count(f, delta)
		o.pending[f] = struct{}{}
		o.mu.Unlock()
		return
	}
	w := &o.through[stripeOf(f)]
	w.Lock()
	defer w.Unlock()
	o.mu.Lock()
	n := o.count(f, delta)
	o.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	pipe := o.n.rdb.Pipeline()
	key := o.subsKey(o.n.node, o.bucket(f))
	setCount(ctx, pipe, key, f, n)
	pipe.PExpire(ctx, key, o.n.keyTTL())
	_, err := pipe.Exec(ctx)
	if err != nil {
		o.log.Warn("subscription count not written; the next batch repairs it", "error", err)
	}
	o.settle(map[string]int64{f: n}, err)
}

// count applies delta to field f and returns the new count; o.mu is held.
func (o *RedisOccupancy) count(f string, delta int64) int64 {
	if o.counts[f] += delta; o.counts[f] <= 0 {
		delete(o.counts, f)
	}
	return o.counts[f]
}

// settle re-marks pending every field of written whose write failed or whose count is no
// longer the value written (changed while the write was under way: the value may have landed
// after a newer one), so the next batch writes it again.
func (o *RedisOccupancy) settle(written map[string]int64, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for f, n := range written {
		if err != nil || o.counts[f] != n {
			o.pending[f] = struct{}{}
		}
	}
}

func stripeOf(f string) int {
	h := uint32(2166136261) // FNV-1a
	for i := 0; i < len(f); i++ {
		h = (h ^ uint32(f[i])) * 16777619
	}
	return int(h % throughStripes)
}

// setCount writes an absolute count (not a delta): a write lost to a failover or an outage
// is corrected by the next write of the same field.
func setCount(ctx context.Context, pipe redis.Pipeliner, key, field string, n int64) {
	if n > 0 {
		pipe.HSet(ctx, key, field, n)
	} else {
		pipe.HDel(ctx, key, field)
	}
}

func (o *RedisOccupancy) loop() {
	defer close(o.done)
	t := time.NewTicker(occupancyFlush)
	defer t.Stop()
	for {
		select {
		case <-o.stop:
			return
		case <-t.C:
			o.flush()
		}
	}
}

// flush writes the changed counts (absolute values) and settles them: a field that failed
// or changed meanwhile stays marked for the next batch.
func (o *RedisOccupancy) flush() {
	o.mu.Lock()
	batch := o.pending
	conns := o.connDelta()
	gen := o.gen
	if len(batch) == 0 && len(conns) == 0 {
		o.mu.Unlock()
		return
	}
	o.pending = map[string]struct{}{}
	values := make(map[string]int64, len(batch))
	for f := range batch {
		values[f] = o.counts[f]
	}
	o.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	pipe := o.n.rdb.Pipeline()
	touched := map[int]bool{}
	for f, n := range values {
		b := o.bucket(f)
		setCount(ctx, pipe, o.subsKey(o.n.node, b), f, n)
		touched[b] = true
	}
	if len(conns) > 0 {
		vals := make(map[string]any, len(conns))
		for app, n := range conns {
			vals[app] = n
		}
		pipe.HSet(ctx, o.connsKey(o.n.node), vals)
		pipe.PExpire(ctx, o.connsKey(o.n.node), o.n.keyTTL())
	}
	for b := range touched {
		pipe.PExpire(ctx, o.subsKey(o.n.node, b), o.n.keyTTL())
	}
	_, err := pipe.Exec(ctx)
	o.settle(values, err)
	o.mu.Lock()
	defer o.mu.Unlock()
	if err != nil || gen != o.gen {
		return // a Resync meanwhile may have deleted what this wrote: write it again
	}
	if o.wrote == nil {
		o.wrote = map[string]int64{}
	}
	for app, n := range conns {
		o.wrote[app] = n
	}
}

// Resync rewrites this node's counts from memory (after Redis lost them; after
// RedisNodes.ResyncSoon, when a promoted replica may miss the last written-through count of
// a channel that does not change again). A count that changes while it runs is settled like
// any write: marked for the next batch.
func (o *RedisOccupancy) Resync(ctx context.Context) error {
	o.mu.Lock()
	snap := make(map[string]int64, len(o.counts))
	hashes := make(map[string]map[string]string, o.n.Buckets())
	for b := range o.n.Buckets() {
		hashes[o.subsKey(o.n.node, b)] = nil // deleted unless it has counts
	}
	for f, n := range o.counts {
		snap[f] = n
		key := o.subsKey(o.n.node, o.bucket(f))
		if hashes[key] == nil {
			hashes[key] = map[string]string{}
		}
		hashes[key][f] = strconv.FormatInt(n, 10)
	}
	o.pending = map[string]struct{}{}
	o.wrote = nil // the next flush writes every connection count again
	o.gen++
	o.mu.Unlock()
	// Each hash is replaced atomically (a reader never sees it between DEL and HSET), all in
	// one pipeline.
	err := o.n.rdb.Del(ctx, o.connsKey(o.n.node)).Err()
	if err == nil {
		err = redisx.ReplaceHashes(ctx, o.n.rdb, hashes, o.n.keyTTL())
	}
	// The DEL removed every field not in snap: those written meanwhile are settled too.
	o.mu.Lock()
	for f := range o.counts {
		if _, ok := snap[f]; !ok {
			snap[f] = 0
		}
	}
	o.mu.Unlock()
	o.settle(snap, err)
	return err
}

// SubscriptionCount is the channel's subscriber count over every live node.
func (o *RedisOccupancy) SubscriptionCount(ctx context.Context, app, channel string) (int, error) {
	b := o.n.keys.Bucket(app, channel)
	return o.sumOverNodes(ctx, func(node string) string { return o.subsKey(node, b) }, app+"\x00"+channel, true)
}

// RemoteConnections is the app's open sockets on every other live node, as of their last
// batch; the caller adds its own, exact count.
func (o *RedisOccupancy) RemoteConnections(ctx context.Context, app string) (int, error) {
	return o.sumOverNodes(ctx, o.connsKey, app, false)
}

// sumOverNodes adds up one field of a per-node hash over the live nodes (this node's too when
// self), in one pipeline; a missing or non-positive field counts as zero.
func (o *RedisOccupancy) sumOverNodes(ctx context.Context, key func(node string) string, field string, self bool) (int, error) {
	nodes, err := o.n.LiveNodes(ctx)
	if err != nil {
		return 0, err
	}
	pipe := o.n.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, 0, len(nodes))
	for _, n := range nodes {
		if self || n != o.n.node {
			cmds = append(cmds, pipe.HGet(ctx, key(n), field))
		}
	}
	if len(cmds) == 0 {
		return 0, nil
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return 0, err
	}
	total := 0
	for _, c := range cmds {
		if n, err := c.Int(); err == nil && n > 0 {
			total += n
		}
	}
	return total, nil
}

// Channels lists the app's occupied channels starting with prefix over every live node.
// Only this app's fields leave Redis: each node's hash is read with HSCAN MATCH on the
// "app NUL prefix" field prefix (a hash of a few hundred fields answers in one step), so
// one app's GET /channels neither reads nor ships another app's channel names.
func (o *RedisOccupancy) Channels(ctx context.Context, app, prefix string) ([]channels.ChannelInfo, error) {
	nodes, err := o.n.LiveNodes(ctx)
	if err != nil {
		return nil, err
	}
	match := globEscape(app+"\x00"+prefix) + "*"
	// The first page of every node's hash of every bucket in one pipeline; a hash with more
	// follows on its own.
	var keys []string
	for _, n := range nodes {
		for b := range o.n.Buckets() {
			keys = append(keys, o.subsKey(n, b))
		}
	}
	pipe := o.n.rdb.Pipeline()
	cmds := make([]*redis.ScanCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.HScan(ctx, k, 0, match, 1000)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, err
	}
	sum := map[string]int{}
	for i, key := range keys {
		fields, cursor := cmds[i].Val()
		for {
			for j := 0; j+1 < len(fields); j += 2 {
				a, ch, ok := strings.Cut(fields[j], "\x00")
				if k, _ := strconv.Atoi(fields[j+1]); ok && a == app && k > 0 && strings.HasPrefix(ch, prefix) {
					sum[ch] += k
				}
			}
			if cursor == 0 {
				break
			}
			var err error
			if fields, cursor, err = o.n.rdb.HScan(ctx, key, cursor, match, 1000).Result(); err != nil {
				return nil, err
			}
		}
	}
	out := make([]channels.ChannelInfo, 0, len(sum))
	for ch, n := range sum {
		out = append(out, channels.ChannelInfo{Name: ch, SubscriptionCount: n})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// globEscape quotes Redis glob metacharacters so s matches itself.
func globEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '*', '?', '[', ']', '\\', '^', '-':
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// Close stops the batch writer after a last flush.
func (o *RedisOccupancy) Close() {
	o.once.Do(func() { close(o.stop) })
	<-o.done
	o.flush()
}
