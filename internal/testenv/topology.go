package testenv

import (
	"os"
	"strings"
	"testing"
)

// The Redis topologies the topology tests need besides REVERBGO_TEST_REDIS_URL and
// REVERBGO_TEST_REDIS_CLUSTER, as scripts/redis-topologies.sh prints them (.ci/run starts
// them). The broker-level tests (internal/cluster/topology_test.go) change their shape (a slot
// moved and moved back, a planned failover) and leave them serving; the black-box fault
// harness (e2e/topology) starts fresh ones of its own per scenario with the same script and
// runs only where these are set, i.e. where the machine is meant to run topology tests.

// Sentinel is a running Sentinel topology: the sentinels' addresses and the master name.
type Sentinel struct {
	Addrs  []string
	Master string
}

// SentinelTopology is the Sentinel of REVERBGO_TEST_SENTINEL (comma-separated sentinel
// host:port, SENTINEL_ADDRS of the script; master name mymaster unless
// REVERBGO_TEST_SENTINEL_MASTER says otherwise), or nil when it is not set: the caller skips,
// except under CI, where that is a failure.
func SentinelTopology(t testing.TB) *Sentinel {
	t.Helper()
	v := os.Getenv("REVERBGO_TEST_SENTINEL")
	if v == "" {
		if InCI() {
			t.Fatal("CI=true but REVERBGO_TEST_SENTINEL is not set: the Sentinel topology tests must run")
		}
		return nil
	}
	m := os.Getenv("REVERBGO_TEST_SENTINEL_MASTER")
	if m == "" {
		m = "mymaster"
	}
	return &Sentinel{Addrs: strings.Split(v, ","), Master: m}
}

// ClusterReplicasAddrs are the nodes of a Redis Cluster with one replica per master
// (REVERBGO_TEST_CLUSTER_REPLICAS, comma-separated host:port, CLUSTER_ADDRS of
// `redis-topologies.sh start cluster-replicas`), or nil when it is not set: the caller skips,
// except under CI, where that is a failure. Tests that move slots use this cluster, not the
// shared REVERBGO_TEST_REDIS_CLUSTER, whose other users a moved slot would disturb.
func ClusterReplicasAddrs(t testing.TB) []string {
	t.Helper()
	v := os.Getenv("REVERBGO_TEST_CLUSTER_REPLICAS")
	if v == "" {
		if InCI() {
			t.Fatal("CI=true but REVERBGO_TEST_CLUSTER_REPLICAS is not set: the Redis Cluster topology tests must run")
		}
		return nil
	}
	return strings.Split(v, ",")
}
