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
		t.Run(be.Name, func(t *testing.T) {
			prefixes := map[string]string{}
			channelstest.RunNodeRegistry(t, func(t *testing.T, id string, timeout time.Duration) channels.NodeRegistry {
				prefix, ok := prefixes[t.Name()]
				if !ok {
					prefix = testPrefix()
					prefixes[t.Name()] = prefix
				}
				n := channels.NewRedisNodes(be.Client(t), channels.RedisNodesOptions{Prefix: prefix, NodeID: id, NodeTimeout: timeout})
				t.Cleanup(func() { _ = n.Close() })
				return n
			})
		})
	}
}
