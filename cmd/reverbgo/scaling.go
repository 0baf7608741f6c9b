package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/reverbgo/reverbgo/bridge"
	"github.com/reverbgo/reverbgo/channels"
	"github.com/reverbgo/reverbgo/config"
)

// cluster is what scaling.enabled adds to a node: one Redis client shared by the broker,
// the presence store and the bridge store. Without it the same binary runs one node on
// the in-memory implementations.
type cluster struct {
	rdb      *redis.Client
	addr     string
	node     string
	prefix   string // of every key this cluster keeps in Redis
	broker   *channels.RedisBroker
	presence *channels.RedisPresence
	occ      *channels.RedisOccupancy
	store    *bridge.RedisStore
	feed     *bridge.RedisFeed // manifest changes for MCP list_changed, cluster-wide
	// gone is set to the pusher server's MemberGone before presence.Start.
	gone func(app, channel, user string)
}

// startupTimeout bounds the first contact with Redis. A node whose Redis is unreachable at
// start-up refuses to start: silently running alone is the failure scaling exists to avoid.
// Once running, a node survives outages (it serves its own sockets and reconnects).
const startupTimeout = 5 * time.Second

// newCluster connects to scaling.redis_url and builds the cluster seams under one prefix
// derived from scaling.channel, so two clusters may share a Redis with different channels.
func newCluster(cfg *config.Config, logger *slog.Logger) (*cluster, error) {
	opt, err := redis.ParseURL(cfg.Scaling.RedisURL)
	if err != nil {
		return nil, fmt.Errorf("scaling.redis_url: %w", err)
	}
	c := &cluster{rdb: redis.NewClient(opt), addr: opt.Addr, node: channels.NewNodeID()}
	ctx, cancel := context.WithTimeout(context.Background(), startupTimeout)
	defer cancel()
	if err := c.rdb.Ping(ctx).Err(); err != nil {
		_ = c.rdb.Close()
		return nil, fmt.Errorf("scaling is enabled but Redis at %s is unreachable: %w", opt.Addr, err)
	}
	channel := cfg.Scaling.Channel
	if channel == "" {
		channel = channels.DefaultScalingChannel
	}
	prefix := channels.DefaultRedisPrefix + channel + ":"
	c.prefix = prefix
	if c.broker, err = channels.NewRedisBroker(ctx, c.rdb, channels.RedisBrokerOptions{Channel: channel, NodeID: c.node, Logger: logger}); err != nil {
		_ = c.broker.Close()
		_ = c.rdb.Close()
		return nil, fmt.Errorf("scaling: subscribing to %q: %w", channel, err)
	}
	c.presence = channels.NewRedisPresence(c.rdb, channels.RedisPresenceOptions{
		Prefix: prefix, NodeID: c.node, Logger: logger,
		OnGone: func(app, ch, user string) {
			if c.gone != nil {
				c.gone(app, ch, user)
			}
		},
	})
	// Only toolmark sockets are indexed: the bridge is the only reader of socket lookups.
	c.occ = channels.NewRedisOccupancy(c.presence, bridge.ChannelPrefix, logger)
	if c.store, err = bridge.NewRedisStore(ctx, c.rdb, prefix+"toolmark:"); err != nil {
		c.occ.Close()
		_ = c.presence.Close()
		_ = c.broker.Close()
		_ = c.rdb.Close()
		return nil, fmt.Errorf("scaling: bridge store: %w", err)
	}
	if c.feed, err = bridge.NewRedisFeed(ctx, c.rdb, prefix+"toolmark:", logger); err != nil {
		_ = c.store.Close()
		c.occ.Close()
		_ = c.presence.Close()
		_ = c.broker.Close()
		_ = c.rdb.Close()
		return nil, fmt.Errorf("scaling: toolmark manifest feed: %w", err)
	}
	return c, nil
}

// start begins delivering cluster messages into reg and heartbeating; gone announces
// members the presence store removed on its own (reaped nodes, retried leaves).
func (c *cluster) start(reg *channels.Registry, gone func(app, channel, user string)) {
	c.gone = gone
	c.broker.Start(reg.DeliverLocal)
	c.presence.Start()
}

// health is /up's dependency check: the subscription must be live and Redis must answer.
func (c *cluster) health(ctx context.Context) map[string]string {
	if !c.broker.Healthy() || c.rdb.Ping(ctx).Err() != nil {
		return map[string]string{"redis": "unreachable"}
	}
	return nil
}

// close runs after the pusher server and the bridge have shut down: occupancy's last batch,
// presence (it reaps this node's leftovers and announces them through the still-open
// broker), then beforeRedis (the webhooks hand what they hold to Redis), then the
// subscriptions, then the client.
func (c *cluster) close(logger *slog.Logger, beforeRedis func()) {
	c.occ.Close()
	if err := c.presence.Close(); err != nil {
		logger.Warn("presence cleanup on shutdown failed; survivors will reap this node", "error", err, "node", c.node)
	}
	beforeRedis()
	_ = c.feed.Close()
	_ = c.store.Close()
	_ = c.broker.Close()
	_ = c.rdb.Close()
}
