package webhooks_test

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/reverbgo/reverbgo/internal/testutil"
	"github.com/reverbgo/reverbgo/webhooks"
	"github.com/reverbgo/reverbgo/webhooks/storetest"
)

func TestMemoryStore(t *testing.T) {
	storetest.Run(t, func(t *testing.T, n int) ([]webhooks.Store, func(time.Duration)) {
		return []webhooks.Store{webhooks.NewMemoryStore()}, time.Sleep
	})
}

func TestRedisStore(t *testing.T) {
	for _, be := range testutil.RedisBackends(t, false) {
		t.Run(be.Name, func(t *testing.T) {
			storetest.Run(t, func(t *testing.T, n int) ([]webhooks.Store, func(time.Duration)) {
				prefix := "test:" + uuid.NewString() + ":" // isolates cases on a shared server
				out := make([]webhooks.Store, n)
				for i := range out {
					out[i] = webhooks.NewRedisStore(be.Client(t), prefix, uuid.NewString())
				}
				elapse := time.Sleep
				if be.Mini != nil {
					mr := be.Mini(t)
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
	rdb := testutil.RedisCluster(t)
	storetest.Run(t, func(t *testing.T, n int) ([]webhooks.Store, func(time.Duration)) {
		prefix := "{test:" + uuid.NewString() + "}:"
		out := make([]webhooks.Store, n)
		for i := range out {
			out[i] = webhooks.NewRedisStore(rdb, prefix, uuid.NewString())
		}
		return out, time.Sleep
	})
}
