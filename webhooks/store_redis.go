package webhooks

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/reverbgo/reverbgo/internal/cluster"
	"github.com/reverbgo/reverbgo/internal/redisx"
)

// RedisStore is the cluster Store: outboxes, leases, occupancy and holds live in Redis and
// change only through Lua scripts, so every decision is taken once for the whole cluster
// and an event is queued in the same atomic step as the decision that caused it. A node's
// restart or crash therefore loses nothing that was queued: another node (or the restarted
// one) takes the outbox's lease over when it expires and sends what is left, including the
// batch that was in flight; that batch may then reach the receiver twice (at least once).
//
// Occupancy is counted in nodes: a node adds itself to a channel when its first local
// subscriber joins and leaves when its last one leaves, and a channel is occupied while
// one node or more has it. Which nodes are alive is the cluster's node registry's one
// record (cluster.NodeRegistry): a survivor that reaps a dead node calls ReapNode, which
// vacates the channels only it had (held, like any vacate).
//
// Every key carries the hash tag of the prefix (see NewRedisStore), so the scripts work
// on Redis Cluster too: webhook state is small and one slot carries it.
type RedisStore struct {
	rdb  redis.UniversalClient
	k    cluster.WebhookKeys // every key name, with the prefix's hash tag
	node string

	ledger  *ledger       // what this node queued and has not seen done (ledger.go)
	genBase string        // unique to this store: the prefix of the generations it creates
	gens    atomic.Uint64 // numbers them
}

var _ Store = (*RedisStore)(nil)

// NewRedisStore keeps webhook state under prefix+"{webhooks}:" (cluster.WebhookKeys) for
// this node of nodes (the cluster's node registry, which it registers with: call it before
// the registry starts). The client stays the caller's.
func NewRedisStore(rdb redis.UniversalClient, prefix string, nodes cluster.NodeRegistry) *RedisStore {
	var b [8]byte
	_, _ = rand.Read(b[:])
	s := &RedisStore{rdb: rdb, k: cluster.NewWebhookKeys(prefix), node: nodes.NodeID(), ledger: newLedger(),
		genBase: hex.EncodeToString(b[:]) + ":"}
	nodes.Track(cluster.NodeState{Name: "webhooks", Reap: func(ctx context.Context, node string, _ time.Time) error {
		return s.ReapNode(ctx, node, time.Now())
	}})
	return s
}

// gen is a fresh generation for an outbox state a push may have to create.
func (s *RedisStore) gen() string { return s.genBase + strconv.FormatUint(s.gens.Add(1), 10) }

func (s *RedisStore) queue(key string) string    { return s.k.Queue(key) }
func (s *RedisStore) inflight(key string) string { return s.k.Inflight(key) }
func (s *RedisStore) lease(key string) string    { return s.k.Lease(key) }
func (s *RedisStore) since(key string) string    { return s.k.Since(key) }
func (s *RedisStore) state(key string) string    { return s.k.State(key) }
func (s *RedisStore) nodeSet(node string) string { return s.k.NodeSet(node) }
func (s *RedisStore) occ() string                { return s.k.Occupancy() }
func (s *RedisStore) holds() string              { return s.k.Holds() }
func (s *RedisStore) cacheMiss() string          { return s.k.CacheMiss() }

// The scripts (internal/redisx/lua/webhooks_*.lua); every one that queues includes the push
// library, webhooks_push.
var (
	pushScript      = redisx.Script("webhooks_push", "webhooks_push_events")
	claimScript     = redisx.Script("webhooks_claim")
	renewScript     = redisx.Script("webhooks_renew")
	ackScript       = redisx.Script("webhooks_ack")
	sizeScript      = redisx.Script("webhooks_size")
	releaseScript   = redisx.Script("webhooks_release")
	occupyScript    = redisx.Script("webhooks_push", "webhooks_occupy")
	vacateScript    = redisx.Script("webhooks_vacate")
	memberAddScript = redisx.Script("webhooks_push", "webhooks_member_add")
	cacheMissScript = redisx.Script("webhooks_push", "webhooks_cache_miss")
	fireScript      = redisx.Script("webhooks_push", "webhooks_fire")
	reapNodeScript  = redisx.Script("webhooks_reap_node")
)

// reapBatch bounds one reap script's work so a dead node with many channels never blocks
// Redis for long.
const reapBatch = 500

func ms(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }

// outArgs are the keys of out's outboxes as pushLua takes them: queue, state, queue, ...
func (s *RedisStore) outArgs(out Out) []string {
	keys := make([]string, 0, 2*len(out.Keys))
	for _, k := range out.Keys {
		keys = append(keys, s.queue(k), s.state(k))
	}
	return keys
}

// emitted reads a pushing script's answer, {result, generation, sequence, ...} with a pair
// per outbox of out when it pushed, and records the pushes in the ledger.
func (s *RedisStore) emitted(out Out, res []any, err error) (int, error) {
	if err != nil {
		return 0, err
	}
	if len(res) == 0 {
		return 0, errors.New("webhooks: empty script answer")
	}
	r, _ := res[0].(int64)
	for i, k := range out.Keys {
		if 2+2*i >= len(res) {
			break
		}
		gen, _ := res[1+2*i].(string)
		seq, _ := res[2+2*i].(int64)
		s.ledger.record(k, gen, seq, out.Limit)
	}
	return int(r), nil
}

// Push implements Store.
func (s *RedisStore) Push(ctx context.Context, out Out) (int, error) {
	if len(out.Keys) == 0 {
		return 0, nil
	}
	res, err := pushScript.Run(ctx, s.rdb, s.outArgs(out), out.Raw, out.Limit, s.gen()).Slice()
	return s.emitted(out, res, err)
}

// Lost implements Store: the events this node queued that Redis lost (see ledger).
func (s *RedisStore) Lost() map[string]int { return s.ledger.take() }

// Claim implements Store.
func (s *RedisStore) Claim(ctx context.Context, key, owner string, max int, lease time.Duration, now time.Time) (Batch, bool, error) {
	res, err := claimScript.Run(ctx, s.rdb, []string{s.lease(key), s.inflight(key), s.queue(key), s.since(key), s.state(key)},
		owner, max, lease.Milliseconds(), now.UnixMilli()).StringSlice()
	if errors.Is(err, redis.Nil) {
		return Batch{}, false, nil
	}
	if err != nil {
		return Batch{}, false, err
	}
	if len(res) == 0 {
		return Batch{}, true, nil
	}
	since, err := strconv.ParseInt(res[0], 10, 64)
	if err != nil {
		return Batch{}, false, errors.New("webhooks: unreadable batch time")
	}
	b := Batch{Events: make([][]byte, len(res)-1), Since: time.UnixMilli(since)}
	for i, r := range res[1:] {
		b.Events[i] = []byte(r)
	}
	return b, true, nil
}

// Renew implements Store.
func (s *RedisStore) Renew(ctx context.Context, key, owner string, lease time.Duration) (bool, error) {
	n, err := renewScript.Run(ctx, s.rdb, []string{s.lease(key)}, owner, lease.Milliseconds()).Int()
	return n == 1, err
}

// Ack implements Store.
func (s *RedisStore) Ack(ctx context.Context, key, owner string) (bool, error) {
	t0 := s.ledger.begin()
	res, err := ackScript.Run(ctx, s.rdb, []string{s.lease(key), s.inflight(key), s.since(key), s.state(key)}, owner).Slice()
	if err != nil || len(res) == 0 {
		return false, err
	}
	if n, _ := res[0].(int64); n != 1 || len(res) < 3 {
		return false, nil
	}
	gen, _ := res[1].(string)
	h, _ := strconv.ParseInt(fmt.Sprint(res[2]), 10, 64)
	s.ledger.observe(key, outboxState{gen: gen, h: h}, t0)
	return true, nil
}

// Release implements Store.
func (s *RedisStore) Release(ctx context.Context, key, owner string) error {
	return releaseScript.Run(ctx, s.rdb, []string{s.lease(key)}, owner).Err()
}

// Size implements Store.
func (s *RedisStore) Size(ctx context.Context, key string) (int, error) {
	t0 := s.ledger.begin()
	res, err := sizeScript.Run(ctx, s.rdb, []string{s.queue(key), s.inflight(key), s.state(key)}).Slice()
	if err != nil {
		return 0, err
	}
	if len(res) != 5 {
		return 0, errors.New("webhooks: unreadable outbox size")
	}
	n, _ := res[0].(int64)
	gen, _ := res[1].(string)
	st := outboxState{gen: gen}
	st.h, _ = strconv.ParseInt(fmt.Sprint(res[2]), 10, 64)
	st.fs, _ = strconv.ParseInt(fmt.Sprint(res[3]), 10, 64)
	st.fl, _ = res[4].(int64)
	s.ledger.observe(key, st, t0)
	return int(n), nil
}

// Occupy implements Store.
func (s *RedisStore) Occupy(ctx context.Context, app, channel string, out Out) (bool, error) {
	keys := append([]string{s.nodeSet(s.node), s.occ(), s.holds()}, s.outArgs(out)...)
	res, err := occupyScript.Run(ctx, s.rdb, keys, field(app, channel),
		Hold{Kind: HoldVacated, App: app, Channel: channel}.member(), out.Raw, out.Limit, s.gen()).Slice()
	n, err := s.emitted(out, res, err)
	return n == 1, err
}

// Vacate implements Store.
func (s *RedisStore) Vacate(ctx context.Context, app, channel string, due time.Time) error {
	return vacateScript.Run(ctx, s.rdb, []string{s.nodeSet(s.node), s.occ(), s.holds()}, field(app, channel),
		Hold{Kind: HoldVacated, App: app, Channel: channel}.member(), due.UnixMilli()).Err()
}

// MemberAdd implements Store.
func (s *RedisStore) MemberAdd(ctx context.Context, app, channel, user string, out Out) (bool, error) {
	keys := append([]string{s.holds()}, s.outArgs(out)...)
	res, err := memberAddScript.Run(ctx, s.rdb, keys,
		Hold{Kind: HoldRemoved, App: app, Channel: channel, User: user}.member(), out.Raw, out.Limit, s.gen()).Slice()
	n, err := s.emitted(out, res, err)
	return n == 1, err
}

// MemberRemove implements Store.
func (s *RedisStore) MemberRemove(ctx context.Context, app, channel, user string, due time.Time) error {
	return s.rdb.ZAdd(ctx, s.holds(), redis.Z{Score: float64(due.UnixMilli()),
		Member: Hold{Kind: HoldRemoved, App: app, Channel: channel, User: user}.member()}).Err()
}

// CacheMiss implements Store.
func (s *RedisStore) CacheMiss(ctx context.Context, app, channel string, out Out) (bool, error) {
	keys := append([]string{s.cacheMiss()}, s.outArgs(out)...)
	res, err := cacheMissScript.Run(ctx, s.rdb, keys, field(app, channel), out.Raw, out.Limit, s.gen()).Slice()
	n, err := s.emitted(out, res, err)
	return n == 1, err
}

// Count implements Store.
func (s *RedisStore) Count(ctx context.Context, app, channel string, due time.Time) error {
	return s.rdb.ZAddNX(ctx, s.holds(), redis.Z{Score: float64(due.UnixMilli()),
		Member: Hold{Kind: HoldCount, App: app, Channel: channel}.member()}).Err()
}

// Due implements Store.
func (s *RedisStore) Due(ctx context.Context, now time.Time, max int) ([]Hold, error) {
	res, err := s.rdb.ZRangeByScore(ctx, s.holds(), &redis.ZRangeBy{Min: "-inf", Max: ms(now), Count: int64(max)}).Result()
	if err != nil {
		return nil, err
	}
	out := make([]Hold, 0, len(res))
	for _, m := range res {
		if h, ok := parseHold(m); ok {
			out = append(out, h)
		} else {
			s.rdb.ZRem(ctx, s.holds(), m) // not ours to keep: it would be listed for ever
		}
	}
	return out, nil
}

// Fire implements Store.
func (s *RedisStore) Fire(ctx context.Context, h Hold, now time.Time, out Out) (bool, error) {
	cm := ""
	if h.Kind == HoldVacated {
		cm = field(h.App, h.Channel)
	}
	keys := append([]string{s.holds(), s.cacheMiss()}, s.outArgs(out)...)
	res, err := fireScript.Run(ctx, s.rdb, keys, h.member(), now.UnixMilli(), out.Raw, out.Limit, cm, s.gen()).Slice()
	n, err := s.emitted(out, res, err)
	return n == 1, err
}
