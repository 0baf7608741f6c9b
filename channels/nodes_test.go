package channels_test

import (
	"testing"
	"time"

	"github.com/reverbgo/reverbgo/channels"
	"github.com/reverbgo/reverbgo/channels/channelstest"
)

func TestMemoryNodes(t *testing.T) {
	sets := map[string]*channels.MemoryNodeSet{}
	channelstest.RunNodeRegistry(t, func(t *testing.T, id string, timeout time.Duration) channels.NodeRegistry {
		set := sets[t.Name()]
		if set == nil {
			set = channels.NewMemoryNodeSet()
			sets[t.Name()] = set
		}
		n := channels.NewMemoryNodes(set, id, timeout, nil)
		t.Cleanup(func() { _ = n.Close() })
		return n
	})
}

func TestRedisNodes(t *testing.T) {
	for _, be := range backends(t) {
		for _, l := range layouts() {
			t.Run(be.Name+"/"+l.name, func(t *testing.T) {
				spaces := map[string]*channels.KeySpace{}
				channelstest.RunNodeRegistry(t, func(t *testing.T, id string, timeout time.Duration) channels.NodeRegistry {
					ks, ok := spaces[t.Name()]
					if !ok {
						ks = l.keys()
						spaces[t.Name()] = ks
					}
					n := channels.NewRedisNodes(be.Client(t), channels.RedisNodesOptions{Keys: ks, NodeID: id, NodeTimeout: timeout})
					t.Cleanup(func() { _ = n.Close() })
					return n
				})
			})
		}
	}
}
