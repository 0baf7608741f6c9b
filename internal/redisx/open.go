package redisx

import (
	"log/slog"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Servers says where a node's Redis is: a Sentinel-watched master when Sentinel is set, a
// Redis Cluster when Cluster is set, else the server at URL (redis:// or, for TLS,
// rediss://).
type Servers struct {
	URL      string
	Sentinel *SentinelServers
	Cluster  *ClusterServers
}

// SentinelServers names a master behind Redis Sentinel. Password is the master's.
type SentinelServers struct {
	MasterName string
	Addrs      []string
	Password   string
}

// ClusterServers is a Redis Cluster reached through any of its seed nodes.
type ClusterServers struct {
	Addrs    []string
	Password string
}

// Open builds the one Client of a node for t: a plain client, a Sentinel failover client
// (it asks the sentinels for the master and follows +switch-master, and the Client watches
// the sentinels for its Subs) or a Redis Cluster client. Every client honours context
// deadlines (ContextTimeoutEnabled), so a caller's deadline bounds a round trip to a Redis
// that stopped answering, not only go-redis's own read timeout. It dials nothing: the
// caller's first command does. The description names the servers, for logs (no password).
func Open(t Servers, logger *slog.Logger) (c *Client, description string, err error) {
	switch {
	case t.Sentinel != nil:
		s := t.Sentinel
		rdb := redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName: s.MasterName, SentinelAddrs: s.Addrs, Password: s.Password, ContextTimeoutEnabled: true,
		})
		return New(rdb, &SentinelOptions{Addrs: s.Addrs, MasterName: s.MasterName, DataPassword: s.Password}, logger),
			"sentinel " + s.MasterName + "@" + strings.Join(s.Addrs, ","), nil
	case t.Cluster != nil:
		rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: t.Cluster.Addrs, Password: t.Cluster.Password, ContextTimeoutEnabled: true})
		return New(rdb, nil, logger), "cluster " + strings.Join(t.Cluster.Addrs, ","), nil
	default:
		opt, err := redis.ParseURL(t.URL)
		if err != nil {
			return nil, "", err
		}
		opt.ContextTimeoutEnabled = true
		return New(redis.NewClient(opt), nil, logger), opt.Addr, nil
	}
}
