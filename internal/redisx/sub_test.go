package redisx_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/reverbgo/reverbgo/internal/redisx"
	"github.com/reverbgo/reverbgo/internal/testenv"
	"github.com/reverbgo/reverbgo/internal/testutil"
)

// TestAHalfFailedBatchLeavesNoDeadSubscription (issue 24): a batch that subscribes many
// channels (several SUBSCRIBE commands, more bytes than the sockets buffer) and unsubscribes
// one is cut by the proxy after its first SUBSCRIBE reached Redis, so the client's writes
// fail in the middle of the subscribes, before the UNSUBSCRIBE was sent. The Sub re-makes
// the connection from its owner's set (Want), never from go-redis's own list (which still
// holds the unsubscribed channel there): afterwards Redis has exactly the anchor and the
// wanted channels, and no subscription of the unwanted one is left anywhere.
func TestAHalfFailedBatchLeavesNoDeadSubscription(t *testing.T) {
	u := testenv.RedisURL(t)
	if u == "" {
		t.Skip("REVERBGO_TEST_REDIS_URL not set")
	}
	opt, err := redis.ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	proxy := testutil.NewProxy(t, opt.Addr)
	popt := *opt
	popt.Addr, popt.ContextTimeoutEnabled = proxy.Addr(), true
	c := redisx.New(redis.NewClient(&popt), nil, slog.New(slog.DiscardHandler))
	t.Cleanup(func() { _ = c.Close() })
	direct := redis.NewClient(opt)
	t.Cleanup(func() { _ = direct.Close() })

	prefix := "test:" + uuid.NewString()[:8] + ":"
	anchor, keep, gone := prefix+"anchor", prefix+"keep", prefix+"gone"
	var mu sync.Mutex
	want := map[string]bool{keep: true, gone: true}
	var confirmed atomic.Uint64
	s := c.NewSub(redisx.SubOptions{
		Name: "test", Anchor: anchor, ProbeEvery: -1,
		Want: func() []string {
			mu.Lock()
			defer mu.Unlock()
			out := make([]string, 0, len(want))
			for ch := range want {
				out = append(out, ch)
			}
			return out
		},
		OnConfirm: func(gen uint64) { confirmed.Store(gen) },
	})
	t.Cleanup(s.Close)
	subscribed := func() []string {
		chs, err := direct.PubSubChannels(context.Background(), prefix+"*").Result()
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(chs)
		return chs
	}
	testutil.WaitFor(t, "the first set subscribed", func() bool {
		return s.Up() && slices.Equal(subscribed(), []string{anchor, gone, keep})
	})

	// 10,000 channels of 1 KiB: ten SUBSCRIBE commands, far more than the socket buffers
	// hold, so the client is still writing subscribes when the cut comes.
	added := make([]string, 10000)
	pad := strings.Repeat("x", 1000)
	for i := range added {
		added[i] = fmt.Sprintf("%sadd:%05d:%s", prefix, i, pad)
	}
	mu.Lock()
	delete(want, gone)
	for _, ch := range added {
		want[ch] = true
	}
	mu.Unlock()
	if n := proxy.CutBefore(testutil.IsSubscriber, []byte("\r\n$9\r\nsubscribe\r\n"), 2); n == 0 {
		t.Fatal("no subscription connection went through the proxy")
	}
	before := c.Resubscribes(redisx.CauseStall) + c.Resubscribes(redisx.CauseReconnect)
	gen := s.Change(added, []string{gone})

	wanted := append([]string{anchor, keep}, added...)
	slices.Sort(wanted)
	var last []string
	defer func() {
		if t.Failed() {
			_, dead := slices.BinarySearch(last, gone)
			t.Logf("last seen: %d channels subscribed (want %d), the unwanted one among them: %v; confirmed gen %d (batch %d)",
				len(last), len(wanted), dead, confirmed.Load(), gen)
		}
	}()
	testutil.WaitForWithin(t, 10*time.Second, "only the wanted channels subscribed after the re-make", func() bool {
		last = subscribed()
		return confirmed.Load() > gen && slices.Equal(last, wanted)
	})
	if n := c.Resubscribes(redisx.CauseStall) + c.Resubscribes(redisx.CauseReconnect); n == before {
		t.Fatal("the batch did not fail: nothing was re-made")
	}
	res, err := direct.PubSubNumSub(context.Background(), gone, keep, added[0], added[len(added)-1]).Result()
	if err != nil {
		t.Fatal(err)
	}
	if res[gone] != 0 || res[keep] != 1 || res[added[0]] != 1 || res[added[len(added)-1]] != 1 {
		t.Fatalf("PUBSUB NUMSUB = %v: want the unwanted channel on no connection, the wanted ones on one", res)
	}
}
