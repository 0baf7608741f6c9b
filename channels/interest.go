package channels

import (
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Interest routing.
//
// Under RoutingInterest a publish for channel C of app A goes to C's own pub/sub channel
// (KeySpace.Topic), and a node subscribes to that topic only while it has a local subscriber
// of C. The registry tells the broker (Router) when a channel gets its first local subscriber
// and loses its last one, under the channel's lock; the broker's router goroutine turns the
// changes into batched SUBSCRIBE / UNSUBSCRIBE commands (SSUBSCRIBE on Redis Cluster, one
// connection per bucket prefix so every topic of a connection lives in one slot), never on
// a poller and never while a socket waits.
//
// Confirmation: after each batch the router sends PING "g<generation>" on the same
// connection. Redis answers a connection's commands in order, so the pong of a generation
// proves every SUBSCRIBE sent before it is in effect; WhenRouted callbacks (the pusher's
// subscription_succeeded) run then. A publish that enters Redis after the client saw
// subscription_succeeded is therefore delivered to this node, whichever node published it.

// routeWait bounds how long WhenRouted waits for a confirmation. Past it the callback runs
// anyway: Redis is unreachable or stalled, the node serves its own sockets meanwhile (as it
// does for publishes during an outage) and the subscription is made when Redis is back.
// Once a wait has timed out the router counts as stalled, and until the next pong (or while
// a subscription connection is down) subscribes are answered at once instead of each
// waiting routeWait: a stalled Redis must not stall every new subscription.
const routeWait = 2 * time.Second

// maxTopicsPerCommand bounds one SUBSCRIBE's argument list.
const maxTopicsPerCommand = 1000

// Router is implemented by a Broker that carries a channel's publishes only to the nodes
// with a local subscriber of it (RedisBroker under RoutingInterest). The Registry calls Want
// when a channel gets its first local subscriber and Unwant when it loses its last, under
// the channel's lock: neither may block. WhenRouted runs fn once the node's subscription to
// the channel is in effect (at once when it is, or when the broker does not route); fn runs
// on a broker goroutine or the caller's and must not block.
type Router interface {
	Want(app, channel string)
	Unwant(app, channel string)
	WhenRouted(app, channel string, fn func())
}

// topic is one routed pub/sub channel's state (router.mu).
type topic struct {
	name    string
	conn    string // the subscription connection's key
	refs    int    // Want minus Unwant
	sent    bool   // a SUBSCRIBE was sent after the last UNSUBSCRIBE
	gen     uint64 // the ping generation that follows that SUBSCRIBE
	ready   bool   // that ping was answered
	waiters []func()
}

// router owns the node's routed subscriptions.
type router struct {
	b      *RedisBroker
	mu     sync.Mutex
	topics map[string]*topic
	dirty  map[*topic]struct{}
	conns  map[string]*subConn
	gen    uint64
	kick   chan struct{}
	// stalled is set when a wait timed out and cleared by the next pong.
	stalled atomic.Bool
	// batches counts the batches sent (for tests of batching).
	batches int
}

func newRouter(b *RedisBroker) *router {
	return &router{b: b, topics: map[string]*topic{}, dirty: map[*topic]struct{}{}, conns: map[string]*subConn{}, kick: make(chan struct{}, 1)}
}

func (r *router) signal() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

func (r *router) connKey(app, ch string) string {
	if r.b.sharded {
		return r.b.keys.ChannelPrefix(app, ch)
	}
	return ""
}

// Want implements Router.
func (b *RedisBroker) Want(app, ch string) {
	r := b.router
	if r == nil {
		return
	}
	name := b.keys.Topic(app, ch)
	r.mu.Lock()
	t := r.topics[name]
	if t == nil {
		t = &topic{name: name, conn: r.connKey(app, ch)}
		r.topics[name] = t
	}
	t.refs++
	r.dirty[t] = struct{}{}
	r.mu.Unlock()
	r.signal()
}

// Unwant implements Router.
func (b *RedisBroker) Unwant(app, ch string) {
	r := b.router
	if r == nil {
		return
	}
	name := b.keys.Topic(app, ch)
	r.mu.Lock()
	if t := r.topics[name]; t != nil {
		t.refs--
		r.dirty[t] = struct{}{}
	}
	r.mu.Unlock()
	r.signal()
}

// WhenRouted implements Router.
func (b *RedisBroker) WhenRouted(app, ch string, fn func()) {
	r := b.router
	if r == nil {
		fn()
		return
	}
	name := b.keys.Topic(app, ch)
	r.mu.Lock()
	t := r.topics[name]
	if t == nil || t.ready || t.refs <= 0 || r.stalled.Load() || b.downConns.Load() > 0 {
		r.mu.Unlock()
		fn()
		return
	}
	var ran atomic.Bool
	run := func() {
		if !ran.Swap(true) {
			fn()
		}
	}
	t.waiters = append(t.waiters, run)
	r.mu.Unlock()
	time.AfterFunc(routeWait, func() {
		if !ran.Load() {
			b.routeTimeouts.Add(1)
			r.stalled.Store(true)
			run()
		}
	})
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

// RouteBatches is how many subscription batches the router has sent (tests).
func (b *RedisBroker) RouteBatches() int {
	if b.router == nil {
		return 0
	}
	b.router.mu.Lock()
	defer b.router.mu.Unlock()
	return b.router.batches
}

// connBatch is one connection's share of a batch.
type connBatch struct {
	sub, unsub []string
	ping       bool
}

// run is the router goroutine: every wake-up sends what changed since the last one, so
// changes that arrive while a batch is on the wire travel together in the next.
func (r *router) run() {
	backoff := time.Duration(0)
	for {
		select {
		case <-r.b.ctx.Done():
			return
		case <-r.kick:
		}
		if r.flush() {
			backoff = 0
			continue
		}
		backoff = min(max(backoff*2, 50*time.Millisecond), time.Second)
		time.AfterFunc(backoff, r.signal)
	}
}

// flush sends one batch; false means a connection failed and the batch must be retried.
func (r *router) flush() bool {
	r.mu.Lock()
	work := map[string]*connBatch{}
	get := func(k string) *connBatch {
		w := work[k]
		if w == nil {
			w = &connBatch{}
			work[k] = w
		}
		return w
	}
	r.gen++
	gen := r.gen
	var sent []*topic
	var release []func()
	defer func() {
		for _, fn := range release {
			fn()
		}
	}()
	for t := range r.dirty {
		delete(r.dirty, t)
		want := t.refs > 0
		switch {
		case want && !t.sent:
			t.sent, t.ready, t.gen = true, false, gen
			get(t.conn).sub = append(get(t.conn).sub, t.name)
			sent = append(sent, t)
		case !want && t.sent:
			t.sent, t.ready = false, false
			get(t.conn).unsub = append(get(t.conn).unsub, t.name)
		}
		if !want {
			// Nobody here wants the channel any more: whoever still waits for it (a
			// subscriber that left before its answer) is answered now, not by the timeout.
			release = append(release, t.waiters...)
			t.waiters = nil
			if r.topics[t.name] == t {
				delete(r.topics, t.name)
			}
		}
	}
	for k, c := range r.conns {
		if c.repin {
			get(k).ping = true
		}
	}
	if len(work) == 0 {
		r.mu.Unlock()
		return true
	}
	r.batches++
	for _, t := range sent {
		c := r.conns[t.conn]
		if c == nil {
			c = &subConn{key: t.conn}
			r.conns[t.conn] = c
		}
		c.pending = append(c.pending, t)
	}
	for k := range work {
		if c := r.conns[k]; c != nil {
			c.repin = false
		}
	}
	r.mu.Unlock()

	// Connections are independent (one per bucket on Redis Cluster, dialled on first use):
	// their shares go out side by side.
	var failed atomic.Bool
	var wg sync.WaitGroup
	for k, w := range work {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := r.b.subConnFor(k)
			if err == nil {
				err = c.send(r.b.ctx, w.sub, w.unsub, gen)
			}
			if err != nil {
				failed.Store(true)
				r.mu.Lock()
				if c := r.conns[k]; c != nil {
					c.repin = true
				}
				r.mu.Unlock()
				r.b.warn("redis subscription batch failed; retrying", err)
			}
		}()
	}
	wg.Wait()
	return !failed.Load()
}

// confirm marks every topic of conn sent before ping generation gen as routed and runs
// their waiters.
func (r *router) confirm(conn string, gen uint64) {
	r.stalled.Store(false)
	var run []func()
	r.mu.Lock()
	c := r.conns[conn]
	if c != nil {
		i := 0
		for ; i < len(c.pending) && c.pending[i].gen <= gen; i++ {
			t := c.pending[i]
			if t.sent && t.gen <= gen && !t.ready {
				t.ready = true
				run = append(run, t.waiters...)
				t.waiters = nil
			}
			c.pending[i] = nil
		}
		c.pending = c.pending[i:]
	}
	r.mu.Unlock()
	for _, fn := range run {
		fn()
	}
}

// reconnected asks for a new ping on conn: after a redial go-redis subscribes again to
// everything, and the pong of a ping sent after that proves it.
func (r *router) reconnected(conn string) {
	r.mu.Lock()
	if c := r.conns[conn]; c != nil && len(c.pending) > 0 {
		c.repin = true
	}
	r.mu.Unlock()
	r.signal()
}

// pingPayload and parsePing frame a generation in a PING payload.
func pingPayload(gen uint64) string { return "g" + strconv.FormatUint(gen, 10) }

func parsePing(p string) (uint64, bool) {
	if !strings.HasPrefix(p, "g") {
		return 0, false
	}
	g, err := strconv.ParseUint(p[1:], 10, 64)
	return g, err == nil
}

// chunks splits s into pieces of at most n.
func chunks(s []string, n int) [][]string {
	var out [][]string
	for len(s) > n {
		out = append(out, s[:n])
		s = s[n:]
	}
	if len(s) > 0 {
		out = append(out, s)
	}
	return out
}
