package cluster

import (
	"errors"
	"sync"
	"time"

	"github.com/reverbgo/reverbgo/channels"
	"github.com/reverbgo/reverbgo/internal/redisx"
)

// dialAll makes every bucket's connection up front on Redis Cluster, so the first subscribes
// of a bucket do not wait for a dial (a node holds one subscription connection per bucket
// prefix, KeySpace.Buckets of them, spread over the masters), and waits (bounded) until
// each is confirmed.
func (b *RedisBroker) dialAll() {
	defer close(b.dialled)
	r := b.router
	r.mu.Lock()
	keys := []string{""}
	if b.rc.Sharded() {
		keys = keys[:0]
		seen := map[string]bool{}
		for i := range b.keys.Buckets() {
			if k := b.keys.BucketPrefix(i); !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
	}
	var subs []*redisx.Sub
	for _, k := range keys {
		if c := r.connFor(k); c.sub != nil {
			subs = append(subs, c.sub)
		}
	}
	r.mu.Unlock()
	deadline := time.Now().Add(startupWait)
	for _, s := range subs {
		for !s.Up() && !s.Down() && time.Now().Before(deadline) && b.ctx.Err() == nil {
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// startupWait bounds how long Dialled waits for the subscription connections.
const startupWait = 5 * time.Second

// Dialled is closed once the broker's subscription connections are made (or could not be
// made within a bound); a node may wait for it before it takes sockets.
func (b *RedisBroker) Dialled() <-chan struct{} { return b.dialled }

// onMessage takes one message of a subscription connection (one goroutine per connection
// at a time, in Redis's order): other nodes' envelopes go to the registry.
func (b *RedisBroker) onMessage(seen *seqFilter, payload string) {
	if redisx.IsProbe(payload) {
		return // another node's probe on broadcast routing's shared channel
	}
	b.received.Add(1)
	e, ok := decodeEnvelope([]byte(payload))
	if !ok {
		b.warn("dropping a malformed message on the scaling channel", errors.New("bad envelope"))
		return
	}
	// This node's own publishes were delivered by Publish, except those it delivers in
	// Redis's order (echo): recovery events, whose frame (with its serial) only Redis made,
	// and HTTP API publishes that waited for Redis.
	if (e.node == b.node && !e.echo) || !seen.fresh(e.node, e.seq) {
		return // delivered locally, or a retried batch's duplicate
	}
	if st := b.streams.Load(); st != nil && e.m.Recovery != nil {
		st.receive(e.m, e.epoch) // broker_streams.go: in serial order, gaps filled or told
		return
	}
	if d := b.deliver.Load(); d != nil {
		(*d)(e.m)
	}
}

// lost and restored announce a gap: a subscription connection may have missed messages
// between the two (pub/sub has no replay), so the owner of what was announced over it
// (presence reconcile, cache replays) corrects it afterwards.
func (b *RedisBroker) lost(cause string) {
	b.resubscribes.Add(1)
	if f := b.onGap; f != nil {
		f(cause, false)
	}
}

func (b *RedisBroker) restored(cause string, _ time.Duration) {
	if st := b.streams.Load(); st != nil {
		st.check() // what the connection missed is in the histories
	}
	if f := b.onGap; f != nil {
		f(cause, true)
	}
}

// SeedPosition records a recovery channel's position as answered to its first subscriber
// on this node: the events after it are then delivered in serial order (broker_streams.go).
func (b *RedisBroker) SeedPosition(app, ch string, pos channels.Position) {
	if st := b.streams.Load(); st != nil {
		st.Seed(app, ch, pos)
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
