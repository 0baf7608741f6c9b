package webhooks_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/reverbgo/reverbgo/internal/testutil"
	"github.com/reverbgo/reverbgo/webhooks"
	"github.com/reverbgo/reverbgo/webhooks/storetest"
)

func TestMemoryStore(t *testing.T) {
	storetest.Run(t, func(t *testing.T, n int) storetest.Nodes {
		return storetest.Nodes{Stores: []webhooks.Store{webhooks.NewMemoryStore()}, Elapse: time.Sleep}
	})
}

func TestRedisStore(t *testing.T) {
	for _, be := range testutil.RedisBackends(t, false) {
		t.Run(be.Name, func(t *testing.T) {
			storetest.Run(t, func(t *testing.T, n int) storetest.Nodes {
				prefix := "test:" + uuid.NewString() + ":" // isolates cases on a shared server
				elapse := time.Sleep
				if be.Mini != nil {
					mr := be.Mini(t)
					elapse = func(d time.Duration) { mr.FastForward(d); time.Sleep(d) }
				}
				return storetest.RedisNodes(t, n, prefix, func() redis.UniversalClient { return be.Client(t) }, elapse)
			})
		})
	}
}

// TestRedisStoreCluster runs the suite on a real Redis Cluster (REVERBGO_TEST_REDIS_CLUSTER)
// under a hash-tagged prefix, as the node uses: every script's keys share one slot.
func TestRedisStoreCluster(t *testing.T) {
	rdb := testutil.RedisCluster(t)
	storetest.Run(t, func(t *testing.T, n int) storetest.Nodes {
		prefix := "{test:" + uuid.NewString() + "}:"
		return storetest.RedisNodes(t, n, prefix, func() redis.UniversalClient { return rdb }, time.Sleep)
	})
}
