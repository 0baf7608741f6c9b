package bridge_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/reverbgo/reverbgo/bridge"
	"github.com/reverbgo/reverbgo/bridge/storetest"
	"github.com/reverbgo/reverbgo/internal/testutil"
)

func newRedisStore(t *testing.T, rdb redis.UniversalClient) bridge.Store {
	t.Helper()
	// A fresh prefix per test keeps cases (and a shared real server) isolated.
	s, err := bridge.NewRedisStore(context.Background(), rdb, fmt.Sprintf("test:%s:", uuid.NewString()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestRedisStoreMiniredis(t *testing.T) {
	storetest.Run(t, func(t *testing.T) bridge.Store {
		mr := miniredis.RunT(t)
		// miniredis only expires keys when told to: let its clock follow the wall clock.
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			tick := time.NewTicker(5 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					mr.FastForward(5 * time.Millisecond)
				}
			}
		}()
		rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
		t.Cleanup(func() { close(stop); <-done; _ = rdb.Close() })
		return newRedisStore(t, rdb)
	})
}

// TestRedisStoreReal runs the suite against a real server when REVERBGO_TEST_REDIS_URL is set.
func TestRedisStoreReal(t *testing.T) {
	rdb := testutil.RealRedis(t)
	storetest.Run(t, func(t *testing.T) bridge.Store { return newRedisStore(t, rdb) })
}

// TestRedisStoreCluster runs the suite on a real Redis Cluster (REVERBGO_TEST_REDIS_CLUSTER)
// under a hash-tagged prefix, as the node uses: every script's keys and the wake-up channel
// (SPUBLISH inside the claim script) share one slot.
func TestRedisStoreCluster(t *testing.T) {
	rdb := testutil.RedisCluster(t)
	storetest.Run(t, func(t *testing.T) bridge.Store {
		s, err := bridge.NewRedisStore(context.Background(), rdb, fmt.Sprintf("{test:%s}:toolmark:", uuid.NewString()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}

// TestRedisStoreCrossNode: a result claimed through one node's store wakes a waiter on another.
func TestRedisStoreCrossNode(t *testing.T) {
	mr := miniredis.RunT(t)
	rdbA := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	rdbB := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdbA.Close(); _ = rdbB.Close() })
	a, err := bridge.NewRedisStore(context.Background(), rdbA, "x:")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := bridge.NewRedisStore(context.Background(), rdbB, "x:")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	if err := a.Bind(ctx, bridge.Binding{ID: "id1", Deadline: time.Now().Add(time.Minute)}, time.Minute); err != nil {
		t.Fatal(err)
	}
	wake, release := a.Watch("id1")
	defer release()
	if o, err := b.ClaimResult(ctx, "id1", []byte(`{"status":"ok"}`), time.Now(), nil, 0); err != nil || o != bridge.Claimed {
		t.Fatalf("claim on B: %v %v", o, err)
	}
	select {
	case <-wake:
	case <-time.After(5 * time.Second):
		t.Fatal("waiter on A not woken")
	}
	res, timedOut, err := a.ClaimTimeout(ctx, "id1")
	if err != nil || timedOut || string(res) != `{"status":"ok"}` {
		t.Fatalf("A sees %s %v %v", res, timedOut, err)
	}
}
