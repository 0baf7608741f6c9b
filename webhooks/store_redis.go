package webhooks

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
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
// one node or more has it. Each node heartbeats; Maintain on any node removes a node that
// stopped heartbeating, which vacates the channels only it had (held, like any vacate).
//
// Every key carries the hash tag of the prefix (see NewRedisStore), so the scripts work
// on Redis Cluster too: webhook state is small and one slot carries it.
type RedisStore struct {
	rdb      redis.UniversalClient
	p        string // key prefix, with a hash tag
	node     string
	external bool // liveness comes from the cluster's node registry (UseNodeRegistry)
}

var _ Store = (*RedisStore)(nil)

// NewRedisStore keeps webhook state under prefix+"{webhooks}:" for node (the node id the
// rest of the cluster code uses). The client stays the caller's.
func NewRedisStore(rdb redis.UniversalClient, prefix, node string) *RedisStore {
	return &RedisStore{rdb: rdb, p: prefix + "{webhooks}:", node: node}
}

func (s *RedisStore) queue(key string) string    { return s.p + "q:" + key }
func (s *RedisStore) inflight(key string) string { return s.p + "f:" + key }
func (s *RedisStore) lease(key string) string    { return s.p + "l:" + key }
func (s *RedisStore) since(key string) string    { return s.p + "t:" + key }
func (s *RedisStore) nodeSet(node string) string { return s.p + "n:" + node }
func (s *RedisStore) nodes() string              { return s.p + "nodes" }
func (s *RedisStore) occ() string                { return s.p + "occ" }
func (s *RedisStore) holds() string              { return s.p + "holds" }
func (s *RedisStore) cacheMiss() string          { return s.p + "cm" }

// pushLua appends ARGV[raw] to KEYS[from..] trimming each to the limit; scripts that emit
// include it.
const pushLua = `
local function push(from, raw, limit)
  local dropped = 0
  for i = from, #KEYS do
    local n = redis.call('RPUSH', KEYS[i], raw)
    if limit > 0 and n > limit then
      redis.call('LTRIM', KEYS[i], n - limit, -1)
      dropped = dropped + n - limit
    end
  end
  return dropped
end
`

var (
	pushScript = redis.NewScript(pushLua + `return push(1, ARGV[1], tonumber(ARGV[2]))`)

	// claimScript returns {since ms, events...} or {} (empty) or false (leased). KEYS[4]
	// keeps when the in-flight batch was formed, for as long as the batch exists.
	claimScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if cur and cur ~= ARGV[1] then return false end
if redis.call('LLEN', KEYS[2]) == 0 then
  redis.call('DEL', KEYS[4])
  for i = 1, tonumber(ARGV[2]) do
    local v = redis.call('LPOP', KEYS[3])
    if not v then break end
    redis.call('RPUSH', KEYS[2], v)
  end
end
local batch = redis.call('LRANGE', KEYS[2], 0, -1)
if #batch == 0 then
  if cur then redis.call('DEL', KEYS[1]) end
  return {}
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])
redis.call('SET', KEYS[4], ARGV[4], 'NX')
table.insert(batch, 1, redis.call('GET', KEYS[4]))
return batch`)

	renewScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1`)

	ackScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[2], KEYS[3])
return 1`)

	releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 1`)

	occupyScript = redis.NewScript(pushLua + `
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
if redis.call('SADD', KEYS[2], ARGV[3]) == 0 then return 0 end
if redis.call('HINCRBY', KEYS[3], ARGV[3], 1) ~= 1 then return 0 end
if redis.call('ZREM', KEYS[4], ARGV[4]) == 1 then return 0 end
push(5, ARGV[5], tonumber(ARGV[6]))
return 1`)

	vacateScript = redis.NewScript(`
if redis.call('SREM', KEYS[1], ARGV[1]) == 0 then return 0 end
if redis.call('HINCRBY', KEYS[2], ARGV[1], -1) > 0 then return 0 end
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[2])
return 1`)

	memberAddScript = redis.NewScript(pushLua + `
if redis.call('ZREM', KEYS[1], ARGV[1]) == 1 then return 0 end
push(2, ARGV[2], tonumber(ARGV[3]))
return 1`)

	cacheMissScript = redis.NewScript(pushLua + `
if redis.call('SADD', KEYS[1], ARGV[1]) == 0 then return 0 end
push(2, ARGV[2], tonumber(ARGV[3]))
return 1`)

	fireScript = redis.NewScript(pushLua + `
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not s or tonumber(s) > tonumber(ARGV[2]) then return 0 end
redis.call('ZREM', KEYS[1], ARGV[1])
if ARGV[5] ~= '' then redis.call('SREM', KEYS[2], ARGV[5]) end
push(3, ARGV[3], tonumber(ARGV[4]))
return 1`)

	// reapScript removes up to ARGV[4] channels of a node whose heartbeat is not after
	// ARGV[2]; it returns 1 when the node is gone (or came back), 0 when more remain.
	reapScript = redis.NewScript(`
local seen = redis.call('HGET', KEYS[1], ARGV[1])
if not seen or tonumber(seen) > tonumber(ARGV[2]) then return 1 end
for _, f in ipairs(redis.call('SPOP', KEYS[2], tonumber(ARGV[4]))) do
  if redis.call('HINCRBY', KEYS[3], f, -1) <= 0 then
    redis.call('HDEL', KEYS[3], f)
    redis.call('ZADD', KEYS[4], ARGV[3], 'v\0' .. f)
  end
end
if redis.call('SCARD', KEYS[2]) == 0 then
  redis.call('HDEL', KEYS[1], ARGV[1])
  return 1
end
return 0`)
)

// reapBatch bounds one reap script's work so a dead node with many channels never blocks
// Redis for long.
const reapBatch = 500

func ms(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }

func (s *RedisStore) outArgs(out Out) []string {
	keys := make([]string, len(out.Keys))
	for i, k := range out.Keys {
		keys[i] = s.queue(k)
	}
	return keys
}

// Push implements Store.
func (s *RedisStore) Push(ctx context.Context, out Out) (int, error) {
	if len(out.Keys) == 0 {
		return 0, nil
	}
	return pushScript.Run(ctx, s.rdb, s.outArgs(out), out.Raw, out.Limit).Int()
}

// Claim implements Store.
func (s *RedisStore) Claim(ctx context.Context, key, owner string, max int, lease time.Duration, now time.Time) (Batch, bool, error) {
	res, err := claimScript.Run(ctx, s.rdb, []string{s.lease(key), s.inflight(key), s.queue(key), s.since(key)},
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
	n, err := ackScript.Run(ctx, s.rdb, []string{s.lease(key), s.inflight(key), s.since(key)}, owner).Int()
	return n == 1, err
}

// Release implements Store.
func (s *RedisStore) Release(ctx context.Context, key, owner string) error {
	return releaseScript.Run(ctx, s.rdb, []string{s.lease(key)}, owner).Err()
}

// Size implements Store.
func (s *RedisStore) Size(ctx context.Context, key string) (int, error) {
	pipe := s.rdb.Pipeline()
	q := pipe.LLen(ctx, s.queue(key))
	f := pipe.LLen(ctx, s.inflight(key))
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, err
	}
	return int(q.Val() + f.Val()), nil
}

// Occupy implements Store.
func (s *RedisStore) Occupy(ctx context.Context, app, channel string, out Out) (bool, error) {
	keys := append([]string{s.nodes(), s.nodeSet(s.node), s.occ(), s.holds()}, s.outArgs(out)...)
	n, err := occupyScript.Run(ctx, s.rdb, keys, s.node, ms(time.Now()), field(app, channel),
		Hold{Kind: HoldVacated, App: app, Channel: channel}.member(), out.Raw, out.Limit).Int()
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
	n, err := memberAddScript.Run(ctx, s.rdb, keys,
		Hold{Kind: HoldRemoved, App: app, Channel: channel, User: user}.member(), out.Raw, out.Limit).Int()
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
	n, err := cacheMissScript.Run(ctx, s.rdb, keys, field(app, channel), out.Raw, out.Limit).Int()
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
	n, err := fireScript.Run(ctx, s.rdb, keys, h.member(), now.UnixMilli(), out.Raw, out.Limit, cm).Int()
	return n == 1, err
}

// Maintain implements Store.
func (s *RedisStore) Maintain(ctx context.Context, now time.Time, ttl time.Duration) error {
	if s.external {
		return nil
	}
	if err := s.rdb.HSet(ctx, s.nodes(), s.node, now.UnixMilli()).Err(); err != nil {
		return err
	}
	seen, err := s.rdb.HGetAll(ctx, s.nodes()).Result()
	if err != nil {
		return err
	}
	cutoff := now.Add(-ttl).UnixMilli()
	for node, v := range seen {
		at, _ := strconv.ParseInt(v, 10, 64)
		if node == s.node || at > cutoff {
			continue
		}
		for {
			done, err := reapScript.Run(ctx, s.rdb, []string{s.nodes(), s.nodeSet(node), s.occ(), s.holds()},
				node, cutoff, now.UnixMilli(), reapBatch).Int()
			if err != nil {
				return err
			}
			if done == 1 {
				break
			}
		}
	}
	return nil
}
