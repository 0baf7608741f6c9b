package redisx

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/reverbgo/reverbgo/internal/testutil"
)

// Close of a Sentinel topology's client returns at once, also while its watcher waits for
// a +switch-master message: a node's shutdown does not sit out the watcher's 30 s receive.
// Before, Close waited for that receive to time out.
func TestSentinelClientClosesPromptly(t *testing.T) {
	master, sentinel := miniredis.RunT(t), miniredis.RunT(t)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	c := New(redis.NewClient(&redis.Options{Addr: master.Addr()}), &SentinelOptions{Addrs: []string{sentinel.Addr()}, MasterName: "m"}, quiet)
	testutil.WaitFor(t, "the watcher listening", func() bool { return sentinel.PubSubNumSub("+switch-master")["+switch-master"] == 1 })
	start := time.Now()
	_ = c.Close()
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("Close took %v", took)
	}
}
