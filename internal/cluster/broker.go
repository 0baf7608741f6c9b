package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/reverbgo/reverbgo/channels"
	"github.com/reverbgo/reverbgo/internal/redisx"
)

// DefaultScalingChannel is the Redis pub/sub channel of the cluster (Reverb's default).
const DefaultScalingChannel = "reverb"

// Publish pipeline bounds. A publish is queued for Redis and delivered locally at once; the
// writer sends queued envelopes in pipelined batches and, while Redis is unreachable, keeps
// them (in order) up to DefaultMaxBacklog bytes and DefaultMaxAge.
const (
	DefaultMaxBacklog = 32 << 20
	DefaultMaxAge     = 30 * time.Second
	publishBatch      = 256
	queueSlots        = 1 << 16
	writeTimeout      = 2 * time.Second
	closeDrain        = 3 * time.Second
)

// ErrBacklog is returned by Publish when the Redis backlog is full (Redis has been
// unreachable for a while): nothing was delivered anywhere, so the caller may retry.
var ErrBacklog = errors.New("redis is unreachable and the publish backlog is full; nothing was delivered")

// ErrBrokerClosed is returned by Publish after Close.
var ErrBrokerClosed = errors.New("broker closed")

// Routing says which nodes a publish travels to (scaling.routing).
type Routing uint8

// Routings.
const (
	// RoutingInterest sends a channel's publishes only to the nodes with a local subscriber
	// of it, over one pub/sub channel per channel (see interest.go).
	RoutingInterest Routing = iota
	// RoutingBroadcast sends every publish over one pub/sub channel every node subscribes
	// to: what earlier versions did, for rolling upgrades.
	RoutingBroadcast
)

// String is the routing's name in config ("interest", "broadcast").
func (r Routing) String() string {
	if r == RoutingBroadcast {
		return "broadcast"
	}
	return "interest"
}

// RedisBrokerOptions configure a RedisBroker.
type RedisBrokerOptions struct {
	// Channel is the pub/sub channel shared by every node under broadcast routing and the
	// namespace of the routed ones (default DefaultScalingChannel).
	Channel string
	// Routing picks interest (the zero value) or broadcast routing.
	Routing Routing
	// Keys names the routed pub/sub channels (default NewKeySpace(Channel, interest)).
	Keys *KeySpace
	// NodeID identifies this process in envelopes (default NewNodeID()). Every node of a
	// cluster needs a distinct one; a restarted process should take a new one.
	NodeID string
	// Logger receives outage and recovery lines; nil = slog.Default().
	Logger *slog.Logger
	// Cache, when set, stores cache channels' last events in Redis, written by the publishing
	// node in the same pipeline as (and before) the PUBLISH.
	Cache *RedisCache
	// MaxBacklog bounds the bytes queued for Redis (default DefaultMaxBacklog).
	MaxBacklog int64
	// MaxAge drops queued envelopes older than this during an outage (default DefaultMaxAge).
	MaxAge time.Duration
	// Client is the node's Redis layer (topology, Sentinel switches, the pub/sub loop); nil
	// wraps the rdb given to NewRedisBroker, its topology taken from the client's type.
	Client *redisx.Client
	// OnGap, when set, hears when a subscription connection may have missed messages
	// (restored false: lost, with its cause) and when it is confirmed again (restored true):
	// presence reconcile and cache replays run on it. It must not block.
	OnGap func(cause string, restored bool)
	// History, when set, gives recovery messages (Message.Recovery) their serial: the
	// writer runs its append script in place of the PUBLISH (one round trip, as before),
	// and the serialled frame reaches this node's subscribers through its own subscription.
	History *RedisHistory
}

// RedisBroker is the cluster Broker. A publish is delivered to this node's subscribers at
// once and queued for Redis; one writer goroutine PUBLISHes the queue in pipelined batches
// (SPUBLISH on Redis Cluster, so a publish reaches only the shard that owns the channel).
// Under broadcast routing every node holds ONE subscription to the cluster channel; under
// interest routing (the default) a publish goes to its channel's own topic and a node
// subscribes to the topics of its local channels only (Router, interest.go). Either way
// other nodes' envelopes go to DeliverLocal, which only queues frames, so neither side
// waits on a socket nor a caller on Redis.
//
// During a Redis outage the writer keeps the batch and retries, in order; every envelope
// carries the node's sequence number and receivers drop numbers they have seen, so a retry
// of a batch that did reach Redis duplicates nothing. When the backlog is full, Publish
// refuses with ErrBacklog BEFORE delivering locally: a caller never sees an error for an
// event its local subscribers already got. Envelopes older than MaxAge are dropped (logged).
type RedisBroker struct {
	rc      *redisx.Client
	ownRC   bool // rc wraps the caller's client: Close closes its Subs, not the client
	channel string
	node    string
	log     *slog.Logger
	cache   *RedisCache
	hist    *RedisHistory
	streams atomic.Pointer[streams] // recovery channels' positions on this node (nil without recovery)
	limits  func(app, ch string) (channels.HistoryLimits, bool)
	told    Told
	keys    *KeySpace
	routing Routing
	home    *redisx.Sub // broadcast routing's single subscription
	router  *router     // interest routing's subscriptions
	wg      sync.WaitGroup
	dialled chan struct{}
	onGap   func(cause string, restored bool)

	received      atomic.Uint64 // messages read from Redis
	routeTimeouts atomic.Int64  // WhenRouted callbacks run by routeWait, not by a confirmation
	resubscribes  atomic.Uint64 // subscription connections re-made
	pending       pendingCache  // cache channels with a publish still queued for Redis

	maxBacklog int64
	maxAge     time.Duration
	backlog    atomic.Int64
	slots      atomic.Int64 // queue entries reserved and not yet taken by the writer
	qmu        sync.RWMutex // guards closing the queue against Publish sending on it
	closed     bool
	queue      chan outbound
	wdone      chan struct{}
	drain      context.Context // cancelled when Close stops waiting for the backlog
	stopDrain  context.CancelFunc
	seq        uint64 // writer goroutine only
	// appended: the last position of each recovery channel this node appended to (known).
	appended      map[key]appendedPos // writer goroutine only
	appendedSweep time.Time
	dropped       atomic.Int64

	deliver  atomic.Pointer[func(channels.Message) int]
	pubDown  atomic.Bool // the last publish batch failed
	lastWarn atomic.Int64
	ctx      context.Context
	cancel   context.CancelFunc
	start    sync.Once
	started  bool // set inside start; read after start.Do
}

type outbound struct {
	m   channels.Message
	at  time.Time
	seq uint64  // the node's sequence number, assigned by the writer on first send
	env []byte  // encoded then (a recovery message's: its prefix, the script adds the frame)
	ack *pubAck // PublishAcked's request, nil for the others
}

var _ channels.Broker = (*RedisBroker)(nil)

// NewNodeID returns a random node id (16 hex digits).
func NewNodeID() string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("channels: crypto/rand failed: " + err.Error())
	}
	return hex.EncodeToString(b[:])
}

// IsCluster reports whether rdb talks to a Redis Cluster (sharded pub/sub, one slot per script).
func IsCluster(rdb redis.UniversalClient) bool { return redisx.IsCluster(rdb) }

// NewRedisBroker subscribes to the cluster channel. When Redis is unreachable it still
// returns a broker (the node serves its own sockets and the receive loop keeps redialling)
// together with the error, so the caller may decide to refuse to start instead. Call Start
// with the registry's DeliverLocal to begin delivering; the client stays the caller's.
func NewRedisBroker(ctx context.Context, rdb redis.UniversalClient, opts RedisBrokerOptions) (*RedisBroker, error) {
	if opts.Channel == "" {
		opts.Channel = DefaultScalingChannel
	}
	if opts.NodeID == "" {
		opts.NodeID = NewNodeID()
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.MaxBacklog <= 0 {
		opts.MaxBacklog = DefaultMaxBacklog
	}
	if opts.MaxAge <= 0 {
		opts.MaxAge = DefaultMaxAge
	}
	if opts.Keys == nil {
		opts.Keys = NewKeySpace(opts.Channel, opts.Routing == RoutingInterest)
	}
	rc, own := opts.Client, false
	if rc == nil {
		rc, own = redisx.New(rdb, nil, opts.Logger), true
	}
	b := &RedisBroker{
		rc: rc, ownRC: own, channel: opts.Channel, node: opts.NodeID, log: opts.Logger, cache: opts.Cache, hist: opts.History,
		keys: opts.Keys, routing: opts.Routing, onGap: opts.OnGap,
		maxBacklog: opts.MaxBacklog, maxAge: opts.MaxAge, queue: make(chan outbound, queueSlots),
		wdone: make(chan struct{}), dialled: make(chan struct{}),
	}
	b.pending.init()
	b.ctx, b.cancel = context.WithCancel(context.Background())
	b.drain, b.stopDrain = context.WithCancel(context.Background())
	go b.write()
	if b.routing == RoutingInterest {
		b.router = newRouter(b)
		return b, rdb.Ping(ctx).Err()
	}
	close(b.dialled)
	// Broadcast routing: one subscription to the cluster channel, which is its own anchor
	// (every node's probes travel on it; the others skip them).
	seen := newSeqFilter()
	b.home = rc.NewSub(redisx.SubOptions{
		Name: "broker", Anchor: b.channel, ProbeID: b.node, Logger: b.log,
		OnMessage:  func(_, payload string) { b.onMessage(seen, payload) },
		OnLost:     func(cause string, _ uint64) { b.homeLost(cause) },
		OnRestored: b.restored,
	})
	for !b.home.Up() && !b.home.Down() && ctx.Err() == nil { // wait for the subscription to be live
		time.Sleep(5 * time.Millisecond)
	}
	if !b.home.Up() {
		if ctx.Err() != nil {
			return b, ctx.Err()
		}
		return b, errors.New("redis subscription to " + b.channel + " could not be made")
	}
	return b, nil
}

func (b *RedisBroker) homeLost(cause string) {
	if cause != "start" {
		b.lost(cause)
	}
}

// Routing is the broker's routing.
func (b *RedisBroker) Routing() Routing { return b.routing }

// Received is how many messages this node has read from Redis (its own included): the
// reverbgo_cluster_messages_received_total counter.
func (b *RedisBroker) Received() uint64 { return b.received.Load() }

// RouteTimeouts is how many subscribes were answered after routeWait without a confirmed
// Redis subscription (Redis unreachable or stalled).
func (b *RedisBroker) RouteTimeouts() int64 { return b.routeTimeouts.Load() }

// NodeID returns the id this broker stamps on its envelopes.
func (b *RedisBroker) NodeID() string { return b.node }

// SetRecovery turns on, with a History, the in-order delivery of recovery events
// (broker_streams.go): limits names a channel's history bounds when its app enables
// recovery, told tells a channel's local subscribers of a gap the history could not fill or
// of a new epoch (pusher:resume_failed). Call it before Start.
func (b *RedisBroker) SetRecovery(limits func(app, ch string) (channels.HistoryLimits, bool), told Told) {
	b.limits, b.told = limits, told
}

// Start begins handing other nodes' messages to deliver (normally Registry.DeliverLocal)
// and uses it for local delivery of this node's publishes. Only the first call counts.
func (b *RedisBroker) Start(deliver func(channels.Message) int) {
	b.start.Do(func() {
		if b.hist != nil && b.limits != nil && b.told != nil {
			b.streams.Store(newStreams(b.hist, b.limits, b.told, b.log, deliver))
		}
		b.deliver.Store(&deliver)
		b.started = true
		if b.router != nil {
			b.wg.Add(1)
			go func() {
				defer b.wg.Done()
				b.dialAll()
			}()
		}
	})
}

// Healthy reports whether every subscription connection is confirmed live (its probes come
// back) and no publish is stuck waiting for Redis (the last batch failed and something is
// still queued).
func (b *RedisBroker) Healthy() bool {
	return b.subsUp() && !(b.pubDown.Load() && b.backlog.Load() > 0)
}

// subsUp reports whether every subscription connection of the broker is confirmed live.
func (b *RedisBroker) subsUp() bool {
	if b.home != nil {
		return b.home.Up()
	}
	if b.router == nil {
		return true
	}
	b.router.mu.Lock()
	defer b.router.mu.Unlock()
	for _, c := range b.router.conns {
		if c.sub != nil && !c.sub.Up() {
			return false
		}
	}
	return true
}

// Resubscribes is how many times a subscription connection of this broker was re-made
// (a failover, a moved slot, a reconnect, a stall, a lost probe).
func (b *RedisBroker) Resubscribes() uint64 { return b.resubscribes.Load() }

// Client is the broker's Redis layer.
func (b *RedisBroker) Client() *redisx.Client { return b.rc }

// Dropped is how many envelopes were dropped after waiting MaxAge for Redis.
func (b *RedisBroker) Dropped() int64 { return b.dropped.Load() }

// Publish queues m for the other nodes, then delivers it on this node. It never waits on
// Redis: when the backlog is full it returns ErrBacklog and delivers nothing.
func (b *RedisBroker) Publish(_ context.Context, m channels.Message) error {
	return b.PublishAll(context.Background(), []channels.Message{m})
}

// PublishAll publishes ms all or nothing: either every message is queued and delivered on
// this node, or (backlog full, broker closed) none is, so a request naming several channels
// never half-succeeds.
func (b *RedisBroker) PublishAll(_ context.Context, ms []channels.Message) error {
	if err := b.enqueue(ms, nil); err != nil {
		return err
	}
	if d := b.deliver.Load(); d != nil {
		for _, m := range ms {
			if m.Recovery != nil && b.hist != nil {
				continue // its frame gets the serial in Redis: delivered from the subscription
			}
			(*d)(m)
		}
	}
	return nil
}

// enqueue reserves room for ms and queues them for the writer, all or none.
func (b *RedisBroker) enqueue(ms []channels.Message, ack *pubAck) error {
	var size int64
	for _, m := range ms {
		size += cost(m)
	}
	n := int64(len(ms))
	b.qmu.RLock()
	defer b.qmu.RUnlock()
	if b.closed {
		return ErrBrokerClosed
	}
	if b.backlog.Add(size) > b.maxBacklog || b.slots.Add(n) > queueSlots {
		b.backlog.Add(-size)
		b.slots.Add(-n)
		b.warn("publish refused: redis backlog full", ErrBacklog)
		return ErrBacklog
	}
	now := time.Now()
	for _, m := range ms {
		if b.cache != nil && m.Cacheable && channels.KindOf(m.Channel).IsCache() {
			b.pending.add(m.AppID, m.Channel, 1)
		}
		b.queue <- outbound{m: m, at: now, ack: ack} // never blocks: the slots are reserved
	}
	return nil
}

// Close stops taking publishes, gives the writer up to closeDrain to send the backlog, then
// stops the receive loop and releases the subscription.
func (b *RedisBroker) Close() error {
	b.qmu.Lock()
	if !b.closed {
		b.closed = true
		close(b.queue)
	}
	b.qmu.Unlock()
	select {
	case <-b.wdone:
	case <-time.After(closeDrain):
		b.stopDrain()
		<-b.wdone
	}
	b.stopDrain()
	b.cancel()
	var err error
	if b.home != nil {
		b.home.Close()
	}
	if b.router != nil {
		b.router.closeConns()
	}
	if b.ownRC {
		b.rc.CloseSubs()
	}
	b.start.Do(func() {}) // no Start after Close; a broker never started has no loop to wait for
	if b.started {
		b.wg.Wait()
	}
	return err
}

func (b *RedisBroker) warn(msg string, err error) {
	now := time.Now().UnixNano()
	last := b.lastWarn.Load()
	if now-last < int64(time.Second) || !b.lastWarn.CompareAndSwap(last, now) {
		return
	}
	b.log.Warn(msg, "error", err, "node", b.node)
}
