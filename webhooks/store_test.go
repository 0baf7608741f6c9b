package webhooks_test

import (
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/reverbgo/reverbgo/internal/testenv"
	"github.com/reverbgo/reverbgo/webhooks"
	"github.com/reverbgo/reverbgo/webhooks/storetest"
)

// redisBackends are the Redis servers the shared suites run against: miniredis always, a
// real server when REVERBGO_TEST_REDIS_URL is set. client returns a new client on the
// test's server; every call in one test reaches the same server.
func redisBackends(t *testing.T) map[string]func(t *testing.T) redis.UniversalClient {
	out := map[string]func(t *testing.T) redis.UniversalClient{
		"miniredis": func(t *testing.T) redis.UniversalClient {
			mr := miniFor(t)
			rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
			t.Cleanup(func() { _ = rdb.Close() })
			return rdb
		},
	}
	if u := testenv.RedisURL(t); u != "" {
		opt, err := redis.ParseURL(u)
		if err != nil {
			t.Fatal(err)
		}
		out["redis"] = func(t *testing.T) redis.UniversalClient {
			rdb := redis.NewClient(opt)
			t.Cleanup(func() { _ = rdb.Close() })
			return rdb
		}
	} else {
		t.Log("REVERBGO_TEST_REDIS_URL not set: real-Redis cases skipped")
	}
	return out
}

// miniByTest is touched only from test goroutines of sequential tests.
var miniByTest = map[string]*miniredis.Miniredis{}

func miniFor(t *testing.T) *miniredis.Miniredis {
	mr, ok := miniByTest[t.Name()]
	if !ok {
		mr = miniredis.RunT(t)
		miniByTest[t.Name()] = mr
		t.Cleanup(func() { delete(miniByTest, t.Name()) })
	}
	return mr
}

func TestMemoryStore(t *testing.T) {
	storetest.Run(t, func(t *testing.T, n int) ([]webhooks.Store, func(time.Duration)) {
		return []webhooks.Store{webhooks.NewMemoryStore()}, time.Sleep
	})
}

func TestRedisStore(t *testing.T) {
	for name, client := range redisBackends(t) {
		t.Run(name, func(t *testing.T) {
			storetest.Run(t, func(t *testing.T, n int) ([]webhooks.Store, func(time.Duration)) {
				prefix := "test:" + uuid.NewString() + ":" // isolates cases on a shared server
				out := make([]webhooks.Store, n)
				for i := range out {
					out[i] = webhooks.NewRedisStore(client(t), prefix, uuid.NewString())
				}
				elapse := time.Sleep
				if name == "miniredis" {
					mr := miniFor(t)
					elapse = func(d time.Duration) { mr.FastForward(d); time.Sleep(d) }
				}
				return out, elapse
			})
		})
	}
}

// TestRedisStoreCluster runs the suite on a real Redis Cluster (REVERBGO_TEST_REDIS_CLUSTER)
// under a hash-tagged prefix, as the node uses: every script's keys share one slot.
func TestRedisStoreCluster(t *testing.T) {
	addrs := testenv.RedisClusterAddrs(t)
	if addrs == nil {
		t.Skip("REVERBGO_TEST_REDIS_CLUSTER not set")
	}
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { _ = rdb.Close() })
	storetest.Run(t, func(t *testing.T, n int) ([]webhooks.Store, func(time.Duration)) {
		prefix := "{test:" + uuid.NewString() + "}:"
		out := make([]webhooks.Store, n)
		for i := range out {
			out[i] = webhooks.NewRedisStore(rdb, prefix, uuid.NewString())
		}
		return out, time.Sleep
	})
}
