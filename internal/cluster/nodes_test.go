package cluster_test

import (
	"testing"
	"time"

	"github.com/reverbgo/reverbgo/channels/channelstest"
	"github.com/reverbgo/reverbgo/internal/cluster"
)

func TestMemoryNodes(t *testing.T) {
	sets := map[string]*cluster.MemoryNodeSet{}
	channelstest.RunNodeRegistry(t, func(t *testing.T, id string, timeout time.Duration) cluster.NodeRegistry {
		set := sets[t.Name()]
		if set == nil {
			set = cluster.NewMemoryNodeSet()
			sets[t.Name()] = set
		}
		n := cluster.NewMemoryNodes(set, id, timeout, nil)
		t.Cleanup(func() { _ = n.Close() })
		return n
	})
}

func TestRedisNodes(t *testing.T) {
	for _, be := range backends(t) {
		for _, l := range layouts() {
			t.Run(be.Name+"/"+l.name, func(t *testing.T) {
				spaces := map[string]*cluster.KeySpace{}
				channelstest.RunNodeRegistry(t, func(t *testing.T, id string, timeout time.Duration) cluster.NodeRegistry {
					ks, ok := spaces[t.Name()]
					if !ok {
						ks = l.keys()
						spaces[t.Name()] = ks
					}
					n := cluster.NewRedisNodes(be.Client(t), cluster.RedisNodesOptions{Keys: ks, NodeID: id, NodeTimeout: timeout})
					t.Cleanup(func() { _ = n.Close() })
					return n
				})
			})
		}
	}
}
