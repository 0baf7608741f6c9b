package redisx

import (
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestOpen: each way of naming a node's Redis gives the client of its topology, with
// context deadlines honoured and a description for logs that carries no password.
func TestOpen(t *testing.T) {
	cases := []struct {
		name    string
		servers Servers
		topo    Topology
		desc    string
		timeout func(redis.UniversalClient) bool
	}{
		{"url", Servers{URL: "redis://:pw-secret@127.0.0.1:6390/2"}, Standalone, "127.0.0.1:6390",
			func(r redis.UniversalClient) bool { return r.(*redis.Client).Options().ContextTimeoutEnabled }},
		{"tls url", Servers{URL: "rediss://127.0.0.1:6391"}, Standalone, "127.0.0.1:6391",
			func(r redis.UniversalClient) bool {
				o := r.(*redis.Client).Options()
				return o.ContextTimeoutEnabled && o.TLSConfig != nil
			}},
		{"sentinel", Servers{URL: "ignored", Sentinel: &SentinelServers{MasterName: "mymaster", Addrs: []string{"127.0.0.1:1", "127.0.0.1:2"}, Password: "pw-secret"}},
			Sentinel, "sentinel mymaster@127.0.0.1:1,127.0.0.1:2",
			func(r redis.UniversalClient) bool { return r.(*redis.Client).Options().ContextTimeoutEnabled }},
		{"cluster", Servers{Cluster: &ClusterServers{Addrs: []string{"127.0.0.1:3", "127.0.0.1:4"}, Password: "pw-secret"}},
			Cluster, "cluster 127.0.0.1:3,127.0.0.1:4",
			func(r redis.UniversalClient) bool { return r.(*redis.ClusterClient).Options().ContextTimeoutEnabled }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, desc, err := Open(tc.servers, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if c.topo != tc.topo || desc != tc.desc || strings.Contains(desc, "secret") {
				t.Errorf("topology %v, description %q; want %v, %q", c.topo, desc, tc.topo, tc.desc)
			}
			if !tc.timeout(c.UniversalClient) {
				t.Errorf("%T: context deadlines not honoured (or TLS missing)", c.UniversalClient)
			}
		})
	}
	if _, _, err := Open(Servers{URL: "http://127.0.0.1:1"}, nil); err == nil {
		t.Error("a URL that is not redis:// or rediss:// was accepted")
	}
}
