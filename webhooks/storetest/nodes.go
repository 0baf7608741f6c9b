package storetest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/reverbgo/reverbgo/internal/cluster"
	"github.com/reverbgo/reverbgo/internal/testutil"
	"github.com/reverbgo/reverbgo/webhooks"
)

// nodeTimeout is the test registries' node_timeout: a node is dead after 8/10 of it.
const nodeTimeout = 500 * time.Millisecond

// RedisNodes is n nodes of one cluster over client() under prefix, as cmd/reverbgo makes
// them: each RedisStore registered with its node's cluster.RedisNodes (heartbeated here,
// not by a loop, so Kill decides who stops). elapse is the backend's (see Nodes).
func RedisNodes(t *testing.T, n int, prefix string, client func() redis.UniversalClient, elapse func(time.Duration)) Nodes {
	t.Helper()
	regs := make([]*cluster.RedisNodes, n)
	stores := make([]webhooks.Store, n)
	for i := range regs {
		rdb := client()
		regs[i] = cluster.NewRedisNodes(rdb, cluster.RedisNodesOptions{Prefix: prefix, NodeTimeout: nodeTimeout})
		stores[i] = webhooks.NewRedisStore(rdb, prefix, regs[i])
		if err := regs[i].Heartbeat(ctx); err != nil {
			t.Fatal(err)
		}
	}
	kill := func(t *testing.T, dead int) {
		t.Helper()
		victim := regs[dead].NodeID()
		round := func() {
			for j, r := range regs {
				if j != dead {
					if err := r.Heartbeat(ctx); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		testutil.WaitFor(t, "the dead node reaped", func() bool {
			round()
			live, err := regs[(dead+1)%n].LiveNodes(context.Background())
			return err == nil && !slices.Contains(live, victim)
		})
		round() // it may have died just after the last round's reap
	}
	return Nodes{Stores: stores, Elapse: elapse, Kill: kill}
}
