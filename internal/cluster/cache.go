package cluster

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"

	"github.com/reverbgo/reverbgo/channels"
)

// RedisCache keeps every cache channel's last event in Redis for CacheTTL, so a late
// subscriber on any node gets the last event published through any node, and cache_miss is
// decided from the cluster's state. The RedisBroker writes it (SET before the PUBLISH, in
// one pipeline); subscribers read it through Registry.LastEvent.
type RedisCache struct {
	rdb  redis.UniversalClient
	keys *KeySpace
}

var _ channels.CacheReader = (*RedisCache)(nil)

// NewRedisCache stores under prefix (default DefaultRedisPrefix). The client stays the caller's.
func NewRedisCache(rdb redis.UniversalClient, prefix string) *RedisCache {
	if prefix == "" {
		prefix = DefaultRedisPrefix
	}
	return NewRedisCacheIn(rdb, LegacyKeySpace(prefix))
}

// NewRedisCacheIn stores under the key space's names (each channel's key in its bucket).
func NewRedisCacheIn(rdb redis.UniversalClient, keys *KeySpace) *RedisCache {
	return &RedisCache{rdb: rdb, keys: keys}
}

func (c *RedisCache) key(app, ch string) string { return c.keys.ChannelKey("cache", app, ch) }

func (c *RedisCache) set(ctx context.Context, pipe redis.Pipeliner, app, ch string, frame []byte) {
	pipe.Set(ctx, c.key(app, ch), frame, channels.CacheTTL)
}

// LastEvent implements CacheReader.
func (c *RedisCache) LastEvent(ctx context.Context, app, ch string) ([]byte, bool, error) {
	b, err := c.rdb.Get(ctx, c.key(app, ch)).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return b, true, nil
}
