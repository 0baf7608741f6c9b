package cluster

import (
	"context"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// TestOccupancyStaleWriteRepaired: a batch (or Resync) whose value landed after a newer one
// (the count changed while its write was under way) is settled against memory and the field
// re-marked, so the next flush writes the count the node holds; a write that still matches
// memory is not written again.
func TestOccupancyStaleWriteRepaired(t *testing.T) {
	ctx := context.Background()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	nodes := NewRedisNodes(rdb, RedisNodesOptions{NodeID: "n1"})
	o := NewRedisOccupancy(nodes, "", nil)
	t.Cleanup(o.Close)
	read := func(field string) string {
		v, _ := rdb.HGet(ctx, o.subsKey("n1", o.bucket(field)), field).Result()
		return v
	}
	o.Subscribed("app", "news", "1.1")
	o.Subscribed("app", "sports", "1.1")
	o.flush()
	if read("app\x00news") != "1" || read("app\x00sports") != "1" {
		t.Fatalf("first batch: news=%q sports=%q", read("app\x00news"), read("app\x00sports"))
	}
	// A write computed before news got its second subscriber lands after it: Redis holds the
	// older value 1 while the node has 2. The writer settles what it wrote.
	o.mu.Lock()
	o.counts["app\x00news"] = 2
	delete(o.pending, "app\x00news")
	o.mu.Unlock()
	o.settle(map[string]int64{"app\x00news": 1, "app\x00sports": 1}, nil)
	o.mu.Lock()
	_, newsPending := o.pending["app\x00news"]
	_, sportsPending := o.pending["app\x00sports"]
	o.mu.Unlock()
	if !newsPending || sportsPending {
		t.Fatalf("re-marked: news %v (want true), sports %v (want false)", newsPending, sportsPending)
	}
	o.flush()
	if got := read("app\x00news"); got != "2" {
		t.Fatalf("after the next flush news=%q, want 2", got)
	}
}

// TestOccupancyResyncSoonRepairsALostWrite: a failover lost the last written-through count
// of a channel that does not change again (a promoted replica missed it) while the node
// stayed listed: a heartbeat alone leaves the stale value; after the registry's ResyncSoon
// (the server calls it on every restored subscription gap) the next heartbeat writes the
// count again.
func TestOccupancyResyncSoonRepairsALostWrite(t *testing.T) {
	ctx := context.Background()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	nodes := NewRedisNodes(rdb, RedisNodesOptions{NodeID: "n1"})
	o := NewRedisOccupancy(nodes, "private-toolmark.", nil)
	t.Cleanup(o.Close)
	const field = "app\x00private-toolmark.u1.c1"
	key := o.subsKey("n1", o.bucket(field))
	read := func() string {
		v, _ := rdb.HGet(ctx, key, field).Result()
		return v
	}
	if err := nodes.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	o.Subscribed("app", "private-toolmark.u1.c1", "1.1")
	if got := read(); got != "1" {
		t.Fatalf("written through: %q, want 1", got)
	}
	if err := rdb.HDel(ctx, key, field).Err(); err != nil { // the write the replica never got
		t.Fatal(err)
	}
	if err := nodes.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	if got := read(); got != "" {
		t.Fatalf("a heartbeat alone rewrote the count (%q): the case does not test ResyncSoon", got)
	}
	nodes.ResyncSoon()
	if err := nodes.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	if got := read(); got != "1" {
		t.Fatalf("after ResyncSoon and a heartbeat: %q, want 1", got)
	}
}
