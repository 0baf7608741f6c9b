package channels

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// subConn is one subscription connection: broadcast routing's single one, or one of interest
// routing's (one per bucket prefix on Redis Cluster, one in all otherwise). Each has its own
// receive loop and duplicate filter: a node's publishes reach one connection in order.
type subConn struct {
	key     string
	ps      *redis.PubSub
	sharded bool
	down    bool // receive loop only (after construction)
	// pending are the topics sent and not yet confirmed, in generation order; repin asks
	// the router for a new ping (after a redial or a failed send). Both under router.mu.
	pending []*topic
	repin   bool
	dial    sync.Mutex // held while the connection is made
}

// dialAll makes every bucket's connection up front on Redis Cluster, side by side, so the
// first subscribes of a bucket do not wait for a dial (a node holds one subscription
// connection per bucket prefix, KeySpace.Buckets of them, spread over the masters).
func (b *RedisBroker) dialAll() {
	defer close(b.dialled)
	if !b.sharded {
		return
	}
	var wg sync.WaitGroup
	seen := map[string]bool{}
	for i := range b.keys.Buckets() {
		k := b.keys.BucketPrefix(i)
		if seen[k] {
			continue
		}
		seen[k] = true
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = b.subConnFor(k)
		}()
	}
	wg.Wait()
}

// send writes one batch on the connection, then the ping that confirms it.
func (c *subConn) send(ctx context.Context, sub, unsub []string, gen uint64) error {
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	for _, part := range chunks(sub, maxTopicsPerCommand) {
		var err error
		if c.sharded {
			err = c.ps.SSubscribe(ctx, part...)
		} else {
			err = c.ps.Subscribe(ctx, part...)
		}
		if err != nil {
			return err
		}
	}
	for _, part := range chunks(unsub, maxTopicsPerCommand) {
		var err error
		if c.sharded {
			err = c.ps.SUnsubscribe(ctx, part...)
		} else {
			err = c.ps.Unsubscribe(ctx, part...)
		}
		if err != nil {
			return err
		}
	}
	return c.ps.Ping(ctx, pingPayload(gen))
}

// subConnFor returns the router's connection for key, dialling it (and starting its
// receive loop) on first use. Called by the router's flush, one goroutine per key at a time.
// On Redis Cluster the connection first
// subscribes to an anchor shard channel of its bucket, so that go-redis always dials the
// bucket's master, even after a redial with no routed topic left.
func (b *RedisBroker) subConnFor(key string) (*subConn, error) {
	r := b.router
	r.mu.Lock()
	c := r.conns[key]
	if c == nil {
		c = &subConn{key: key}
		r.conns[key] = c
	}
	r.mu.Unlock()
	c.dial.Lock() // the pre-dial (dialAll) and a flush may ask at once
	defer c.dial.Unlock()
	r.mu.Lock()
	ps := c.ps
	r.mu.Unlock()
	if ps != nil {
		return c, nil
	}
	if b.sharded {
		ps = b.rdb.SSubscribe(b.ctx, key+"anchor")
	} else {
		ps = b.rdb.Subscribe(b.ctx)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if b.ctx.Err() != nil {
		_ = ps.Close()
		return nil, ErrBrokerClosed
	}
	c.ps, c.sharded = ps, b.sharded
	b.wg.Add(1)
	go b.receive(c)
	return c, nil
}

// Dialled is closed once the broker's subscription connections are made (at once without
// interest routing on Redis Cluster); a node may wait for it before it takes sockets.
func (b *RedisBroker) Dialled() <-chan struct{} { return b.dialled }

// closeConns closes every routed connection (Close, after the context is cancelled).
func (r *router) closeConns() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.conns {
		if c.ps != nil {
			_ = c.ps.Close()
		}
	}
}

// receive is the only reader of one subscription connection.
func (b *RedisBroker) receive(c *subConn) {
	defer b.wg.Done()
	deliver := *b.deliver.Load()
	backoff := time.Duration(0)
	seen := newSeqFilter()
	for {
		msg, err := c.ps.ReceiveTimeout(b.ctx, receiveTimeout)
		if b.ctx.Err() != nil {
			return
		}
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && !c.down {
				// Quiet channel: a ping proves the connection (its pong is the next message).
				_ = c.ps.Ping(b.ctx)
				continue
			}
			if !c.down {
				c.down = true
				if b.downConns.Add(1) == 1 {
					b.log.Warn("redis subscription lost; serving this node's sockets only", "error", err, "node", b.node)
				}
			}
			backoff = min(max(backoff*2, 100*time.Millisecond), 2*time.Second)
			select {
			case <-b.ctx.Done():
				return
			case <-time.After(backoff):
			}
			continue
		}
		backoff = 0
		if c.down {
			c.down = false
			if b.downConns.Add(-1) == 0 {
				b.log.Info("redis subscription restored", "node", b.node)
			}
			if b.router != nil {
				b.router.reconnected(c.key)
			}
		}
		switch m := msg.(type) {
		case *redis.Pong:
			if g, ok := parsePing(m.Payload); ok && b.router != nil {
				b.router.confirm(c.key, g)
			}
		case *redis.Message:
			b.received.Add(1)
			node, seq, dm, ok := decodeEnvelope([]byte(m.Payload))
			if !ok {
				b.warn("dropping a malformed message on the scaling channel", errors.New("bad envelope"))
				continue
			}
			if node == b.node || !seen.fresh(node, seq) {
				continue // delivered locally by Publish, or a retried batch's duplicate
			}
			deliver(dm)
		}
	}
}

// pendingCache counts, per cache channel, this node's publishes still queued for Redis:
// while one is, the node's own copy of the channel's last event is newer than Redis's.
type pendingCache struct {
	mu sync.Mutex
	n  map[key]int
}

func (p *pendingCache) init() { p.n = map[key]int{} }

func (p *pendingCache) add(app, ch string, d int) {
	p.mu.Lock()
	k := key{app, ch}
	if p.n[k] += d; p.n[k] <= 0 {
		delete(p.n, k)
	}
	p.mu.Unlock()
}

func (p *pendingCache) has(app, ch string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n[key{app, ch}] > 0
}

// CachePending reports whether a cacheable publish of this node to the channel is still
// queued for Redis (its SET has not reached Redis yet).
func (b *RedisBroker) CachePending(app, ch string) bool { return b.pending.has(app, ch) }

// seqFilter remembers the highest sequence number seen per node; entries of nodes silent
// for seqForget are forgotten so restarted nodes (new ids) do not accumulate.
type seqFilter struct {
	last  map[string]seqSeen
	sweep time.Time
}

type seqSeen struct {
	seq  uint64
	seen time.Time
}

const seqForget = 10 * time.Minute

func newSeqFilter() *seqFilter { return &seqFilter{last: map[string]seqSeen{}, sweep: time.Now()} }

func (f *seqFilter) fresh(node string, seq uint64) bool {
	now := time.Now()
	if now.Sub(f.sweep) > time.Minute {
		for n, s := range f.last {
			if now.Sub(s.seen) > seqForget {
				delete(f.last, n)
			}
		}
		f.sweep = now
	}
	prev, ok := f.last[node]
	if ok && seq <= prev.seq {
		return false
	}
	f.last[node] = seqSeen{seq, now}
	return true
}
