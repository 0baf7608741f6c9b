package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/reverbgo/reverbgo/bridge"
	"github.com/reverbgo/reverbgo/channels"
	"github.com/reverbgo/reverbgo/config"
	"github.com/reverbgo/reverbgo/internal/cluster"
	"github.com/reverbgo/reverbgo/internal/redisx"
	"github.com/reverbgo/reverbgo/pusher"
	"github.com/reverbgo/reverbgo/webhooks"
)

// cluster is what scaling.enabled adds to a node: one Redis client shared by the broker,
// the presence store and the bridge store. Without it the same binary runs one node on
// the in-memory implementations.
type clusterNode struct {
	rdb      *redisx.Client // the Redis layer: client, topology, the pub/sub loop
	addr     string         // the topology, for logs (no password)
	node     string
	prefix   string            // of this cluster's node-level keys in Redis
	keys     *cluster.KeySpace // every key and pub/sub channel name (scaling.routing decides the layout)
	broker   *cluster.RedisBroker
	nodes    *cluster.RedisNodes // the one node registry: presence, occupancy, sockets, webhooks
	presence *cluster.RedisPresence
	occ      *cluster.RedisOccupancy
	sockets  *bridge.RedisSocketIndex // the bridge's cross-node socket index
	store    *bridge.RedisStore
	cache    *cluster.RedisCache
	history  *cluster.RedisHistory // recovery channels' serials and events; nil when no app enables recovery
	feed     *bridge.RedisFeed     // manifest changes for MCP list_changed, cluster-wide
	// gone and back are set to the pusher server's MemberGone and MemberBack before
	// presence.Start.
	gone func(app, channel, user string)
	back func(app, channel, socketID string, m channels.Member)
	// gap is set before the broker delivers: a subscription connection that may have missed
	// events makes the node reconcile presence (the pusher server's PresenceTrouble) and,
	// once it is confirmed again, replay cache channels' last events (Registry.CacheGap).
	gap atomic.Pointer[func(cause string, restored bool)]
}

// clusterView is the pusher server's cluster-wide read side: counts, channel lists and
// connections from channels' occupancy, socket lookups and page-token hashes
// (pusher.CredentialIndex) from the bridge's socket index.
type clusterView struct {
	*cluster.RedisOccupancy
	*bridge.RedisSocketIndex
}

var (
	_ pusher.ClusterView     = clusterView{}
	_ pusher.CredentialIndex = clusterView{}
)

// startupTimeout bounds the first contact with Redis. A node whose Redis is unreachable at
// start-up refuses to start: silently running alone is the failure scaling exists to avoid.
// Once running, a node survives outages (it serves its own sockets and reconnects).
const startupTimeout = 5 * time.Second

// redisClient builds the node's Redis client for the configured topology (redisx.Open).
// The description is for logs.
func redisClient(sc config.Scaling, logger *slog.Logger) (*redisx.Client, string, error) {
	t := redisx.Servers{URL: sc.RedisURL}
	switch {
	case sc.RedisSentinel.Set():
		s := sc.RedisSentinel
		t.Sentinel = &redisx.SentinelServers{MasterName: s.MasterName, Addrs: s.Addrs, Password: s.Password}
	case sc.RedisCluster.Set():
		t.Cluster = &redisx.ClusterServers{Addrs: sc.RedisCluster.Addrs, Password: sc.RedisCluster.Password}
	}
	c, description, err := redisx.Open(t, logger)
	if err != nil {
		return nil, "", fmt.Errorf("scaling.redis_url: %w", err)
	}
	return c, description, nil
}

// newCluster connects to the configured Redis and builds the cluster seams under one prefix
// derived from scaling.channel, so two clusters may share a Redis with different channels.
func newCluster(cfg *config.Config, logger *slog.Logger) (*clusterNode, error) {
	rdb, addr, err := redisClient(cfg.Scaling, logger)
	if err != nil {
		return nil, err
	}
	c := &clusterNode{rdb: rdb, addr: addr, node: cluster.NewNodeID()}
	ctx, cancel := context.WithTimeout(context.Background(), startupTimeout)
	defer cancel()
	if err := c.rdb.Ping(ctx).Err(); err != nil {
		_ = c.rdb.Close()
		return nil, fmt.Errorf("scaling is enabled but Redis (%s) is unreachable: %w", addr, err)
	}
	channel := cfg.Scaling.Channel
	if channel == "" {
		channel = cluster.DefaultScalingChannel
	}
	routing := cluster.RoutingInterest
	if cfg.Scaling.Routing == config.RoutingBroadcast {
		routing = cluster.RoutingBroadcast
	}
	c.keys = cluster.NewKeySpace(channel, routing == cluster.RoutingInterest)
	c.prefix = c.keys.Prefix()
	c.cache = cluster.NewRedisCacheIn(c.rdb, c.keys)
	for i := range cfg.Apps {
		if cfg.Apps[i].Recovery.Enabled && c.history == nil {
			// The broker's writer gives recovery events their serial as it publishes them.
			c.history = cluster.NewRedisHistory(c.rdb, c.keys)
			if err := cluster.LoadScripts(ctx, c.rdb); err != nil {
				_ = c.rdb.Close()
				return nil, fmt.Errorf("scaling: loading the recovery scripts: %w", err)
			}
		}
	}
	if c.broker, err = cluster.NewRedisBroker(ctx, c.rdb, cluster.RedisBrokerOptions{
		Channel: channel, Routing: routing, Keys: c.keys, NodeID: c.node, Logger: logger, Cache: c.cache,
		Client: c.rdb, OnGap: c.onGap, History: c.history,
	}); err != nil {
		_ = c.broker.Close()
		_ = c.rdb.Close()
		return nil, fmt.Errorf("scaling: subscribing to %q: %w", channel, err)
	}
	c.nodes = cluster.NewRedisNodes(c.rdb, cluster.RedisNodesOptions{
		Keys: c.keys, NodeID: c.node, Logger: logger,
		NodeTimeout: time.Duration(cfg.Scaling.NodeTimeout) * time.Second,
	})
	c.presence = cluster.NewRedisPresence(c.rdb, cluster.RedisPresenceOptions{
		Nodes: c.nodes, Logger: logger,
		OnGone: func(app, ch, user string) {
			if c.gone != nil {
				c.gone(app, ch, user)
			}
		},
		OnBack: func(app, ch, socketID string, m channels.Member) {
			if c.back != nil {
				c.back(app, ch, socketID, m)
			}
		},
	})
	// Toolmark channels' counts are written through: the bridge checks, on any node, that a
	// page is subscribed as soon as its subscription is answered.
	c.occ = cluster.NewRedisOccupancy(c.nodes, bridge.ChannelPrefix, logger)
	// Only toolmark sockets are indexed: the bridge is the only reader of socket lookups.
	c.sockets = bridge.NewRedisSocketIndex(c.rdb, c.nodes, logger)
	if c.store, err = bridge.NewRedisStore(ctx, c.rdb, c.keys.ToolmarkPrefix()); err != nil {
		c.occ.Close()
		_ = c.nodes.Close()
		_ = c.broker.Close()
		_ = c.rdb.Close()
		return nil, fmt.Errorf("scaling: bridge store: %w", err)
	}
	if c.feed, err = bridge.NewRedisFeed(ctx, c.rdb, c.keys.ToolmarkPrefix(), logger); err != nil {
		_ = c.store.Close()
		c.occ.Close()
		_ = c.nodes.Close()
		_ = c.broker.Close()
		_ = c.rdb.Close()
		return nil, fmt.Errorf("scaling: toolmark manifest feed: %w", err)
	}
	return c, nil
}

// start begins delivering cluster messages into reg and heartbeating; the server announces
// members the presence store removed on its own (reaped nodes, retried leaves) and gives
// its connection counts to the occupancy batch (for the cluster-wide /connections).
func (c *clusterNode) start(reg *channels.Registry, srv *pusher.Server) {
	c.gone = srv.MemberGone
	c.back = srv.MemberBack
	gap := func(cause string, restored bool) {
		srv.PresenceTrouble()
		reg.CacheGap(cause, restored)
		if restored {
			c.presence.VerifySoon()
			c.nodes.ResyncSoon()
		}
	}
	c.gap.Store(&gap)
	c.occ.SetConnections(func() map[string]int64 {
		ids := srv.AppIDs() // the apps now: a reload may add some
		out := make(map[string]int64, len(ids))
		for _, app := range ids {
			out[app] = int64(srv.ConnectionCount(app))
		}
		return out
	})
	// Recovery events reach this node's sockets in serial order: a gap is read from the
	// history before later events, or told (internal/cluster/streams.go).
	c.broker.SetRecovery(srv.RecoveryLimits, srv.ToldGap)
	c.broker.Start(reg.DeliverLocal)
	// Redis trouble seen by the heartbeat (a rejoin, a gap) makes the server reconcile what
	// its presence subscribers were told (pusher/presence_reconcile.go).
	c.nodes.Track(cluster.NodeState{Name: "presence reconcile", Tick: func(_ context.Context, rejoined bool) error { srv.PresenceHeartbeat(rejoined); return nil }})
	c.nodes.Start()
	// On Redis Cluster the node's subscription connections (one per bucket) are made before
	// it takes sockets, so first subscribes do not wait for dials.
	select {
	case <-c.broker.Dialled():
	case <-time.After(startupTimeout):
	}
}

// onGap hears the broker's subscription connections lose and regain what Redis delivers: a
// member event published meanwhile never reached this node, so presence reconciles (the
// reconcile waits two quiet intervals after the last trouble by itself), and a cache
// channel's last event may be missing, so it is replayed once the connection is back.
//
// Once restored, the node's presence store also compares its memberships with Redis entry by
// entry at the next heartbeat: whatever changed what Redis delivers (a failover, a moved
// slot, a reconnect) may have come with writes the promoted replica never received, a lost
// leave and a lost join together leaving the counts equal (RedisPresence.VerifySoon). The
// node registry rewrites its other per-node state from memory at that heartbeat for the same
// reason (RedisNodes.ResyncSoon: the bridge's socket index, whose lost entry would answer a
// page's POSTs 401, and the written-through counts).
func (c *clusterNode) onGap(cause string, restored bool) {
	if f := c.gap.Load(); f != nil {
		(*f)(cause, restored)
	}
}

// webhookStore is the webhooks' cluster store, registered with the node registry (which
// reaps its dead nodes, with the same node_timeout as presence and occupancy); call it
// before start.
func (c *clusterNode) webhookStore() *webhooks.RedisStore {
	return webhooks.NewRedisStore(c.rdb, c.prefix, c.nodes)
}

// health is /up's dependency check: the subscription must be live and Redis must answer.
func (c *clusterNode) health(ctx context.Context) map[string]string {
	if !c.broker.Healthy() || c.rdb.SubsDown() > 0 || c.rdb.Ping(ctx).Err() != nil {
		return map[string]string{"redis": "unreachable"}
	}
	return nil
}

// close runs after the pusher server and the bridge have shut down: occupancy's last batch,
// presence's leftovers (reaped and announced through the still-open broker and webhooks),
// then beforeRedis (the webhooks hand what they hold to Redis), then the node registry
// (this node reaps all its state and leaves the cluster: a join landing later is refused),
// then the subscriptions, then the client.
func (c *clusterNode) close(logger *slog.Logger, beforeRedis func()) {
	c.occ.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	if err := c.presence.Drain(ctx); err != nil {
		logger.Warn("presence cleanup on shutdown failed; survivors will reap this node", "error", err, "node", c.node)
	}
	cancel()
	beforeRedis()
	if err := c.nodes.Close(); err != nil {
		logger.Warn("node cleanup on shutdown failed; survivors will reap this node", "error", err, "node", c.node)
	}
	_ = c.feed.Close()
	_ = c.store.Close()
	_ = c.broker.Close()
	_ = c.rdb.Close()
}
