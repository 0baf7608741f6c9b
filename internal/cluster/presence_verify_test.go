package cluster_test

import (
	"context"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/reverbgo/reverbgo/channels"
	"github.com/reverbgo/reverbgo/internal/cluster"
)

// snapshot is the hashes and sets of a miniredis (what a replica held at some moment).
type snapshot struct {
	hashes map[string]map[string]string
	sets   map[string][]string
}

func takeSnapshot(mr *miniredis.Miniredis) snapshot {
	s := snapshot{hashes: map[string]map[string]string{}, sets: map[string][]string{}}
	for _, k := range mr.Keys() {
		switch mr.Type(k) {
		case "hash":
			h := map[string]string{}
			fs, _ := mr.HKeys(k)
			for _, f := range fs {
				h[f] = mr.HGet(k, f)
			}
			s.hashes[k] = h
		case "set":
			s.sets[k], _ = mr.Members(k)
		}
	}
	return s
}

// restore makes the hashes and sets what s held (the node set, a zset, keeps its heartbeats).
func (s snapshot) restore(mr *miniredis.Miniredis) {
	for _, k := range mr.Keys() {
		if t := mr.Type(k); t == "hash" || t == "set" {
			mr.Del(k)
		}
	}
	for k, h := range s.hashes {
		for f, v := range h {
			mr.HSet(k, f, v)
		}
	}
	for k, ms := range s.sets {
		_, _ = mr.SetAdd(k, ms...)
	}
}

// TestPresenceVerifySoonRepairsAnEqualCountLoss: a failover to a replica that missed a
// leave and a join of this node leaves Redis with as many of its memberships as it has,
// but not the same ones (a ghost and a missing member). The heartbeat's count check cannot
// see it; VerifySoon (run when the node's subscriptions report a failover) makes the next
// heartbeat compare the members themselves and repair both.
func TestPresenceVerifySoonRepairsAnEqualCountLoss(t *testing.T) {
	ctx := context.Background()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	var gone []string
	p := newRedisPresence(t, rdb, "{v}:", "n1", 0, func(_, ch, user string) { gone = append(gone, ch+"/"+user) })
	if err := p.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Join(ctx, "app", "presence-a", "1.1", channels.Member{UserID: "ua", Info: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	replica := takeSnapshot(mr) // what the replica had when the master died
	if _, err := p.Join(ctx, "app", "presence-b", "1.2", channels.Member{UserID: "ub", Info: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Leave(ctx, "app", "presence-a", "1.1", "ua"); err != nil {
		t.Fatal(err)
	}
	replica.restore(mr) // promoted: ua still there, ub never joined
	users := func(ch string) int {
		ms, err := p.Members(ctx, "app", ch)
		if err != nil {
			t.Fatal(err)
		}
		return len(ms)
	}
	if err := p.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	if users("presence-a") != 1 || users("presence-b") != 0 {
		t.Fatalf("a plain heartbeat changed it (a %d, b %d): the test does not reproduce the loss", users("presence-a"), users("presence-b"))
	}
	p.VerifySoon()
	if err := p.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	if a, b := users("presence-a"), users("presence-b"); a != 0 || b != 1 {
		t.Fatalf("after VerifySoon and a heartbeat: presence-a %d members (want 0: the ghost left), presence-b %d (want 1)", a, b)
	}
	if len(gone) != 1 || gone[0] != "presence-a/ua" {
		t.Fatalf("announced gone %v, want the ghost presence-a/ua", gone)
	}
}

// TestPresenceVerifyLossResyncsTheOtherStates: a heartbeat's verify that finds memberships
// Redis lost (writes a failover dropped, seen without any ResyncSoon) has the registry
// rewrite the node's other per-node state in the same heartbeat: the written-through count
// the same failover dropped is back too.
func TestPresenceVerifyLossResyncsTheOtherStates(t *testing.T) {
	ctx := context.Background()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	p := newRedisPresence(t, rdb, "{v}:", "n1", 0, nil)
	o := cluster.NewRedisOccupancy(p, "private-toolmark.", nil)
	t.Cleanup(o.Close)
	if err := p.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Join(ctx, "app", "presence-a", "1.1", channels.Member{UserID: "ua", Info: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	o.Subscribed("app", "private-toolmark.u1.c1", "1.1")
	const field = "app\x00private-toolmark.u1.c1"
	memberships, subs := p.NodeBucketKey("n1", "presence", 0), p.NodeBucketKey("n1", "subs", 0)
	if ok, err := rdb.SIsMember(ctx, memberships, "app\x00presence-a\x001.1\x00ua").Result(); err != nil || !ok {
		t.Fatalf("membership in %s: %v %v", memberships, ok, err)
	}
	// The promoted replica lacks both writes.
	if err := rdb.Del(ctx, memberships).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.HDel(ctx, subs, field).Err(); err != nil {
		t.Fatal(err)
	}
	if err := p.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := rdb.SCard(ctx, memberships).Result(); err != nil || n != 1 {
		t.Fatalf("after the heartbeat the node holds %d memberships in Redis (%v), want 1", n, err)
	}
	if v, err := rdb.HGet(ctx, subs, field).Result(); err != nil || v != "1" {
		t.Fatalf("after the heartbeat the written-through count is %q (%v), want 1", v, err)
	}
}
