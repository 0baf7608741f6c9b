package cluster_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/reverbgo/reverbgo/channels"
	"github.com/reverbgo/reverbgo/channels/channelstest"
	"github.com/reverbgo/reverbgo/internal/cluster"
	"github.com/reverbgo/reverbgo/internal/testutil"
)

// replySpy records every string a Redis reply carried back to the client.
type replySpy struct {
	mu   sync.Mutex
	seen []string
}

func (s *replySpy) DialHook(next redis.DialHook) redis.DialHook { return next }
func (s *replySpy) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			s.record(c)
		}
		return err
	}
}
func (s *replySpy) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		s.record(cmd)
		return err
	}
}

func (s *replySpy) record(c redis.Cmder) {
	var vals []string
	switch c := c.(type) {
	case *redis.MapStringStringCmd:
		for k, v := range c.Val() {
			vals = append(vals, k, v)
		}
	case *redis.ScanCmd:
		vals, _ = c.Val()
	case *redis.StringSliceCmd:
		vals = c.Val()
	}
	s.mu.Lock()
	s.seen = append(s.seen, vals...)
	s.mu.Unlock()
}

func (s *replySpy) reset() { s.mu.Lock(); s.seen = nil; s.mu.Unlock() }
func (s *replySpy) any(sub string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, v := range s.seen {
		if strings.Contains(v, sub) {
			return true
		}
	}
	return false
}

var _ redis.Hook = (*replySpy)(nil)

// TestRedisOccupancyChannelsReadsOnlyTheApp: an app's channel list is built from replies
// that carry none of another app's channels, also when the app id holds glob characters.
func TestRedisOccupancyChannelsReadsOnlyTheApp(t *testing.T) {
	ctx := context.Background()
	for _, be := range backends(t) {
		for _, l := range layouts() {
			t.Run(be.Name+"/"+l.name, func(t *testing.T) {
				rdb := be.Client(t)
				spy := &replySpy{}
				rdb.AddHook(spy)
				pres := cluster.NewRedisPresence(rdb, cluster.RedisPresenceOptions{Keys: l.keys(), NodeTimeout: time.Minute})
				occ := cluster.NewRedisOccupancy(pres, "private-toolmark.", nil)
				t.Cleanup(occ.Close)
				reg := channels.NewRegistry(channels.Options{Presence: pres, Occupancy: occ})
				if err := pres.Heartbeat(ctx); err != nil {
					t.Fatal(err)
				}
				reg.Subscribe("a*", "mine", &channelstest.Sink{ID: "1.1"})
				reg.Subscribe("ab", "theirs-ab", &channelstest.Sink{ID: "1.2"})
				reg.Subscribe("other", "theirs-other", &channelstest.Sink{ID: "1.3"})
				testutil.WaitFor(t, "counts written", func() bool {
					n, err := occ.SubscriptionCount(ctx, "other", "theirs-other")
					return err == nil && n == 1
				})
				spy.reset()
				list, err := occ.Channels(ctx, "a*", "")
				if err != nil || len(list) != 1 || list[0] != (channels.ChannelInfo{Name: "mine", SubscriptionCount: 1}) {
					t.Fatalf("channels of a* = %+v %v", list, err)
				}
				if spy.any("theirs") {
					t.Fatal("another app's channels were read to list this app's")
				}
				if !spy.any("mine") {
					t.Fatal("the spy saw nothing: the test would pass vacuously")
				}
				// More fields than one HSCAN page.
				for i := 0; i < 1500; i++ {
					reg.Subscribe("a*", fmt.Sprintf("many-%d", i), &channelstest.Sink{ID: "1.1"})
				}
				testutil.WaitFor(t, "every channel listed", func() bool {
					list, err := occ.Channels(ctx, "a*", "many-")
					return err == nil && len(list) == 1500
				})
			})
		}
	}
}
