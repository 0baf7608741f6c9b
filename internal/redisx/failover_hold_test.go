package redisx

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/reverbgo/reverbgo/internal/testutil"
)

// sentinelClient is a Sentinel topology's client on miniredis servers: master is what the
// failover client talks to, each of sentinels plays a sentinel whose messages the test
// publishes (they answer no SENTINEL command, as a sentinel that lost its state would not).
func sentinelClient(t *testing.T, master *miniredis.Miniredis, sentinels ...*miniredis.Miniredis) *Client {
	t.Helper()
	addrs := make([]string, len(sentinels))
	for i, s := range sentinels {
		addrs[i] = s.Addr()
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	c := New(redis.NewClient(&redis.Options{Addr: master.Addr()}), &SentinelOptions{Addrs: addrs, MasterName: "m"}, quiet)
	t.Cleanup(func() { _ = c.Close() })
	for _, s := range sentinels {
		testutil.WaitFor(t, "the watcher listening on "+s.Addr(), func() bool {
			n := s.PubSubNumSub(evSwitchMaster, evTryFailover)
			return n[evSwitchMaster] == 1 && n[evTryFailover] == 1 && s.PubSubNumPat() == 1
		})
	}
	return c
}

// holding reports whether a write would wait now.
func holding(c *Client) bool {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := c.AwaitWritable(ctx)
	return err != nil
}

func hostPort(t *testing.T, m *miniredis.Miniredis) string {
	h, p, err := net.SplitHostPort(m.Addr())
	if err != nil {
		t.Fatal(err)
	}
	return h + " " + p
}

// A +switch-master that only the second sentinel published (the first is slow to hear of
// it) moves the pub/sub plane. Before, the watcher listened to the first sentinel only and
// the plane stayed on the demoted master.
func TestSwitchOnAnySentinelMovesThePlane(t *testing.T) {
	ctx := context.Background()
	demoted, promoted := miniredis.RunT(t), miniredis.RunT(t)
	s1, s2 := miniredis.RunT(t), miniredis.RunT(t)
	c := sentinelClient(t, demoted, s1, s2)
	s2.Publish(evSwitchMaster, "m "+hostPort(t, demoted)+" "+hostPort(t, promoted))
	testutil.WaitFor(t, "the plane on the new master", func() bool {
		return c.Plane().Set(ctx, "probe", "x", 0).Err() == nil && promoted.Exists("probe")
	})
}

// A failover that the second sentinel runs (+try-failover is published by the sentinel
// running it only) holds writes until a +switch-master from any sentinel, which moved the
// plane first. Before, there was no hold: writes went on to the master being demoted.
func TestFailoverOnAnySentinelHoldsWritesUntilTheSwitch(t *testing.T) {
	ctx := context.Background()
	demoted, promoted := miniredis.RunT(t), miniredis.RunT(t)
	s1, s2 := miniredis.RunT(t), miniredis.RunT(t)
	c := sentinelClient(t, demoted, s1, s2)
	if holding(c) {
		t.Fatal("writes held with no failover")
	}
	s2.Publish(evTryFailover, "master other 127.0.0.1 1")
	s2.Publish(evTryFailover, "master m "+hostPort(t, demoted))
	testutil.WaitFor(t, "writes held", func() bool { return holding(c) })

	released := make(chan error, 1)
	go func() {
		held, err := c.AwaitWritable(ctx)
		if err == nil && !held {
			err = errors.New("AwaitWritable returned during a hold without reporting it held")
		}
		released <- err
	}()
	s1.Publish(evSwitchMaster, "m "+hostPort(t, demoted)+" "+hostPort(t, promoted))
	select {
	case err := <-released:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the switch did not end the hold")
	}
	if err := c.Plane().Set(ctx, "probe", "x", 0).Err(); err != nil || !promoted.Exists("probe") {
		t.Fatalf("a write after the hold did not go to the new master (%v)", err)
	}
}

// An abort ends the hold, but only from the sentinel that ran the failover: another
// sentinel's abort (it tried and was not elected) leaves it in force.
func TestFailoverAbortEndsTheHold(t *testing.T) {
	master := miniredis.RunT(t)
	s1, s2 := miniredis.RunT(t), miniredis.RunT(t)
	c := sentinelClient(t, master, s1, s2)
	s2.Publish(evTryFailover, "master m "+hostPort(t, master))
	testutil.WaitFor(t, "writes held", func() bool { return holding(c) })
	failing := func(s *miniredis.Miniredis) bool {
		c.hmu.Lock()
		defer c.hmu.Unlock()
		_, ok := c.failing[s.Addr()]
		return ok
	}
	s1.Publish(evTryFailover, "master m "+hostPort(t, master))
	testutil.WaitFor(t, "the first sentinel's failover seen", func() bool { return failing(s1) })
	s1.Publish("-failover-abort-not-elected", "master m "+hostPort(t, master))
	testutil.WaitFor(t, "the first sentinel's abort seen", func() bool { return !failing(s1) })
	if !holding(c) {
		t.Fatal("an abort of another sentinel ended the hold")
	}
	s2.Publish("-failover-abort-no-good-slave", "master m "+hostPort(t, master))
	testutil.WaitFor(t, "the hold ended by the abort", func() bool { return !holding(c) })
}

// A failover that never says it ended holds writes for the bound only.
func TestFailoverHoldIsBounded(t *testing.T) {
	master := miniredis.RunT(t)
	s1, s2 := miniredis.RunT(t), miniredis.RunT(t)
	c := sentinelClient(t, master, s1, s2)
	c.hmu.Lock()
	c.holdMax = 300 * time.Millisecond
	c.hmu.Unlock()
	start := time.Now()
	s2.Publish(evTryFailover, "master m "+hostPort(t, master))
	testutil.WaitFor(t, "writes held", func() bool { return holding(c) })
	if _, err := c.AwaitWritable(context.Background()); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 300*time.Millisecond || took > 5*time.Second {
		t.Fatalf("the hold ended after %v, want about 300ms", took)
	}
}

// Close ends a hold: a writer waiting in AwaitWritable returns, and no watcher is left.
func TestCloseEndsTheHold(t *testing.T) {
	master := miniredis.RunT(t)
	s1, s2 := miniredis.RunT(t), miniredis.RunT(t)
	c := sentinelClient(t, master, s1, s2)
	s1.Publish(evTryFailover, "master m "+hostPort(t, master))
	testutil.WaitFor(t, "writes held", func() bool { return holding(c) })
	released := make(chan error, 1)
	go func() {
		_, err := c.AwaitWritable(context.Background())
		released <- err
	}()
	start := time.Now()
	_ = c.Close()
	select {
	case <-released:
	case <-time.After(2 * time.Second):
		t.Fatal("Close left a writer waiting")
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("Close took %v", took)
	}
}
