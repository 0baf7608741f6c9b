package channels_test

import (
	"context"
	"os"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/reverbgo/reverbgo/channels"
	"github.com/reverbgo/reverbgo/channels/channelstest"
)

// backend is a Redis the shared suites run against: miniredis always, a real server when
// REVERBGO_TEST_REDIS_URL is set.
type backend struct {
	name string
	// client returns a new client on the backend's server, closed at test end. Every call in
	// one test reaches the same server, so several clients make several nodes.
	client func(t *testing.T) redis.UniversalClient
}

func backends(t *testing.T) []backend {
	out := []backend{{"miniredis", func(t *testing.T) redis.UniversalClient {
		// One miniredis per test, shared by that test's clients.
		mr, ok := miniByTest[t.Name()]
		if !ok {
			mr = miniredis.RunT(t)
			miniByTest[t.Name()] = mr
			t.Cleanup(func() { delete(miniByTest, t.Name()) })
		}
		rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
		t.Cleanup(func() { _ = rdb.Close() })
		return rdb
	}}}
	if u := os.Getenv("REVERBGO_TEST_REDIS_URL"); u != "" {
		opt, err := redis.ParseURL(u)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, backend{"redis", func(t *testing.T) redis.UniversalClient {
			rdb := redis.NewClient(opt)
			t.Cleanup(func() { _ = rdb.Close() })
			return rdb
		}})
	} else {
		t.Log("REVERBGO_TEST_REDIS_URL not set: real-Redis cases skipped")
	}
	return out
}

// miniByTest is touched only from test goroutines of sequential (non-parallel) tests.
var miniByTest = map[string]*miniredis.Miniredis{}

func TestMemoryBroker(t *testing.T) {
	channelstest.RunBroker(t, 1, func(t *testing.T, n int) []*channels.Registry {
		return []*channels.Registry{channels.NewRegistry(channels.Options{})}
	})
}

func TestRedisBroker(t *testing.T) {
	for _, be := range backends(t) {
		t.Run(be.name, func(t *testing.T) {
			channelstest.RunBroker(t, 2, func(t *testing.T, n int) []*channels.Registry {
				ch := "test:" + uuid.NewString() // isolates cases on a shared real server
				regs := make([]*channels.Registry, n)
				for i := range regs {
					b, err := channels.NewRedisBroker(context.Background(), be.client(t), channels.RedisBrokerOptions{Channel: ch})
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { _ = b.Close() })
					regs[i] = channels.NewRegistry(channels.Options{Broker: b})
					b.Start(regs[i].DeliverLocal)
				}
				return regs
			})
		})
	}
}
