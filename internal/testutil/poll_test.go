package testutil

import (
	"sync/atomic"
	"testing"
	"time"
)

// fatalRecorder is a testing.TB whose Fatalf records instead of stopping the test.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Helper()                           {}
func (f *fatalRecorder) Fatalf(format string, args ...any) { f.msg = format }

func TestWaitForReturnsOnceTheConditionHolds(t *testing.T) {
	var n atomic.Int32
	WaitFor(t, "the third poll", func() bool { return n.Add(1) >= 3 })
	if n.Load() != 3 {
		t.Fatalf("polled %d times, want 3", n.Load())
	}
}

func TestWaitForWithinFailsAtItsDeadline(t *testing.T) {
	rec := &fatalRecorder{TB: t}
	start := time.Now()
	WaitForWithin(rec, 50*time.Millisecond, "never", func() bool { return false })
	if rec.msg == "" {
		t.Fatal("a condition that never held did not fail the test")
	}
	if took := time.Since(start); took < 50*time.Millisecond {
		t.Fatalf("failed after %v, before its 50ms deadline", took)
	}
}
