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
// answer counts and channel lists for the whole cluster, and indexes the sockets of
// channels starting with IndexPrefix, so that any node can find such a socket by id.
//
// Counts live in one hash per node (field app NUL channel), written as absolute values (so a
// lost write heals with the next one) in batches every occupancyFlush; the socket index is one hash per node (socket id -> app NUL channels),
// written synchronously because a page may call another node right after subscribing.
// This node's connection count per app (a third hash, app -> count) rides on the same batch.
// All are read only for nodes whose heartbeat is fresh and are deleted when a node is
// reaped (see RedisPresence), so a dead node's sockets vanish from answers within NodeTimeout.
// The node keeps the same state in memory and writes it again with Resync when Redis lost it.
type RedisOccupancy struct {
	p      *RedisPresence // keys, node id and liveness
	prefix string         // channels whose sockets are indexed
	log    *slog.Logger

	mu      sync.Mutex
	counts  map[string]int64             // app NUL channel -> local subscribers
	pending map[string]struct{}          // fields whose count changed since the last write
	indexed map[string]map[string]string // socket -> indexed channel -> credential hash
	apps    map[string]string            // socket -> app, for indexed sockets
	creds   map[string]string            // socket NUL channel -> credential for the next Subscribed
	conns   func() map[string]int64      // app -> open sockets on this node (SetConnections)
	wrote   map[string]int64             // conns as last written
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
}

var _ Occupancy = (*RedisOccupancy)(nil)

// NewRedisOccupancy shares p's keys and node and starts the batch writer; Close stops it.
func NewRedisOccupancy(p *RedisPresence, indexPrefix string, logger *slog.Logger) *RedisOccupancy {
	if logger == nil {
		logger = slog.Default()
	}
	o := &RedisOccupancy{
		p: p, prefix: indexPrefix, log: logger,
		counts: map[string]int64{}, pending: map[string]struct{}{}, indexed: map[string]map[string]string{}, apps: map[string]string{}, creds: map[string]string{},
		stop: make(chan struct{}), done: make(chan struct{}),
	}
	p.mu.Lock()
	p.onRejoin = o.Resync
	p.mu.Unlock()
	go o.loop()
	return o
}

func (o *RedisOccupancy) subsKey(node string) string    { return o.p.NodeKey(node, "subs") }
func (o *RedisOccupancy) socketsKey(node string) string { return o.p.NodeKey(node, "sockets") }
func (o *RedisOccupancy) connsKey(node string) string   { return o.p.NodeKey(node, "conns") }

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
func (o *RedisOccupancy) Subscribed(app, channel, socketID string) {
	o.change(app, channel, socketID, 1)
}

// SetCredential records the credential hash (the Toolmark page token's, pusher.CredentialIndex)
// that the index stores with the socket's next subscription to channel, or, when the socket is
// already subscribed, updates it. It must not contain NUL or \x01.
func (o *RedisOccupancy) SetCredential(app, channel, socketID, credential string) {
	if o.prefix == "" || !strings.HasPrefix(channel, o.prefix) {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if set := o.indexed[socketID]; set != nil {
		if _, ok := set[channel]; ok {
			set[channel] = credential // unchanged on a repeated subscribe; written by Resync otherwise
			return
		}
	}
	o.creds[socketID+"\x00"+channel] = credential
}

// Indexed implements Indexer: the socket index of these channels is written synchronously.
func (o *RedisOccupancy) Indexed(channel string) bool {
	return o.prefix != "" && strings.HasPrefix(channel, o.prefix)
}

// Unsubscribed implements Occupancy.
func (o *RedisOccupancy) Unsubscribed(app, channel, socketID string) {
	o.change(app, channel, socketID, -1)
}

func (o *RedisOccupancy) change(app, channel, socketID string, delta int64) {
	f := app + "\x00" + channel
	indexed := o.prefix != "" && strings.HasPrefix(channel, o.prefix)
	o.mu.Lock()
	if o.counts[f] += delta; o.counts[f] <= 0 {
		delete(o.counts, f)
	}
	count := o.counts[f]
	var value string
	if indexed {
		set := o.indexed[socketID]
		ck := socketID + "\x00" + channel
		if delta > 0 {
			if set == nil {
				set = map[string]string{}
				o.indexed[socketID] = set
				o.apps[socketID] = app
			}
			set[channel] = o.creds[ck]
			delete(o.creds, ck)
		} else {
			delete(set, channel)
		}
		if len(set) == 0 {
			delete(o.indexed, socketID)
			delete(o.apps, socketID)
		} else {
			value = indexValue(app, set)
		}
	} else {
		o.pending[f] = struct{}{}
	}
	o.mu.Unlock()
	if !indexed {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	pipe := o.p.rdb.TxPipeline()
	setCount(ctx, pipe, o.subsKey(o.p.node), f, count)
	if value == "" {
		pipe.HDel(ctx, o.socketsKey(o.p.node), socketID)
	} else {
		pipe.HSet(ctx, o.socketsKey(o.p.node), socketID, value)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		o.log.Warn("socket index not written; the next resync repairs it", "error", err)
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

// indexValue is "app NUL channel[\x01credential] NUL ...": channel names never hold either byte.
func indexValue(app string, set map[string]string) string {
	parts := []string{app}
	for ch, cred := range set {
		if cred != "" {
			ch += "\x01" + cred
		}
		parts = append(parts, ch)
	}
	sort.Strings(parts[1:])
	return strings.Join(parts, "\x00")
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
		setCount(ctx, pipe, o.subsKey(o.p.node), f, n)
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

// Resync rewrites this node's counts and socket index from memory (after Redis lost them).
func (o *RedisOccupancy) Resync(ctx context.Context) error {
	o.mu.Lock()
	counts := make(map[string]any, len(o.counts))
	for f, n := range o.counts {
		counts[f] = n
	}
	sockets := make(map[string]any, len(o.indexed))
	for s, set := range o.indexed {
		sockets[s] = indexValue(o.apps[s], set)
	}
	o.pending = map[string]struct{}{}
	o.wrote = nil // the next flush writes every connection count again
	o.mu.Unlock()
	pipe := o.p.rdb.TxPipeline()
	pipe.Del(ctx, o.subsKey(o.p.node), o.socketsKey(o.p.node), o.connsKey(o.p.node))
	if len(counts) > 0 {
		pipe.HSet(ctx, o.subsKey(o.p.node), counts)
	}
	if len(sockets) > 0 {
		pipe.HSet(ctx, o.socketsKey(o.p.node), sockets)
	}
	_, err := pipe.Exec(ctx)
	return err
}

// liveNodes lists nodes not yet dead (see RedisPresence), always including this one.
func (o *RedisOccupancy) liveNodes(ctx context.Context) ([]string, error) {
	min := strconv.FormatInt(time.Now().Add(-o.p.deadAfter()).UnixMilli(), 10)
	nodes, err := o.p.rdb.ZRangeByScore(ctx, o.p.nodes(), &redis.ZRangeBy{Min: min, Max: "+inf"}).Result()
	if err != nil {
		return nil, err
	}
	for _, n := range nodes {
		if n == o.p.node {
			return nodes, nil
		}
	}
	return append(nodes, o.p.node), nil
}

// SubscriptionCount is the channel's subscriber count over every live node.
func (o *RedisOccupancy) SubscriptionCount(ctx context.Context, app, channel string) (int, error) {
	return o.sumOverNodes(ctx, o.subsKey, app+"\x00"+channel, true)
}

// RemoteConnections is the app's open sockets on every other live node, as of their last
// batch; the caller adds its own, exact count.
func (o *RedisOccupancy) RemoteConnections(ctx context.Context, app string) (int, error) {
	return o.sumOverNodes(ctx, o.connsKey, app, false)
}

// sumOverNodes adds up one field of a per-node hash over the live nodes (this node's too when
// self), in one pipeline; a missing or non-positive field counts as zero.
func (o *RedisOccupancy) sumOverNodes(ctx context.Context, key func(node string) string, field string, self bool) (int, error) {
	nodes, err := o.liveNodes(ctx)
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
	nodes, err := o.liveNodes(ctx)
	if err != nil {
		return nil, err
	}
	match := globEscape(app+"\x00"+prefix) + "*"
	// The first page of every node in one pipeline; a node with more follows on its own.
	pipe := o.p.rdb.Pipeline()
	cmds := make([]*redis.ScanCmd, len(nodes))
	for i, n := range nodes {
		cmds[i] = pipe.HScan(ctx, o.subsKey(n), 0, match, 1000)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, err
	}
	sum := map[string]int{}
	for i, n := range nodes {
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
			if fields, cursor, err = o.p.rdb.HScan(ctx, o.subsKey(n), cursor, match, 1000).Result(); err != nil {
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

// Socket finds an indexed socket on any live node: its app and indexed channels, each mapped
// to its credential hash ("" when none).
func (o *RedisOccupancy) Socket(ctx context.Context, socketID string) (app string, subs map[string]string, ok bool, err error) {
	nodes, err := o.liveNodes(ctx)
	if err != nil {
		return "", nil, false, err
	}
	pipe := o.p.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, len(nodes))
	for i, n := range nodes {
		cmds[i] = pipe.HGet(ctx, o.socketsKey(n), socketID)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return "", nil, false, err
	}
	for _, c := range cmds {
		if v, err := c.Result(); err == nil {
			parts := strings.Split(v, "\x00")
			subs = make(map[string]string, len(parts)-1)
			for _, p := range parts[1:] {
				ch, cred, _ := strings.Cut(p, "\x01")
				subs[ch] = cred
			}
			return parts[0], subs, true, nil
		}
	}
	return "", nil, false, nil
}

// Close stops the batch writer after a last flush.
func (o *RedisOccupancy) Close() {
	o.once.Do(func() { close(o.stop) })
	<-o.done
	o.flush()
}
