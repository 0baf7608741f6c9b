package channels

import (
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
