package channels

import (
	"context"
	"hash/maphash"
	"sort"
	"strings"
	"sync"
)

// Subscriber is a local socket that can receive frames. Send must not block: it queues
// the frame (or cuts the slow client off) and returns, so fan-out never waits on a socket.
type Subscriber interface {
	SocketID() string
	Send(frame []byte)
}

const shardCount = 256

type key struct{ app, name string }

// channel is one channel's local subscribers. Its lock is taken without the shard's: a
// fan-out holds the read lock for the whole delivery, and a subscribe waiting for it must
// not hold the shard lock meanwhile, or every other channel of the shard would wait for
// that broadcast too (a lock convoy). dead marks a channel Unsubscribe emptied and is
// removing from the shard; a Subscribe that finds it dead puts a fresh one in its place.
type channel struct {
	mu   sync.RWMutex
	subs map[string]Subscriber
	dead bool
	// deflating counts the subscribers with a compressor (deflate.go): while it is 0 a
	// broadcast costs exactly what it did before compression existed.
	deflating int
}

type shard struct {
	mu       sync.RWMutex
	channels map[key]*channel
	// cacheMu orders the deliveries of the shard's cache channels with a gap replay
	// (cache_gap.go), so a replayed last event never lands after a newer one.
	cacheMu sync.Mutex
}

// Registry is the node's channel table, sharded by app and channel name so that
// subscriptions to different channels never contend on one lock.
type Registry struct {
	seed     maphash.Seed
	shards   [shardCount]shard
	broker   Broker
	presence PresenceStore
	occ      Occupancy
	watch    Watch
	cache    *cacheStore
	// remoteCache, when set, is the cluster's cache (see LastEvent in cache.go).
	remoteCache CacheReader
	// router, when the broker routes by interest, hears about each channel's first and
	// last local subscriber.
	router Router
	sent   deliveryStats // broadcast fan-out counters (stats.go)
	ann    announced     // what local presence subscribers were told (announced.go)
	replay cacheReplay   // the cache channels' replay after a gap (cache_gap.go)
}

// Options wires the seams; nil Broker or Presence selects the in-memory one. Occupancy,
// when set, hears about every subscription change (for cluster-wide counts).
type Options struct {
	Broker    Broker
	Presence  PresenceStore
	Occupancy Occupancy
	// Cache, when set, answers cache channels' last events cluster-wide.
	Cache CacheReader
	// Watch, when its Observer is set, hears about the subscriptions of its channels.
	Watch Watch
}

// Watch is the registry's subscription-observer hook: Observer hears about every local
// subscribe and unsubscribe of a channel whose name starts with Prefix, after the change,
// outside the registry's locks, before Subscribe or Unsubscribe returns (so a caller that
// answers the client afterwards answers after the observer). The bridge's socket index
// is fed this way; the registry knows nothing of what an observer keeps. Waits says that
// the observer's calls make network round trips (see SubscribeWaits).
type Watch struct {
	Prefix   string
	Observer Occupancy
	Waits    bool
}

// watches reports whether the Watch hears about the channel.
func (w *Watch) watches(name string) bool {
	return w.Observer != nil && strings.HasPrefix(name, w.Prefix)
}

// NewRegistry builds a registry. With Options.Broker nil, a MemoryBroker delivering to
// this registry is used.
func NewRegistry(opts Options) *Registry {
	r := &Registry{seed: maphash.MakeSeed(), cache: newCacheStore()}
	for i := range r.shards {
		r.shards[i].channels = make(map[key]*channel)
	}
	r.broker = opts.Broker
	if r.broker == nil {
		r.broker = NewMemoryBroker(r.DeliverLocal)
	}
	if rt, ok := r.broker.(Router); ok {
		r.router = rt
	}
	r.occ = opts.Occupancy
	r.watch = opts.Watch
	r.remoteCache = opts.Cache
	r.presence = opts.Presence
	if r.presence == nil {
		r.presence = NewMemoryPresence()
	}
	return r
}

// Presence returns the presence store under the registry.
func (r *Registry) Presence() PresenceStore { return r.presence }

// Broker returns the broker under the registry.
func (r *Registry) Broker() Broker { return r.broker }

func (r *Registry) shardOf(app, name string) *shard {
	var h maphash.Hash
	h.SetSeed(r.seed)
	h.WriteString(app)
	h.WriteByte(0)
	h.WriteString(name)
	return &r.shards[h.Sum64()%shardCount]
}

// Subscribe adds sub to a channel and returns the local subscriber count after it and
// whether sub was newly added (a repeated subscribe is a no-op). It holds the shard lock
// only to find or create the channel, never while waiting for the channel's own lock.
func (r *Registry) Subscribe(app, name string, sub Subscriber) (count int, added bool) {
	s := r.shardOf(app, name)
	k := key{app, name}
	s.mu.RLock()
	ch := s.channels[k]
	s.mu.RUnlock()
	for {
		if ch == nil {
			ch = s.live(k, nil)
		}
		ch.mu.Lock()
		if !ch.dead {
			break
		}
		ch.mu.Unlock()
		ch = s.live(k, ch) // emptied by an Unsubscribe meanwhile: replace it
	}
	if _, dup := ch.subs[sub.SocketID()]; !dup {
		ch.subs[sub.SocketID()] = sub
		added = true
		if deflaterOf(sub) != nil {
			ch.deflating++
		}
	}
	count = len(ch.subs)
	if added && count == 1 && r.router != nil {
		// Under the channel's lock: a later Unwant of this channel (its last subscriber
		// leaving) cannot overtake this Want. The router only records it.
		r.router.Want(app, name)
	}
	ch.mu.Unlock()
	if added && !IsInternal(name) {
		if r.occ != nil {
			r.occ.Subscribed(app, name, sub.SocketID())
		}
		if r.watch.watches(name) {
			r.watch.Observer.Subscribed(app, name, sub.SocketID())
		}
	}
	return count, added
}

// live returns the shard's channel for k, creating it when there is none or when the one
// there is stale (a dead channel the caller found).
func (s *shard) live(k key, stale *channel) *channel {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.channels[k]
	if ch == nil || ch == stale {
		ch = &channel{subs: make(map[string]Subscriber, 1)}
		s.channels[k] = ch
	}
	return ch
}

// Unsubscribe removes a socket from a channel, dropping the channel when it empties.
// It returns the remaining local count and whether the socket was subscribed. Like
// Subscribe it never waits for the channel's lock while holding the shard's.
func (r *Registry) Unsubscribe(app, name, socketID string) (remaining int, removed bool) {
	s := r.shardOf(app, name)
	k := key{app, name}
	s.mu.RLock()
	ch := s.channels[k]
	s.mu.RUnlock()
	if ch == nil {
		return 0, false
	}
	ch.mu.Lock()
	if old, ok := ch.subs[socketID]; ok {
		delete(ch.subs, socketID)
		removed = true
		if deflaterOf(old) != nil {
			ch.deflating--
		}
	}
	remaining = len(ch.subs)
	drop := remaining == 0 && !ch.dead
	if drop {
		ch.dead = true
		if removed && r.router != nil {
			r.router.Unwant(app, name)
		}
	}
	ch.mu.Unlock()
	if drop {
		s.mu.Lock()
		if s.channels[k] == ch { // not already replaced by a Subscribe
			delete(s.channels, k)
		}
		s.mu.Unlock()
		r.dropAnnounced(k)
	}
	if removed && !IsInternal(name) {
		if r.occ != nil {
			r.occ.Unsubscribed(app, name, socketID)
		}
		if r.watch.watches(name) {
			r.watch.Observer.Unsubscribed(app, name, socketID)
		}
	}
	return remaining, removed
}

// Routes reports whether subscribes wait for a routing confirmation (the broker is a
// Router); without one WhenRouted runs fn at once, so a caller may skip building fn.
func (r *Registry) Routes() bool { return r.router != nil }

// WhenRouted runs fn(true) once publishes of the channel made on any node reach this node:
// at once with a broker that does not route by interest or when the node's subscription is
// confirmed, else when it is (or after a bound, see Router); fn(false) when the channel lost
// its last local subscriber before that (nobody is left to answer). Callers answer a
// subscribe in fn; fn must not block.
func (r *Registry) WhenRouted(app, name string, fn func(routed bool)) {
	if r.router == nil {
		fn(true)
		return
	}
	r.router.WhenRouted(app, name, fn)
}

// AwaitRouted is WhenRouted for callers that may wait (off the pollers): it returns when fn
// would run, or with ctx's error.
func (r *Registry) AwaitRouted(ctx context.Context, app, name string) error {
	if r.router == nil {
		return nil
	}
	done := make(chan struct{})
	r.router.WhenRouted(app, name, func(bool) { close(done) })
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// SubscribeRouted waits (bounded by ctx) until publishes of the channel made on any node
// reach this node and reports whether they do: false when the route was not in effect in
// time (Redis stalled or unreachable), which a subscriber that must not miss an event (a
// recovery channel's) is refused for. Without a routing broker it is true at once.
func (r *Registry) SubscribeRouted(ctx context.Context, app, name string) bool {
	if r.router == nil {
		return true
	}
	if r.AwaitRouted(ctx, app, name) != nil {
		return false
	}
	if re, ok := r.broker.(interface{ RouteInEffect(string, string) bool }); ok {
		return re.RouteInEffect(app, name)
	}
	return true
}

// IsSubscribed reports whether socketID is subscribed locally to the channel.
func (r *Registry) IsSubscribed(app, name, socketID string) bool {
	s := r.shardOf(app, name)
	s.mu.RLock()
	ch := s.channels[key{app, name}]
	s.mu.RUnlock()
	if ch == nil {
		return false
	}
	ch.mu.RLock()
	_, ok := ch.subs[socketID]
	ch.mu.RUnlock()
	return ok
}

// Publish hands a message to the broker, which delivers it on every node.
func (r *Registry) Publish(ctx context.Context, m Message) error {
	return r.broker.Publish(ctx, m)
}

// PublishAll publishes every message or, when the broker refuses, none (with a BatchBroker;
// other brokers publish one by one and stop at the first error).
func (r *Registry) PublishAll(ctx context.Context, ms []Message) error {
	if bb, ok := r.broker.(BatchBroker); ok {
		return bb.PublishAll(ctx, ms)
	}
	for _, m := range ms {
		if err := r.broker.Publish(ctx, m); err != nil {
			return err
		}
	}
	return nil
}

// PublishAcked publishes ms all or nothing and returns once the cluster has them: with an
// AckBroker, once Redis accepted every one (every node, this one too, then delivers them
// in Redis's order); with the others, once delivered (the memory broker delivers at once).
func (r *Registry) PublishAcked(ctx context.Context, ms []Message) error {
	if ab, ok := r.broker.(AckBroker); ok {
		return ab.PublishAcked(ctx, ms)
	}
	return r.PublishAll(ctx, ms)
}

// SeedPosition tells a broker that puts recovery events in serial order (cluster.RedisBroker) the
// position a recovery channel's subscriber was answered with.
func (r *Registry) SeedPosition(app, name string, pos Position) {
	if ps, ok := r.broker.(interface {
		SeedPosition(string, string, Position)
	}); ok {
		ps.SeedPosition(app, name, pos)
	}
}

// PublishNoWait delivers m on this node at once and hands it to the other nodes without
// waiting for the network (AsyncPublisher), for callers that must never wait: the pollers
// that read every socket. With a broker that cannot, it is Publish.
func (r *Registry) PublishNoWait(m Message) error {
	if a, ok := r.broker.(AsyncPublisher); ok {
		return a.PublishAsync(m)
	}
	return r.broker.Publish(context.Background(), m)
}

// Remote reports whether presence or publishes may make network round trips (a cluster
// broker or presence store), which callers that must never wait then run elsewhere.
func (r *Registry) Remote() bool {
	_, memBroker := r.broker.(*MemoryBroker)
	_, memPresence := r.presence.(*MemoryPresence)
	return !memBroker || !memPresence
}

// SubscribeWaits reports whether Subscribe or Unsubscribe of the channel makes a network
// round trip (an Occupancy that writes it through, see WriteThrough, or a Watch that Waits).
func (r *Registry) SubscribeWaits(name string) bool {
	if r.watch.Waits && r.watch.watches(name) {
		return true
	}
	wt, ok := r.occ.(WriteThrough)
	return ok && wt.WritesThrough(name)
}

// WriteThrough is implemented by an Occupancy whose Subscribed and Unsubscribed write some
// channels through to the network before returning.
type WriteThrough interface {
	WritesThrough(channel string) bool
}

// DeliverLocal queues the frame on every local subscriber except m.Except and records it
// for cache channels. Brokers call it for messages from any node. It returns the number
// of sockets it queued the frame on.
func (r *Registry) DeliverLocal(m Message) int {
	s := r.shardOf(m.AppID, m.Channel)
	if m.Cacheable && KindOf(m.Channel).IsCache() {
		s.cacheMu.Lock()
		defer s.cacheMu.Unlock()
		r.cache.put(m.AppID, m.Channel, m.Frame)
	}
	return r.fanOut(s, m)
}

// fanOut sends m to the channel's local subscribers (s is its shard).
func (r *Registry) fanOut(s *shard, m Message) int {
	s.mu.RLock()
	ch := s.channels[key{m.AppID, m.Channel}]
	s.mu.RUnlock()
	if ch == nil {
		return 0
	}
	r.noteAnnounced(m)
	n := 0
	ch.mu.RLock()
	if ch.deflating > 0 {
		n = ch.deliverDeflating(m)
	} else {
		for id, sub := range ch.subs {
			if m.Except != "" && excluded(id, sub, m.Except) {
				continue
			}
			sub.Send(m.Frame)
			n++
		}
	}
	ch.mu.RUnlock()
	r.sent.add(n, len(m.Frame))
	return n
}

// Resumed is a Subscriber that took over an earlier socket's subscription (a recovery
// resume with socket_id): an event published excluding that earlier socket (toOthers())
// is not delivered to it either, even when it reaches the channel after the resume.
type Resumed interface {
	PreviousSocketID() string
}

// excluded reports whether a message excluding except skips sub (socket id id). Only
// messages with an Except pay for the check.
func excluded(id string, sub Subscriber, except string) bool {
	if id == except {
		return true
	}
	r, ok := sub.(Resumed)
	return ok && r.PreviousSocketID() == except
}

// SubscriptionCount is the number of local sockets subscribed to the channel.
func (r *Registry) SubscriptionCount(app, name string) int {
	s := r.shardOf(app, name)
	s.mu.RLock()
	ch := s.channels[key{app, name}]
	s.mu.RUnlock()
	if ch == nil {
		return 0
	}
	ch.mu.RLock()
	defer ch.mu.RUnlock()
	return len(ch.subs)
}

// ChannelInfo is one occupied channel in a listing.
type ChannelInfo struct {
	Name              string
	SubscriptionCount int
}

// Channels lists the app's occupied channels whose names start with prefix, sorted.
func (r *Registry) Channels(app, prefix string) []ChannelInfo {
	var out []ChannelInfo
	for i := range r.shards {
		s := &r.shards[i]
		s.mu.RLock()
		for k, ch := range s.channels {
			if k.app != app || !strings.HasPrefix(k.name, prefix) || IsInternal(k.name) {
				continue
			}
			ch.mu.RLock()
			n := len(ch.subs)
			ch.mu.RUnlock()
			if n > 0 {
				out = append(out, ChannelInfo{Name: k.name, SubscriptionCount: n})
			}
		}
		s.mu.RUnlock()
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
