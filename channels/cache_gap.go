package channels

import (
	"bytes"
	"context"
	"sync"
	"time"
)

// Pub/sub has no replay: an event published on another node while this node's subscription
// connection was dark never reached this node's subscribers. For a cache channel the
// cluster still holds that event, as the channel's last (cluster.RedisCache), so after the gap the
// node re-reads the last event of every cache channel it has subscribers of and delivers it
// to them when it is not the frame this node last delivered (the registry's cache store is
// the one record of that). A subscriber that joined during the gap was answered the cluster's
// last event on subscribing and may get it a second time; nobody misses it.

// cacheReplayTimeout bounds one channel's read of its last event.
const cacheReplayTimeout = time.Second

// cacheReplay runs one replay at a time per registry; a gap announced while one runs makes
// it run once more afterwards (every subscription connection announces its own restore).
type cacheReplay struct {
	mu           sync.Mutex
	running, due bool
}

// CacheGap is the handler of a broker's gap announcements (cluster.RedisBrokerOptions.OnGap) that
// replays cache channels once a subscription connection is confirmed again (restored);
// it never blocks: the replay runs on a goroutine of its own.
func (r *Registry) CacheGap(_ string, restored bool) {
	if !restored || r.remoteCache == nil {
		return
	}
	p := &r.replay
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.running {
		p.due = true
		return
	}
	p.running = true
	go func() {
		for {
			r.ReplayCaches(context.Background())
			p.mu.Lock()
			if !p.due {
				p.running = false
				p.mu.Unlock()
				return
			}
			p.due = false
			p.mu.Unlock()
		}
	}()
}

// ReplayCaches delivers, for every cache channel with local subscribers, the cluster's last
// event when it differs from what this node last delivered, and returns how many channels
// it corrected. A channel with a publish of this node still on its way to Redis is skipped
// (the node's copy is the newer), and so is one that delivered anything while its last
// event was being read (what came is newer than what was read).
func (r *Registry) ReplayCaches(ctx context.Context) int {
	if r.remoteCache == nil {
		return 0
	}
	pending, _ := r.broker.(interface{ CachePending(app, ch string) bool })
	n := 0
	for _, k := range r.localCacheChannels() {
		if pending != nil && pending.CachePending(k.app, k.name) {
			continue
		}
		before, _ := r.cache.get(k.app, k.name)
		rctx, cancel := context.WithTimeout(ctx, cacheReplayTimeout)
		last, ok, err := r.remoteCache.LastEvent(rctx, k.app, k.name)
		cancel()
		if err != nil || !ok || bytes.Equal(last, before) {
			continue
		}
		s := r.shardOf(k.app, k.name)
		s.cacheMu.Lock()
		if now, _ := r.cache.get(k.app, k.name); bytes.Equal(now, before) {
			r.cache.put(k.app, k.name, last)
			r.fanOut(s, Message{AppID: k.app, Channel: k.name, Frame: last, Cacheable: true})
			n++
		}
		s.cacheMu.Unlock()
	}
	return n
}

// localCacheChannels lists the cache channels with local subscribers.
func (r *Registry) localCacheChannels() []key {
	var out []key
	for i := range r.shards {
		s := &r.shards[i]
		s.mu.RLock()
		for k, ch := range s.channels {
			if !KindOf(k.name).IsCache() {
				continue
			}
			ch.mu.RLock()
			if len(ch.subs) > 0 {
				out = append(out, k)
			}
			ch.mu.RUnlock()
		}
		s.mu.RUnlock()
	}
	return out
}
