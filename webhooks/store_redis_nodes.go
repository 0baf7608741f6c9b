package webhooks

import (
	"context"
	"time"

	"github.com/reverbgo/reverbgo/internal/redisx"
)

// The RedisStore's part in the cluster's one node registry (channels.NodeRegistry): with
// UseNodeRegistry, the registry decides which nodes are dead and calls ReapNode; the store
// then keeps no heartbeats of its own (Maintain only fires nothing: the ticker's other work
// goes on).

// UseNodeRegistry hands liveness to the cluster's node registry: Maintain stops heartbeating
// and reaping, and the registry must call ReapNode for every node it reaps (this one at its
// Close included). Call it before the Dispatcher starts.
func (s *RedisStore) UseNodeRegistry() { s.external = true }

// reapNodeScript removes up to ARGV[3] channels of node ARGV[1] (a dead node, as the registry
// decided), holding channel_vacated (due ARGV[2]) for the channels only it had; it returns 1
// once the node has none left (and forgets its occupy time in KEYS[1]), 0 when more remain.
var reapNodeScript = redisx.Script("webhooks_reap_node")

// ReapNode removes a reaped node's occupancy, batch by batch: the channels only it occupied
// are held as vacated (due now), as when their last subscriber leaves. SPOP hands each
// channel to one reaper, so survivors may reap the same node at once.
func (s *RedisStore) ReapNode(ctx context.Context, node string, now time.Time) error {
	for {
		done, err := reapNodeScript.Run(ctx, s.rdb, []string{s.nodes(), s.nodeSet(node), s.occ(), s.holds()},
			node, now.UnixMilli(), reapBatch).Int()
		if err != nil || done == 1 {
			return err
		}
	}
}
