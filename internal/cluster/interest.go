package cluster

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/reverbgo/reverbgo/internal/redisx"
)

// Interest routing.
//
// Under RoutingInterest a publish for channel C of app A goes to C's own pub/sub channel
// (KeySpace.Topic), and a node subscribes to that topic only while it has a local subscriber
// of C. The registry tells the broker (Router) when a channel gets its first local subscriber
// and loses its last one, under the channel's lock; the router records the change in its
// topic set (the one record of what this node wants from Redis) and hands it to the topic's
// subscription connection (a redisx.Sub: one per bucket prefix on Redis Cluster, so every
// topic of a connection lives in one slot, one in all otherwise), which batches changes into
// one SUBSCRIBE/UNSUBSCRIBE round trip, never on a poller and never while a socket waits.
//
// Confirmation: after each batch the Sub sends PING "g<generation>" on the same connection.
// Redis answers a connection's commands in order, so the pong of a generation proves every
// SUBSCRIBE sent before it is in effect; WhenRouted callbacks (the pusher's
// subscription_succeeded) run then. A publish that enters Redis after the client saw
// subscription_succeeded is therefore delivered to this node, whichever node published it.
// When a Sub re-makes its connection (a reconnect, a failover, a slot that moved, a probe
// that did not come back) every topic of it is unconfirmed again until the fresh
// connection's pong, and the broker announces the gap (RedisBrokerOptions.OnGap).

// routeWait bounds how long WhenRouted waits for a confirmation. Past it the callback runs
// anyway: Redis is unreachable or stalled, the node serves its own sockets meanwhile (as it
// does for publishes during an outage) and the subscription is made when Redis is back.
// Once a wait on a connection has timed out that connection counts as stalled, and until its
// next confirmation (or while it cannot be made at all) subscribes to its topics are answered
// at once instead of each waiting routeWait. Other connections are not affected.
const routeWait = 2 * time.Second

// topic is one routed pub/sub channel the node wants (router.mu).
type topic struct {
	name    string
	conn    *routeConn
	gen     uint64 // the Sub generation whose confirmation proves the subscription
	ready   bool
	waiters []func(bool)
}

// routeConn is one subscription connection of the router.
type routeConn struct {
	key string
	sub *redisx.Sub
	// pending are the topics waiting for a confirmation, in generation order (router.mu).
	pending []*topic
	// stalled is set when a wait on this connection timed out and cleared by its next
	// confirmation (router.mu).
	stalled bool
	// confirmed is the last confirmed generation (router.mu).
	confirmed uint64
	// seen drops retried batches' duplicates; the Sub calls OnMessage from one goroutine
	// at a time, so it needs no lock.
	seen *seqFilter
}

// router owns the node's routed subscriptions: the set of wanted topics is its topics map.
type router struct {
	b      *RedisBroker
	mu     sync.Mutex
	topics map[string]*topic
	conns  map[string]*routeConn
	closed bool
}

func newRouter(b *RedisBroker) *router {
	return &router{b: b, topics: map[string]*topic{}, conns: map[string]*routeConn{}}
}

func (r *router) connKey(app, ch string) string {
	if r.b.rc.Sharded() {
		return r.b.keys.ChannelPrefix(app, ch)
	}
	return ""
}

// connFor returns the connection of key, starting its Sub on first use (r.mu held; the Sub
// dials on its own goroutine, so this never waits).
func (r *router) connFor(key string) *routeConn {
	c := r.conns[key]
	if c != nil {
		return c
	}
	c = &routeConn{key: key, seen: newSeqFilter()}
	r.conns[key] = c
	if r.closed {
		return c
	}
	// The anchor is this node's own channel in the connection's slot: it picks the
	// bucket's master on Cluster, even with no topic left, and carries the probes.
	anchor := r.b.keys.BucketAnchor(key, r.b.node)
	c.sub = r.b.rc.NewSub(redisx.SubOptions{
		Name:   "broker" + key,
		Anchor: anchor,
		Want:   func() []string { return r.wanted(c) },
		OnMessage: func(_, payload string) {
			r.b.onMessage(c.seen, payload)
		},
		OnConfirm:  func(gen uint64) { r.confirm(c, gen) },
		OnLost:     func(cause string, gen uint64) { r.lost(c, cause, gen) },
		OnRestored: r.b.restored,
		Logger:     r.b.log,
	})
	return c
}

// wanted is the connection's share of the topic set: what a fresh connection subscribes to.
func (r *router) wanted(c *routeConn) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for name, t := range r.topics {
		if t.conn == c {
			out = append(out, name)
		}
	}
	return out
}

// Want implements Router.
func (b *RedisBroker) Want(app, ch string) {
	if st := b.streams.Load(); st != nil {
		st.want(app, ch) // before any of its events can reach this node
	}
	r := b.router
	if r == nil {
		return
	}
	name := b.keys.Topic(app, ch)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.topics[name] != nil {
		return // already wanted (the registry says first/last once each; stay idempotent)
	}
	c := r.connFor(r.connKey(app, ch))
	t := &topic{name: name, conn: c}
	r.topics[name] = t // the set first, then the change: a re-make in between includes it
	if c.sub != nil {
		t.gen = c.sub.Change([]string{name}, nil)
	}
	c.pending = append(c.pending, t)
}

// Unwant implements Router.
func (b *RedisBroker) Unwant(app, ch string) {
	if st := b.streams.Load(); st != nil {
		st.drop(app, ch)
	}
	r := b.router
	if r == nil {
		return
	}
	name := b.keys.Topic(app, ch)
	r.mu.Lock()
	t := r.topics[name]
	if t == nil {
		r.mu.Unlock()
		return
	}
	delete(r.topics, name)
	if t.conn.sub != nil {
		t.conn.sub.Change(nil, []string{name})
	}
	// Nobody here wants the channel any more: whoever still waits for it (a subscriber
	// that left before its answer) gets no answer, only its barrier released.
	drop := t.waiters
	t.waiters = nil
	r.mu.Unlock()
	for _, fn := range drop {
		fn(false)
	}
}

// WhenRouted implements Router.
func (b *RedisBroker) WhenRouted(app, ch string, fn func(bool)) {
	r := b.router
	if r == nil {
		fn(true)
		return
	}
	name := b.keys.Topic(app, ch)
	r.mu.Lock()
	t := r.topics[name]
	if t == nil || t.ready || t.conn.stalled || t.conn.sub == nil || t.conn.sub.Down() {
		r.mu.Unlock()
		fn(true)
		return
	}
	var ran atomic.Bool
	run := func(ok bool) {
		if !ran.Swap(true) {
			fn(ok)
		}
	}
	t.waiters = append(t.waiters, run)
	c := t.conn
	r.mu.Unlock()
	time.AfterFunc(routeWait, func() {
		if ran.Load() {
			return
		}
		b.routeTimeouts.Add(1)
		r.mu.Lock()
		c.stalled = true
		r.mu.Unlock()
		run(true)
	})
}

// RouteInEffect reports whether publishes of the channel made on any node now reach this
// node: its subscription to the channel's topic is confirmed (interest routing), or the
// one cluster subscription is live (broadcast routing).
func (b *RedisBroker) RouteInEffect(app, ch string) bool {
	if b.router == nil {
		return b.home == nil || b.home.Up()
	}
	return b.Routed(app, ch)
}

// Routed reports whether the node's subscription to the channel is confirmed (tests).
func (b *RedisBroker) Routed(app, ch string) bool {
	if b.router == nil {
		return true
	}
	b.router.mu.Lock()
	defer b.router.mu.Unlock()
	t := b.router.topics[b.keys.Topic(app, ch)]
	return t != nil && t.ready
}

// RouteBatches is how many subscription round trips the router's connections have made
// (tests of batching).
func (b *RedisBroker) RouteBatches() int {
	if b.router == nil {
		return 0
	}
	b.router.mu.Lock()
	defer b.router.mu.Unlock()
	n := 0
	for _, c := range b.router.conns {
		if c.sub != nil {
			n += int(c.sub.Batches())
		}
	}
	return n
}

// confirm marks every topic of c whose generation is at most gen as routed and runs their
// waiters.
func (r *router) confirm(c *routeConn, gen uint64) {
	var run []func(bool)
	r.mu.Lock()
	c.stalled = false
	if gen > c.confirmed {
		c.confirmed = gen
	}
	i := 0
	for ; i < len(c.pending) && c.pending[i].gen <= gen; i++ {
		t := c.pending[i]
		if r.topics[t.name] == t && !t.ready && t.gen <= gen {
			t.ready = true
			run = append(run, t.waiters...)
			t.waiters = nil
		}
		c.pending[i] = nil
	}
	c.pending = c.pending[i:]
	r.mu.Unlock()
	for _, fn := range run {
		fn(true)
	}
}

// lost marks every topic of c unconfirmed until generation gen: the Sub is making a fresh
// connection that subscribes them all, and only its pong proves it.
func (r *router) lost(c *routeConn, cause string, gen uint64) {
	r.mu.Lock()
	pending := make([]*topic, 0, len(c.pending))
	for _, t := range r.topics {
		if t.conn == c {
			t.ready, t.gen = false, gen
			pending = append(pending, t)
		}
	}
	c.pending = pending
	r.mu.Unlock()
	if cause != "start" {
		r.b.lost(cause)
	}
}

// closeConns closes every routed connection (Close).
func (r *router) closeConns() {
	r.mu.Lock()
	r.closed = true
	conns := make([]*routeConn, 0, len(r.conns))
	for _, c := range r.conns {
		conns = append(conns, c)
	}
	r.mu.Unlock()
	for _, c := range conns {
		if c.sub != nil {
			c.sub.Close()
		}
	}
}
