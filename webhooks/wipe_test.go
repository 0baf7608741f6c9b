package webhooks

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/reverbgo/reverbgo/internal/testenv"
	"github.com/reverbgo/reverbgo/internal/testutil"
)

// TestEventsLostToARedisWipeAreCounted (issue 24): two nodes queue events for a receiver
// that is down (3 on node a, 4 on node b, one batch of them in flight and retried), and
// then Redis loses everything: FLUSHALL, or a restart of a server without persistence.
// Each node counts dropped exactly the events it queued (7 in all, none twice), logs the
// loss, and events queued afterwards are not counted. Before the ledger both counters
// stayed 0: the events vanished unseen (the chaos soak lost 30 member_added that way).
func TestEventsLostToARedisWipeAreCounted(t *testing.T) {
	testenv.RedisServer(t)
	cases := []struct {
		name string
		wipe func(t *testing.T, top *testutil.Topology, rdb redis.UniversalClient)
	}{
		{"flushall", func(t *testing.T, _ *testutil.Topology, rdb redis.UniversalClient) {
			if err := rdb.FlushAll(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
		}},
		{"restart", func(t *testing.T, top *testutil.Topology, _ redis.UniversalClient) {
			pid, err := strconv.Atoi(top.PID("standalone"))
			if err != nil {
				t.Fatal(err)
			}
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			testutil.WaitFor(t, "redis-server gone", func() bool {
				return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
			})
			if err := top.Restart("standalone"); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			top := testutil.StartTopology(t, "standalone")
			opt, err := redis.ParseURL(top.Var("REDIS_URL"))
			if err != nil {
				t.Fatal(err)
			}
			rdb := redis.NewClient(opt)
			t.Cleanup(func() { _ = rdb.Close() })
			rcv := newReceiver(t, func(int) int { return 503 })
			prefix := "t:" + uuid.NewString() + ":"
			logs := &syncBuffer{}
			node := func() *Dispatcher {
				opts := testOptions(logs)
				opts.Store = redisStore(rdb, prefix, "")
				opts.Poll = 50 * time.Millisecond
				opts.MaxBatch = 2
				opts.Lease = 2 * time.Second
				opts.FirstRetry = 100 * time.Millisecond
				opts.RetryFor = time.Hour
				return start(t, opts, app("1", "k", "s", hook(rcv.srv.URL)))
			}
			a, b := node(), node()
			for i := range 7 {
				n := a
				if i >= 3 {
					n = b
				}
				n.Emit("1", ev("client_event", strconv.Itoa(i)))
			}
			testutil.WaitFor(t, "7 events queued or in flight and a batch retried", func() bool {
				return a.Stats().Pending == 7 && b.Stats().Pending == 7 && len(rcv.deliveries()) >= 2
			})
			c.wipe(t, top, rdb)
			testutil.WaitFor(t, "the lost events counted", func() bool {
				return a.Stats().Dropped+b.Stats().Dropped >= 7
			})
			// Queued after the wipe: kept (in Redis), never counted lost.
			a.Emit("1", ev("client_event", "after"))
			testutil.WaitFor(t, "the new event seen by a poll", func() bool {
				return a.Stats().Pending == 1 && b.Stats().Pending == 1
			})
			sa, sb := a.Stats(), b.Stats()
			if sa.Dropped != 3 || sb.Dropped != 4 || sa.DroppedBatches != 1 || sb.DroppedBatches != 1 {
				t.Fatalf("dropped a=%d (%d batches) b=%d (%d batches); want exactly 3 and 4 events, 1 outbox each",
					sa.Dropped, sa.DroppedBatches, sb.Dropped, sb.DroppedBatches)
			}
			if !strings.Contains(logs.String(), `"msg":"webhook events lost with the store's data`) {
				t.Fatalf("the loss is not logged:\n%s", logs.String())
			}
		})
	}
}
