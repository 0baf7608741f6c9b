package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/reverbgo/reverbgo/internal/cluster"
	"github.com/reverbgo/reverbgo/internal/redisx"
)

// RedisStore is the cluster Store: bindings and claims are Redis hashes created add-if-absent
// and changed only by Lua scripts (atomic), every key carries a PX TTL, and result wake-ups
// travel over ONE pub/sub channel shared by all nodes — each node holds a single subscription
// and fans out to its local waiters, so waiting calls cost no Redis connections. A wake-up lost
// to a reconnect is harmless: the waiter's ClaimTimeout at the deadline returns the stored result.
//
// On Redis Cluster every key and the wake-up channel share the prefix, so a prefix with a
// hash tag ("{reverbgo:reverb}:toolmark:") keeps each script's keys in one slot, and wake-ups
// use sharded pub/sub (SPUBLISH from the claim script, SSUBSCRIBE here) in that same slot.
type RedisStore struct {
	rdb     redis.UniversalClient
	keys    cluster.ToolmarkKeys // every key and channel name, under the prefix
	sub     *redisx.Sub          // the node's pub/sub loop on the wake-up channel
	rc      *redisx.Client
	wrapped bool   // rc wraps the caller's client: Close closes its Subs
	publish string // PUBLISH, or SPUBLISH on Redis Cluster

	mu       sync.Mutex
	watchers map[string]map[*memWatch]struct{}
	done     chan struct{}
}

// NewRedisStore subscribes to the wake-up channel and starts dispatching. prefix namespaces every
// key and the channel (default "reverbgo:toolmark:"). Close releases the subscription; the
// client stays the caller's.
func NewRedisStore(ctx context.Context, rdb redis.UniversalClient, prefix string) (*RedisStore, error) {
	if prefix == "" {
		prefix = "reverbgo:toolmark:"
	}
	s := &RedisStore{rdb: rdb, keys: cluster.NewToolmarkKeys(prefix), publish: "PUBLISH", watchers: map[string]map[*memWatch]struct{}{}}
	s.rc, s.wrapped = redisx.Of(rdb, nil)
	if s.rc.Sharded() {
		s.publish = "SPUBLISH"
	}
	sub, err := s.rc.Fixed(ctx, "toolmark-results", s.channel(), s.wake)
	if err != nil {
		if s.wrapped {
			s.rc.CloseSubs()
		}
		return nil, err
	}
	s.sub = sub
	return s, nil
}

func (s *RedisStore) channel() string { return s.keys.Results() }
func (s *RedisStore) manifestKey(k ConvKey) string {
	return s.keys.Manifest(k.App, k.User, k.Conversation)
}
func (s *RedisStore) callKey(id string) string { return s.keys.Call(id) }

// confirmKey namespaces a confirmId by its app (see Store.GetConfirm); the confirmId holds
// no ':'.
func (s *RedisStore) confirmKey(app, id string) string {
	return s.keys.Confirm(app, id)
}
func (s *RedisStore) ctx() (context.Context, func()) {
	return context.WithTimeout(context.Background(), 5*time.Second)
}

// Close stops the subscription.
func (s *RedisStore) Close() error {
	s.sub.Close()
	if s.wrapped {
		s.rc.CloseSubs()
	}
	return nil
}

func (s *RedisStore) wake(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for w := range s.watchers[id] {
		close(w.ch)
	}
	delete(s.watchers, id)
}

var putManifestScript = redisx.Script("bridge_put_manifest")

// PutManifest implements Store.
func (s *RedisStore) PutManifest(ctx context.Context, k ConvKey, m Manifest, ttl time.Duration) (bool, error) {
	js, err := json.Marshal(m)
	if err != nil {
		return false, err
	}
	n, err := putManifestScript.Run(ctx, s.rdb, []string{s.manifestKey(k)}, m.ClientID, m.Rev, js, ttl.Milliseconds()).Int()
	return n == 1, err
}

// GetManifest implements Store.
func (s *RedisStore) GetManifest(ctx context.Context, k ConvKey) (*Manifest, error) {
	v, err := s.rdb.HMGet(ctx, s.manifestKey(k), "rev", "json").Result()
	if err != nil || v[1] == nil {
		return nil, err
	}
	var m Manifest
	if err := json.Unmarshal([]byte(v[1].(string)), &m); err != nil {
		return nil, err
	}
	if rev, ok := v[0].(string); ok {
		_ = json.Unmarshal([]byte(rev), &m.Rev) // the rev field is raised by ChangeRev
	}
	return &m, nil
}

var changeRevScript = redisx.Script("bridge_change_rev")

// ChangeRev implements Store.
func (s *RedisStore) ChangeRev(ctx context.Context, k ConvKey, clientID string, rev int64, ttl time.Duration) (bool, error) {
	n, err := changeRevScript.Run(ctx, s.rdb, []string{s.manifestKey(k)}, clientID, rev, ttl.Milliseconds()).Int()
	return n == 1, err
}

var bindScript = redisx.Script("bridge_bind")

// Bind implements Store.
func (s *RedisStore) Bind(ctx context.Context, b Binding, ttl time.Duration) error {
	js, err := json.Marshal(b)
	if err != nil {
		return err
	}
	n, err := bindScript.Run(ctx, s.rdb, []string{s.callKey(b.ID)}, js, b.Deadline.UnixMilli(), ttl.Milliseconds()).Int()
	if err == nil && n == 0 {
		err = ErrExists
	}
	return err
}

// GetBinding implements Store.
func (s *RedisStore) GetBinding(ctx context.Context, id string) (*Binding, error) {
	js, err := s.rdb.HGet(ctx, s.callKey(id), "b").Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var b Binding
	if err := json.Unmarshal([]byte(js), &b); err != nil {
		return nil, err
	}
	return &b, nil
}

// claimResultScript returns the ClaimOutcome number; the order matches the Go constants.
var claimResultScript = redisx.Script("bridge_claim_result")

// ClaimResult implements Store.
func (s *RedisStore) ClaimResult(ctx context.Context, id string, result json.RawMessage, now time.Time,
	confirm *ConfirmBinding, confirmTTL time.Duration) (ClaimOutcome, error) {
	confirmKey, has, cjs := s.keys.NoConfirm(), "0", []byte("")
	if confirm != nil {
		var err error
		if cjs, err = json.Marshal(confirm); err != nil {
			return ClaimNotFound, err
		}
		confirmKey, has = s.confirmKey(confirm.Key.App, confirm.ConfirmID), "1"
	}
	// The wake-up channel goes in KEYS too: Redis Cluster checks a shard channel's slot like a key's.
	n, err := claimResultScript.Run(ctx, s.rdb, []string{s.callKey(id), confirmKey, s.channel()},
		[]byte(result), now.UnixMilli(), has, cjs, confirmTTL.Milliseconds(), "", id, s.publish).Int()
	if err != nil {
		return ClaimNotFound, err
	}
	return ClaimOutcome(n), nil
}

// claimTimeoutScript settles a call; the result is handed out once and then dropped, so a
// finished call keeps only its binding and state (for 403/409) until its TTL.
var claimTimeoutScript = redisx.Script("bridge_claim_timeout")

// ClaimTimeout implements Store.
func (s *RedisStore) ClaimTimeout(ctx context.Context, id string) (json.RawMessage, bool, error) {
	v, err := claimTimeoutScript.Run(ctx, s.rdb, []string{s.callKey(id)}).Slice()
	if err != nil {
		return nil, false, err
	}
	if len(v) != 2 {
		return nil, false, errors.New("bridge: unexpected claim reply")
	}
	if n, _ := v[0].(int64); n == 1 {
		return nil, true, nil
	}
	r, _ := v[1].(string)
	return json.RawMessage(r), false, nil
}

// Watch implements Store. After registering it checks once whether the result is already
// there, so a result that won before the watch existed is not missed.
func (s *RedisStore) Watch(id string) (<-chan struct{}, func()) {
	w := &memWatch{ch: make(chan struct{})}
	s.mu.Lock()
	set := s.watchers[id]
	if set == nil {
		set = map[*memWatch]struct{}{}
		s.watchers[id] = set
	}
	set[w] = struct{}{}
	s.mu.Unlock()
	release := func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if set := s.watchers[id]; set != nil {
			delete(set, w)
			if len(set) == 0 {
				delete(s.watchers, id)
			}
		}
	}
	ctx, cancel := s.ctx()
	defer cancel()
	if st, err := s.rdb.HGet(ctx, s.callKey(id), "st").Result(); err == nil && st == "1" {
		s.wake(id)
	}
	return w.ch, release
}

// GetConfirm implements Store.
func (s *RedisStore) GetConfirm(ctx context.Context, app, confirmID string) (*ConfirmBinding, error) {
	js, err := s.rdb.HGet(ctx, s.confirmKey(app, confirmID), "c").Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var c ConfirmBinding
	if err := json.Unmarshal([]byte(js), &c); err != nil {
		return nil, err
	}
	return &c, nil
}

var claimConfirmScript = redisx.Script("bridge_claim_confirm")

// ClaimConfirm implements Store.
func (s *RedisStore) ClaimConfirm(ctx context.Context, app, confirmID string) (bool, error) {
	n, err := claimConfirmScript.Run(ctx, s.rdb, []string{s.confirmKey(app, confirmID)}).Int()
	return n == 1, err
}

var _ Store = (*RedisStore)(nil)
