// Package redisx is the node's one Redis layer: it owns the client and its topology
// (standalone, Sentinel or Cluster, decided once when the client is built) and the pub/sub
// loop (Sub) that every subscriber of the node uses: the broker in both routings and the
// bridge's feeds. What a node is subscribed to is kept by each Sub's owner, never here: after
// anything that may have changed what Redis delivers (a reconnect, a server-sent
// unsubscribe, a Sentinel switch, a probe that did not come back, an error half way through
// a batch) a Sub opens a fresh subscription from its owner's set and confirms it.
package redisx

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Topology is the shape of the Redis a node talks to.
type Topology uint8

// Topologies.
const (
	Standalone Topology = iota
	Sentinel
	Cluster
)

// String names the topology for logs.
func (t Topology) String() string {
	switch t {
	case Sentinel:
		return "sentinel"
	case Cluster:
		return "cluster"
	}
	return "standalone"
}

// Causes of a resubscription, the label of reverbgo_cluster_resubscribes_total.
const (
	CauseFailover   = "failover"   // Sentinel named a new master
	CauseResharding = "resharding" // Redis unsubscribed us (Cluster: a slot moved or its master changed)
	CauseReconnect  = "reconnect"  // the subscription connection failed
	CauseStall      = "stall"      // a subscribe batch failed or timed out half way
	CauseProbe      = "probe"      // a probe published through the normal path did not come back
)

// Causes lists every cause (metrics export each, zero included).
var Causes = []string{CauseFailover, CauseResharding, CauseReconnect, CauseStall, CauseProbe}

// Client is a go-redis client with the topology it was built for.
type Client struct {
	redis.UniversalClient
	topo Topology
	log  *slog.Logger

	// Sentinel: the sentinels to watch for +switch-master of master.
	sentinels []string
	master    string
	password  string
	dataOpts  redis.Options // the master's options but its address (password, db)

	// Sentinel: the pub/sub plane (every publish and subscription of the node's pub/sub
	// loop and of the broker) goes to the master the watchers last named, through a plain
	// client, so publishes and subscriptions move the moment the first sentinel names it
	// (every node watches every sentinel) instead of whenever go-redis's own listener (on
	// one sentinel) hears of it: a publish still going to a demoted master is delivered only
	// to whoever is still subscribed there. epoch is the sentinel config epoch of pubAddr
	// (-1 unknown): a sentinel that answers with an older one has not heard of a switch.
	pmu     sync.RWMutex
	pub     *redis.Client
	pubAddr string
	epoch   int64

	// Sentinel: the write hold while a failover of master is in progress (AwaitWritable).
	held     atomic.Bool
	hmu      sync.Mutex
	failing  map[string]string // sentinel address → what told it runs a failover
	holdFrom time.Time
	holdDone chan struct{}
	holdEnd  *time.Timer
	holdMax  time.Duration

	mu       sync.Mutex
	switches []func()
	watching bool
	subs     map[*Sub]struct{}
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup

	resubscribes [5]atomic.Uint64 // by index in Causes
}

// SentinelOptions name the sentinels a Sentinel topology's client follows.
type SentinelOptions struct {
	Addrs      []string
	MasterName string
	Password   string // of the sentinels
	// DataPassword and DB are the master's (what the failover client uses).
	DataPassword string
	DB           int
}

// New wraps rdb. The topology is the client's type (a ClusterClient is Cluster), or
// Sentinel when sentinel is non-nil: the Client then watches every sentinel itself so that
// its Subs move to a new master the moment one names it, and its writers can hold their
// writes while a failover is in progress (AwaitWritable).
func New(rdb redis.UniversalClient, sentinel *SentinelOptions, logger *slog.Logger) *Client {
	if logger == nil {
		logger = slog.Default()
	}
	c := &Client{UniversalClient: rdb, log: logger, subs: map[*Sub]struct{}{}}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	switch {
	case isCluster(rdb):
		c.topo = Cluster
	case sentinel != nil:
		c.topo = Sentinel
		c.sentinels = sentinel.Addrs
		c.master = sentinel.MasterName
		c.password = sentinel.Password
		c.dataOpts = redis.Options{Password: sentinel.DataPassword, DB: sentinel.DB, ContextTimeoutEnabled: true}
		c.mu.Lock()
		c.watching = true
		c.mu.Unlock()
		c.holdMax = FailoverHoldMax
		c.wg.Add(len(c.sentinels))
		for _, addr := range c.sentinels {
			go c.watchSentinel(addr)
		}
	}
	return c
}

// plane is the client of the pub/sub plane: on Sentinel the plain client of the master the
// watcher named (the failover client until it named one), else the client itself.
func (c *Client) plane() redis.UniversalClient {
	if c.topo != Sentinel {
		return c.UniversalClient
	}
	c.pmu.RLock()
	defer c.pmu.RUnlock()
	if c.pub != nil {
		return c.pub
	}
	return c.UniversalClient
}

// Plane is the pub/sub plane's client: what must reach the server the broker's writer
// writes to (a recovery channel's history, read where its appends go) uses it.
func (c *Client) Plane() redis.UniversalClient { return c.plane() }

// Pipeline is the pub/sub plane's pipeline (the broker's publishes and their cache writes).
func (c *Client) Pipeline() redis.Pipeliner { return c.plane().Pipeline() }

// Subscribe and SSubscribe open a subscription on the pub/sub plane.
func (c *Client) Subscribe(ctx context.Context, channels ...string) *redis.PubSub {
	return c.plane().Subscribe(ctx, channels...)
}

func (c *Client) SSubscribe(ctx context.Context, channels ...string) *redis.PubSub {
	return c.plane().SSubscribe(ctx, channels...)
}

// switched tells every Sub that the master changed.
func (c *Client) switched() {
	c.mu.Lock()
	fns := append([]func(){}, c.switches...)
	c.mu.Unlock()
	for _, fn := range fns {
		fn()
	}
}

func isCluster(rdb redis.UniversalClient) bool {
	_, ok := rdb.(*redis.ClusterClient)
	return ok
}

// Topology is what the client talks to.
func (c *Client) Topology() Topology { return c.topo }

// Sharded reports whether pub/sub is sharded (SSUBSCRIBE/SPUBLISH: Redis Cluster).
func (c *Client) Sharded() bool { return c.topo == Cluster }

// ScriptLoad loads a script where the pub/sub plane's pipelines run it (every master on
// Cluster, the watcher's master on Sentinel).
func (c *Client) ScriptLoad(ctx context.Context, script string) *redis.StringCmd {
	return c.plane().ScriptLoad(ctx, script)
}

// PublishTo publishes payload on channel with the topology's command (SPUBLISH on Cluster).
func (c *Client) PublishTo(ctx context.Context, channel string, payload any) error {
	p := c.plane()
	if c.Sharded() {
		return p.SPublish(ctx, channel, payload).Err()
	}
	return p.Publish(ctx, channel, payload).Err()
}

// Resubscribes is how many times a Sub of this client re-made its subscription for cause.
func (c *Client) Resubscribes(cause string) uint64 {
	for i, k := range Causes {
		if k == cause {
			return c.resubscribes[i].Load()
		}
	}
	return 0
}

func (c *Client) countResubscribe(cause string) {
	for i, k := range Causes {
		if k == cause {
			c.resubscribes[i].Add(1)
			return
		}
	}
}

// SubsDown is how many of the client's Subs are not confirmed live (for /up and metrics).
func (c *Client) SubsDown() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for s := range c.subs {
		if !s.Up() {
			n++
		}
	}
	return n
}

// onSwitch registers fn to run (on the watcher's goroutine; it must not block) whenever a
// sentinel names a new master. Only Sentinel topologies have switches.
func (c *Client) onSwitch(fn func()) {
	if c.topo != Sentinel {
		return
	}
	c.mu.Lock()
	c.switches = append(c.switches, fn)
	c.mu.Unlock()
}

// Close stops the sentinel watchers and closes every Sub, then the client.
func (c *Client) Close() error {
	c.CloseSubs()
	c.pmu.Lock()
	if c.pub != nil {
		_ = c.pub.Close()
	}
	c.pmu.Unlock()
	return c.UniversalClient.Close()
}

// CloseSubs stops the sentinel watchers and closes every Sub, leaving the client open.
func (c *Client) CloseSubs() {
	c.cancel()
	c.endHold("closed")
	c.mu.Lock()
	subs := make([]*Sub, 0, len(c.subs))
	for s := range c.subs {
		subs = append(subs, s)
	}
	c.mu.Unlock()
	for _, s := range subs {
		s.Close()
	}
	c.wg.Wait()
}

// IsCluster reports whether rdb talks to a Redis Cluster: the one place that decides it,
// for a Client (its topology) and a bare go-redis client (its type) alike.
func IsCluster(rdb redis.UniversalClient) bool {
	if c, ok := rdb.(*Client); ok {
		return c.Sharded()
	}
	return isCluster(rdb)
}

// Of returns rdb's Redis layer: rdb itself when it is one, else a new Client wrapping it
// (its topology from its type; no Sentinel watcher) that the caller must CloseSubs.
func Of(rdb redis.UniversalClient, logger *slog.Logger) (c *Client, wrapped bool) {
	if c, ok := rdb.(*Client); ok {
		return c, false
	}
	return New(rdb, nil, logger), true
}

// Fixed subscribes to one channel (its anchor) for a feed whose set never changes and waits,
// bounded by ctx, until the subscription is confirmed live. On an error the Sub is closed.
func (c *Client) Fixed(ctx context.Context, name, channel string, onMessage func(payload string)) (*Sub, error) {
	s := c.NewSub(SubOptions{Name: name, Anchor: channel, OnMessage: func(_, p string) { onMessage(p) }})
	for !s.Up() && !s.Down() && ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Millisecond):
		}
	}
	if s.Up() {
		return s, nil
	}
	s.Close()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return nil, errors.New("redis subscription to " + channel + " could not be made")
}
