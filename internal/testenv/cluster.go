package testenv

import (
	"os"
	"strings"
	"testing"
)

// RedisClusterAddrs are the seed nodes of a real Redis Cluster (REVERBGO_TEST_REDIS_CLUSTER,
// comma-separated host:port, as scripts/redis-topologies.sh prints them), or nil when there
// is none; the Cluster cases then skip, except under CI, where that is a failure.
func RedisClusterAddrs(t testing.TB) []string {
	t.Helper()
	v := os.Getenv("REVERBGO_TEST_REDIS_CLUSTER")
	if v == "" {
		if InCI() {
			t.Fatal("CI=true but REVERBGO_TEST_REDIS_CLUSTER is not set: the Redis Cluster suites must run")
		}
		return nil
	}
	return strings.Split(v, ",")
}
