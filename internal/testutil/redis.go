package testutil

import (
	"sync"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/reverbgo/reverbgo/internal/testenv"
)

// RedisBackend is one Redis the Redis suites run against (see RedisBackends).
type RedisBackend struct {
	Name string // "miniredis", "redis" or "cluster"
	// Client returns a new client on the test's server, closed when the test ends. Every call
	// within one test reaches the same server, so several clients make several nodes.
	Client func(t *testing.T) redis.UniversalClient
	// Mini is the test's miniredis, for tests that move its clock (FastForward); nil on the
	// real servers.
	Mini func(t *testing.T) *miniredis.Miniredis
}

// RedisBackends are the servers a Redis suite runs against: miniredis always, the real
// redis-server of REVERBGO_TEST_REDIS_URL when set and, with cluster, the Redis Cluster of
// REVERBGO_TEST_REDIS_CLUSTER when set (under CI a missing one fails: see testenv). Cases on
// a real server share it, so each keeps its keys under a fresh prefix.
func RedisBackends(t *testing.T, cluster bool) []RedisBackend {
	t.Helper()
	out := []RedisBackend{{Name: "miniredis", Mini: miniFor, Client: func(t *testing.T) redis.UniversalClient {
		return closing(t, redis.NewClient(&redis.Options{Addr: miniFor(t).Addr()}))
	}}}
	if u := testenv.RedisURL(t); u != "" {
		opt, err := redis.ParseURL(u)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, RedisBackend{Name: "redis", Client: func(t *testing.T) redis.UniversalClient {
			return closing(t, redis.NewClient(opt))
		}})
	} else {
		t.Log("REVERBGO_TEST_REDIS_URL not set: real-Redis cases skipped")
	}
	if !cluster {
		return out
	}
	if addrs := testenv.RedisClusterAddrs(t); addrs != nil {
		out = append(out, RedisBackend{Name: "cluster", Client: func(t *testing.T) redis.UniversalClient {
			return closing(t, redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs}))
		}})
	} else {
		t.Log("REVERBGO_TEST_REDIS_CLUSTER not set: Redis Cluster cases skipped")
	}
	return out
}

func closing(t *testing.T, rdb redis.UniversalClient) redis.UniversalClient {
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// minis holds one miniredis per running test, by test name.
var minis = struct {
	sync.Mutex
	m map[string]*miniredis.Miniredis
}{m: map[string]*miniredis.Miniredis{}}

// miniFor returns the test's miniredis, started on first use and stopped when the test ends.
func miniFor(t *testing.T) *miniredis.Miniredis {
	minis.Lock()
	defer minis.Unlock()
	mr, ok := minis.m[t.Name()]
	if !ok {
		mr = miniredis.RunT(t)
		minis.m[t.Name()] = mr
		name := t.Name()
		t.Cleanup(func() {
			minis.Lock()
			delete(minis.m, name)
			minis.Unlock()
		})
	}
	return mr
}

// RealRedis returns a client of the real redis-server of REVERBGO_TEST_REDIS_URL, closed when
// the test ends, or skips the test when there is none (under CI that fails: see testenv).
func RealRedis(t *testing.T) redis.UniversalClient {
	t.Helper()
	u := testenv.RedisURL(t)
	if u == "" {
		t.Skip("REVERBGO_TEST_REDIS_URL not set")
	}
	opt, err := redis.ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	return closing(t, redis.NewClient(opt))
}

// RedisCluster returns a client of the Redis Cluster of REVERBGO_TEST_REDIS_CLUSTER, closed
// when the test ends, or skips the test when there is none (under CI that fails).
func RedisCluster(t *testing.T) redis.UniversalClient {
	t.Helper()
	addrs := testenv.RedisClusterAddrs(t)
	if addrs == nil {
		t.Skip("REVERBGO_TEST_REDIS_CLUSTER not set")
	}
	return closing(t, redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs}))
}
