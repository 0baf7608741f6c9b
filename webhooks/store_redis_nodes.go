package webhooks

import (
	"context"
	"time"
)

// ReapNode removes the occupancy of a node the cluster's node registry reaped (NewRedisStore
// registers it), batch by batch: the channels only it occupied are held as vacated (due
// now), as when their last subscriber leaves. SPOP hands each channel to one reaper, so
// survivors may reap the same node at once.
func (s *RedisStore) ReapNode(ctx context.Context, node string, now time.Time) error {
	for {
		done, err := reapNodeScript.Run(ctx, s.rdb, []string{s.nodeSet(node), s.occ(), s.holds()},
			now.UnixMilli(), reapBatch).Int()
		if err != nil || done == 1 {
			return err
		}
	}
}
