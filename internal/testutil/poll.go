package testutil

import (
	"testing"
	"time"
)

// WaitTimeout is how long WaitFor polls before it fails the test. It is generous because the
// tests share a busy machine (and CI): a condition that holds returns at once anyway, so
// only a failing test pays for it.
const WaitTimeout = 10 * time.Second

// pollEvery is WaitFor's polling period: short, so a test waits on state, not on time.
const pollEvery = 5 * time.Millisecond

// WaitFor polls cond until it holds, failing the test with "timed out waiting for <what>"
// after WaitTimeout. Tests wait on state this way instead of sleeping and hoping.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	WaitForWithin(t, WaitTimeout, what, cond)
}

// WaitForWithin is WaitFor with its own deadline, for a test whose limit is the point
// (e.g. "within the node timeout").
func WaitForWithin(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); time.Sleep(pollEvery) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
			return // a testing.TB whose Fatalf returns (a recorder) still stops polling
		}
	}
}

// SkipUnderRace skips an allocation-count test under the race detector, which changes the
// counts; scripts/test.sh runs those tests once more without it ("-run Alloc").
func SkipUnderRace(t interface {
	Helper()
	Skip(args ...any)
}) {
	t.Helper()
	if RaceEnabled {
		t.Skip("the race detector changes allocation counts; scripts/test.sh runs this test without -race")
	}
}
