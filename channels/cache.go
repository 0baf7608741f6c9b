package channels

import (
	"context"
	"sync"
	"time"
)

// CacheTTL is how long a cache channel remembers its last event (Pusher: 30 minutes).
const CacheTTL = 30 * time.Minute

type cachedFrame struct {
	frame   []byte
	expires time.Time
}

// cacheStore keeps the last frame per cache channel. Entries expire lazily on read and in
// a sweep on write, so memory stays bounded by live channels.
type cacheStore struct {
	mu      sync.Mutex
	entries map[key]cachedFrame
	writes  int
	now     func() time.Time
}

func newCacheStore() *cacheStore {
	return &cacheStore{entries: make(map[key]cachedFrame), now: time.Now}
}

func (c *cacheStore) put(app, name string, frame []byte) {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.entries[key{app, name}] = cachedFrame{frame: frame, expires: now.Add(CacheTTL)}
	c.writes++
	if c.writes%1024 == 0 {
		for k, e := range c.entries {
			if now.After(e.expires) {
				delete(c.entries, k)
			}
		}
	}
}

func (c *cacheStore) get(app, name string) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key{app, name}]
	if !ok {
		return nil, false
	}
	if c.now().After(e.expires) {
		delete(c.entries, key{app, name})
		return nil, false
	}
	return e.frame, true
}

// CacheReader reads a cache channel's last event for the whole cluster (cluster.RedisCache).
type CacheReader interface {
	LastEvent(ctx context.Context, app, channel string) (frame []byte, ok bool, err error)
}

// cacheLocalWins is how recent a local copy must be to be answered without asking Redis.
const cacheLocalWins = 2 * time.Second

// recent returns the entry when it was written within d.
func (c *cacheStore) recent(app, name string, d time.Duration) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key{app, name}]
	if !ok || c.now().After(e.expires.Add(d-CacheTTL)) {
		return nil, false
	}
	return e.frame, true
}

// cacheReadTimeout bounds CachedFrame's cluster read.
const cacheReadTimeout = time.Second

// LastEvent returns the last event published on a cache channel, if still fresh. With a
// cluster CacheReader it is the cluster's answer; when that read fails, this node's copy
// (every node records every cacheable event it delivers) is returned together with the
// error, so the caller may replay it or treat the answer as unknown. It may wait on Redis:
// call it off the socket-reading goroutines, with a deadline in ctx.
func (r *Registry) LastEvent(ctx context.Context, app, name string) ([]byte, bool, error) {
	if r.remoteCache != nil {
		// This node's copy wins while one of its own publishes to the channel is still
		// queued for Redis (SET and PUBLISH travel together, so an event from another node
		// that this node delivered is in Redis already). A broker that cannot tell falls back
		// to "delivered moments ago". Under interest routing a node without a subscriber of
		// the channel does not see other nodes' events, so an old local copy must not win.
		if cp, ok := r.broker.(interface{ CachePending(app, ch string) bool }); ok {
			if cp.CachePending(app, name) {
				if f, ok := r.cache.get(app, name); ok {
					return f, true, nil
				}
			}
		} else if f, ok := r.cache.recent(app, name, cacheLocalWins); ok {
			return f, true, nil
		}
		f, ok, err := r.remoteCache.LastEvent(ctx, app, name)
		if err == nil {
			return f, ok, nil
		}
		f, ok = r.cache.get(app, name)
		return f, ok, err
	}
	f, ok := r.cache.get(app, name)
	return f, ok, nil
}

// CachedFrame is LastEvent with a short deadline, answering this node's copy when the
// cluster cannot be read.
func (r *Registry) CachedFrame(app, name string) ([]byte, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), cacheReadTimeout)
	defer cancel()
	f, ok, _ := r.LastEvent(ctx, app, name)
	return f, ok
}
