// Package testenv is what the tests of several packages need to know about the machine
// they run on, decided in one place.
package testenv

import (
	"os"
	"os/exec"
	"testing"
)

// InCI reports whether the tests run in CI (CI=true, as CI systems and .ci/run set it).
// There a missing service is a failure, not a reason to skip.
func InCI() bool { return os.Getenv("CI") == "true" }

// RedisURL is the real redis-server the Redis suites run against (REVERBGO_TEST_REDIS_URL),
// or "" when there is none, in which case the caller skips its real-Redis cases. Under CI a
// missing URL fails the test: a Redis suite that silently skipped would pass a broken
// distributed engine.
func RedisURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv("REVERBGO_TEST_REDIS_URL")
	if u == "" && InCI() {
		t.Fatal("CI=true but REVERBGO_TEST_REDIS_URL is not set: the real-Redis suites must run (is redis-server installed?)")
	}
	return u
}

// RedisServer is the path of the redis-server binary, for tests that run (and stop and
// continue) a server of their own. Without one the test is skipped, except under CI, where
// that is a failure: the Redis stall tests would otherwise pass without running.
func RedisServer(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if InCI() {
			t.Fatal("CI=true but redis-server is not installed: the Redis stall tests must run")
		}
		t.Skip("redis-server not installed")
	}
	return bin
}
