package pusher

import (
	"context"
	"io"
	"log/slog"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/reverbgo/reverbgo/channels"
	"github.com/reverbgo/reverbgo/internal/cluster"
	"github.com/reverbgo/reverbgo/internal/testutil"
)

// Fault 3: a subscribe flood to cache channels while Redis is frozen (SIGSTOP). The cache
// replay used to start a goroutine per subscribe outside every task bound (one socket made
// thousands in a few hundred ms). Now repeats of a channel the socket has are answered at
// once with no replay, and new cache channels go through the socket's bounded task queue
// (one goroutine, 64 waiting, the rest told 4100): goroutines stay flat.
func TestSubscribeFloodWithRedisFrozen(t *testing.T) {
	addr, proc := startRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	prefix := "flood:" + uuid.NewString() + ":"
	cache := cluster.NewRedisCache(rdb, prefix)
	broker, err := cluster.NewRedisBroker(ctx, rdb, cluster.RedisBrokerOptions{Channel: prefix + "bus", Logger: quiet, Cache: cache})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = broker.Close() })
	presence := cluster.NewRedisPresence(rdb, cluster.RedisPresenceOptions{Prefix: prefix, NodeID: broker.NodeID(), Logger: quiet})
	t.Cleanup(func() { _ = presence.Close() })
	reg := channels.NewRegistry(channels.Options{Broker: broker, Presence: presence, Cache: cache})
	broker.Start(reg.DeliverLocal)
	ts := newServer(t, withOptions(func(o *Options) { o.Registry = reg }))

	c := ts.connect(t)
	c.Subscribe("cache-have")
	c.WaitEvent("pusher:cache_miss", "cache-have") // the replay reached Redis before the freeze

	if err := proc.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = proc.Process.Signal(syscall.SIGCONT) }()
	base := runtime.NumGoroutine()
	peak := base
	sample := func() { peak = max(peak, runtime.NumGoroutine()) }

	// 2,000 repeats: each answered at once, no replay, no goroutine.
	const repeats = 2000
	c.CountOnly.Store(true)
	before := c.Count.Load()
	for i := range repeats {
		c.Send(map[string]any{"event": "pusher:subscribe", "data": map[string]any{"channel": "cache-have"}})
		if i%100 == 0 {
			sample()
		}
	}
	testutil.WaitFor(t, "every repeat answered while Redis is frozen", func() bool {
		sample()
		return c.Count.Load() >= before+repeats
	})
	if got := c.Count.Load() - before; got != repeats {
		t.Errorf("%d frames for %d repeated subscribes, want one subscription_succeeded each (no replay)", got, repeats)
	}

	// 1,000 new cache channels: one task goroutine; 64 wait, the rest are refused (4100).
	const fresh = 1000
	before = c.Count.Load()
	for i := range fresh {
		c.Send(map[string]any{"event": "pusher:subscribe", "data": map[string]any{"channel": "cache-flood-" + strconv.Itoa(i)}})
		if i%50 == 0 {
			sample()
		}
	}
	testutil.WaitFor(t, "the refusals", func() bool { sample(); return c.Count.Load() >= before+fresh-maxConnTasks-1 })
	for range 20 { // the flood's effect, a moment later
		sample()
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("goroutines: %d before the flood, at most %d during it", base, peak)
	if peak > base+50 {
		t.Errorf("goroutines grew from %d to %d during the flood: work outside the task bounds", base, peak)
	}
	if n := ts.s.pendingTasks.Load(); n > maxConnTasks+1 {
		t.Errorf("%d tasks pending for one socket, bound %d", n, maxConnTasks)
	}

	// After SIGCONT the queue drains and the socket works.
	if err := proc.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the task queue drained", func() bool { return ts.s.pendingTasks.Load() == 0 })
	c.CountOnly.Store(false)
	c.Ping()
}
