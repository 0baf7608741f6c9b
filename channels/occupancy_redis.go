package channels

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
)

// Occupancy hears about every local subscription change; the Registry calls it after the
// change, outside its locks. It must not block for long.
type Occupancy interface {
	Subscribed(app, channel, socketID string)
	Unsubscribed(app, channel, socketID string)
}

// occupancyFlush is how often batched counter changes are written: cluster-wide counts
// and channel lists lag the truth by about this much.
const occupancyFlush = 50 * time.Millisecond

// RedisOccupancy publishes this node's subscription counts to Redis, so that any node can
// answer counts and channel lists for the whole cluster.
//
// Counts live in one hash per node (field app NUL channel), written as absolute values (so a
// lost write heals with the next one) in batches every occupancyFlush, except for channels
// starting with the sync prefix, written through before Subscribed returns: a reader on
// another node must see such a subscription as soon as the client is told of it (the bridge
// checks that a Toolmark page is subscribed before calling it). This node's connection count
// per app (a second hash, app -> count) rides on the same batch. Both are read only for nodes
// whose heartbeat is fresh (RedisPresence.LiveNodes) and are deleted when a node is reaped,
// so a dead node vanishes from answers within NodeTimeout. The node keeps the same state in
// memory and writes it again with Resync when Redis lost it.
type RedisOccupancy struct {
	p      *RedisPresence // keys, node id and liveness
	prefix string         // channels whose counts are written through (SyncPrefix)
	log    *slog.Logger

	mu      sync.Mutex
	counts  map[string]int64        // app NUL channel -> local subscribers
	pending map[string]struct{}     // fields whose count changed since the last write
	conns   func() map[string]int64 // app -> open sockets on this node (SetConnections)
	wrote   map[string]int64        // conns as last written
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
}

var _ Occupancy = (*RedisOccupancy)(nil)

// NewRedisOccupancy shares p's keys and node and starts the batch writer; Close stops it.
// Counts of channels starting with syncPrefix ("" = none) are written through.
func NewRedisOccupancy(p *RedisPresence, syncPrefix string, logger *slog.Logger) *RedisOccupancy {
	if logger == nil {
		logger = slog.Default()
	}
	o := &RedisOccupancy{
		p: p, prefix: syncPrefix, log: logger,
		counts: map[string]int64{}, pending: map[string]struct{}{},
		stop: make(chan struct{}), done: make(chan struct{}),
	}
	p.TrackNodeState(o.Resync, "conns")
	p.TrackNodeBucketState(nil, "subs")
	go o.loop()
	return o
}

// subsKey is node's counts hash of field's channel bucket (keys.go).
func (o *RedisOccupancy) subsKey(node, field string) string {
	app, ch, _ := strings.Cut(field, "\x00")
	return o.p.keys.NodeBucketKey(node, "subs", o.p.keys.Bucket(app, ch))
}
func (o *RedisOccupancy) connsKey(node string) string { return o.p.NodeKey(node, "conns") }

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

func (o *RedisOccupancy) change(app, channel string, delta int64) {
	f := app + "\x00" + channel
	through := o.WritesThrough(channel)
	o.mu.Lock()
	if o.counts[f] += delta; o.counts[f] <= 0 {
		delete(o.counts, f)
	}
	count := o.counts[f]
	if !through {
		o.pending[f] = struct{}{}
	}
	o.mu.Unlock()
	if !through {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	pipe := o.p.rdb.Pipeline()
	setCount(ctx, pipe, o.subsKey(o.p.node, f), f, count)
	if _, err := pipe.Exec(ctx); err != nil {
		o.log.Warn("subscription count not written; the next batch repairs it", "error", err)
		o.mu.Lock()
		o.pending[f] = struct{}{}
		o.mu.Unlock()
	}
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

// flush writes the changed counts (absolute values); on failure they stay marked for the next batch.
func (o *RedisOccupancy) flush() {
	o.mu.Lock()
	batch := o.pending
	conns := o.connDelta()
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
	pipe := o.p.rdb.Pipeline()
	for f, n := range values {
		setCount(ctx, pipe, o.subsKey(o.p.node, f), f, n)
	}
	if len(conns) > 0 {
		vals := make(map[string]any, len(conns))
		for app, n := range conns {
			vals[app] = n
		}
		pipe.HSet(ctx, o.connsKey(o.p.node), vals)
	}
	_, err := pipe.Exec(ctx)
	o.mu.Lock()
	defer o.mu.Unlock()
	if err != nil {
		for f := range batch {
			o.pending[f] = struct{}{}
		}
		return
	}
	if o.wrote == nil {
		o.wrote = map[string]int64{}
	}
	for app, n := range conns {
		o.wrote[app] = n
	}
}

// Resync rewrites this node's counts from memory (after Redis lost them).
func (o *RedisOccupancy) Resync(ctx context.Context) error {
	o.mu.Lock()
	counts := make(map[string]any, len(o.counts))
	for f, n := range o.counts {
		counts[f] = n
	}
	o.pending = map[string]struct{}{}
	o.wrote = nil // the next flush writes every connection count again
	o.mu.Unlock()
	byKey := map[string]map[string]any{}
	for b := range o.p.keys.Buckets() {
		byKey[o.p.keys.NodeBucketKey(o.p.node, "subs", b)] = map[string]any{}
	}
	for f, n := range counts {
		byKey[o.subsKey(o.p.node, f)][f] = n
	}
	if err := o.p.rdb.Del(ctx, o.connsKey(o.p.node)).Err(); err != nil {
		return err
	}
	if err := rewriteHashes(ctx, o.p.rdb, byKey); err != nil {
		return err
	}
	// One MULTI per hash (the spread layout's hashes sit in several slots) is not one atomic
	// rewrite: a count written meanwhile may have been deleted with its hash. Every count
	// goes out again with the next batch (absolute values), so such a loss lasts one batch.
	o.mu.Lock()
	for f := range o.counts {
		o.pending[f] = struct{}{}
	}
	o.mu.Unlock()
	return nil
}

// rewriteHashes replaces each hash with the given fields, one MULTI per hash (a
// transaction stays in one Redis Cluster slot).
func rewriteHashes(ctx context.Context, rdb redis.UniversalClient, byKey map[string]map[string]any) error {
	for k, fields := range byKey {
		pipe := rdb.TxPipeline()
		pipe.Del(ctx, k)
		if len(fields) > 0 {
			pipe.HSet(ctx, k, fields)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return err
		}
	}
	return nil
}

// RewriteHashes is rewriteHashes for other packages' per-node state.
func RewriteHashes(ctx context.Context, rdb redis.UniversalClient, byKey map[string]map[string]any) error {
	return rewriteHashes(ctx, rdb, byKey)
}

// SubscriptionCount is the channel's subscriber count over every live node.
func (o *RedisOccupancy) SubscriptionCount(ctx context.Context, app, channel string) (int, error) {
	f := app + "\x00" + channel
	return o.sumOverNodes(ctx, func(n string) string { return o.subsKey(n, f) }, f, true)
}

// RemoteConnections is the app's open sockets on every other live node, as of their last
// batch; the caller adds its own, exact count.
func (o *RedisOccupancy) RemoteConnections(ctx context.Context, app string) (int, error) {
	return o.sumOverNodes(ctx, o.connsKey, app, false)
}

// sumOverNodes adds up one field of a per-node hash over the live nodes (this node's too when
// self), in one pipeline; a missing or non-positive field counts as zero.
func (o *RedisOccupancy) sumOverNodes(ctx context.Context, key func(node string) string, field string, self bool) (int, error) {
	nodes, err := o.p.LiveNodes(ctx)
	if err != nil {
		return 0, err
	}
	pipe := o.p.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, 0, len(nodes))
	for _, n := range nodes {
		if self || n != o.p.node {
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
func (o *RedisOccupancy) Channels(ctx context.Context, app, prefix string) ([]ChannelInfo, error) {
	nodes, err := o.p.LiveNodes(ctx)
	if err != nil {
		return nil, err
	}
	match := globEscape(app+"\x00"+prefix) + "*"
	// The first page of every node in one pipeline; a node with more follows on its own.
	// Every node's hash of every bucket (keys.go): one in the legacy layout.
	var hashes []string
	for _, n := range nodes {
		for b := range o.p.keys.Buckets() {
			hashes = append(hashes, o.p.keys.NodeBucketKey(n, "subs", b))
		}
	}
	pipe := o.p.rdb.Pipeline()
	cmds := make([]*redis.ScanCmd, len(hashes))
	for i, h := range hashes {
		cmds[i] = pipe.HScan(ctx, h, 0, match, 1000)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, err
	}
	sum := map[string]int{}
	for i, h := range hashes {
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
			if fields, cursor, err = o.p.rdb.HScan(ctx, h, cursor, match, 1000).Result(); err != nil {
				return nil, err
			}
		}
	}
	out := make([]ChannelInfo, 0, len(sum))
	for ch, n := range sum {
		out = append(out, ChannelInfo{Name: ch, SubscriptionCount: n})
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
