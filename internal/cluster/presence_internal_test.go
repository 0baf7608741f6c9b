package cluster

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/reverbgo/reverbgo/channels"
)

// TestPresenceHeartbeatRepairsLostWrites: after a failover that lost recent writes, Redis
// lacks a join this node made and still holds a membership this node has left; the next
// heartbeat joins the first again and removes the second (reporting its user as gone).
func TestPresenceHeartbeatRepairsLostWrites(t *testing.T) {
	ctx := context.Background()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	var gone, back []string
	p := NewRedisPresence(rdb, RedisPresenceOptions{NodeID: "n1", OnGone: func(_, _, u string) { gone = append(gone, u) },
		OnBack: func(_, _, _ string, m channels.Member) { back = append(back, m.UserID) }})
	if err := p.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	for _, j := range []struct{ sock, user string }{{"1.1", "u1"}, {"1.2", "u2"}} {
		if _, err := p.Join(ctx, "app", "presence-r", j.sock, channels.Member{UserID: j.user, Info: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	// u2's join is lost in Redis (the mirror keeps it) ...
	if _, err := p.leave(ctx, entry("app", "presence-r", "1.2", "u2")); err != nil {
		t.Fatal(err)
	}
	// ... and a membership the node no longer has survives there.
	ghost := entry("app", "presence-r", "1.3", "u3")
	keys := []string{p.users("app", "presence-r"), p.sockets("app", "presence-r"), p.counts("app", "presence-r"), p.NodeKey("n1", "presence"), p.nodeSet()}
	if err := joinScript.Run(ctx, rdb, keys, "1.3", "u3", "{}", ghost, "n1").Err(); err != nil {
		t.Fatal(err)
	}
	// The check compares counts (2 and 2 so far, different ones): a third membership whose
	// node-set entry alone was lost makes them differ, and must be re-added too.
	if _, err := p.Join(ctx, "app", "presence-r", "1.4", channels.Member{UserID: "u4", Info: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if err := rdb.SRem(ctx, p.NodeKey("n1", "presence"), entry("app", "presence-r", "1.4", "u4")).Err(); err != nil {
		t.Fatal(err)
	}
	if err := p.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	ms, err := p.Members(ctx, "app", "presence-r")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range ms {
		ids = append(ids, m.UserID)
	}
	if !slices.Equal(ids, []string{"u1", "u2", "u4"}) || !slices.Equal(gone, []string{"u3"}) {
		t.Fatalf("members %q, gone %q", ids, gone)
	}
	// u2 had left in Redis, so its return is announced (member_added); u4 had not (only
	// its node-set entry was lost), so nothing is.
	if !slices.Equal(back, []string{"u2"}) {
		t.Fatalf("announced back %q, want [u2]", back)
	}
	if n, err := rdb.SCard(ctx, p.NodeKey("n1", "presence")).Result(); err != nil || n != 3 {
		t.Fatalf("node set has %d entries (%v)", n, err)
	}
}

// TestPresenceLateJoinAfterReap is the ghost-member half of issue 20's fault 6: a join
// script that reaches Redis after a survivor reaped its node (a paused node's, already on
// the wire) is refused, so it cannot add a member under a node nobody will reap; the node's
// next Join registers the node again first, and what it adds is owned by a listed node.
func TestPresenceLateJoinAfterReap(t *testing.T) {
	ctx := context.Background()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	p := NewRedisPresence(rdb, RedisPresenceOptions{NodeID: "n1"})
	survivor := NewRedisPresence(rdb, RedisPresenceOptions{NodeID: "n2"})
	t.Cleanup(func() { _ = p.Close(); _ = survivor.Close() })
	if err := p.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	if err := survivor.nodes.reap(ctx, survivor.nodes.snapshot(), "n1", time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	m := channels.Member{UserID: "u1", Info: []byte(`{}`)}
	if _, err := p.join(ctx, entry("app", "presence-r", "1.1", "u1"), m); !errors.Is(err, errNodeUnknown) {
		t.Fatalf("a join landing after its node's reap: err %v, want errNodeUnknown", err)
	}
	if ms, err := p.Members(ctx, "app", "presence-r"); err != nil || len(ms) != 0 {
		t.Fatalf("members after the refused join: %+v %v", ms, err)
	}
	if first, err := p.Join(ctx, "app", "presence-r", "1.1", m); err != nil || !first {
		t.Fatalf("Join re-registering the node: first=%v err=%v", first, err)
	}
	if _, err := rdb.ZScore(ctx, p.nodeSet(), "n1").Result(); err != nil {
		t.Fatalf("the node owning the member is not listed for reaping: %v", err)
	}
}

// TestPresenceLeaveDuringWipeAnnouncesGone: a leave that could not reach Redis while it
// restarted empty is retried by the heartbeat; Redis no longer holds the membership, so
// the user is announced gone (member_removed) unless another of their sockets is held.
// Without it the other nodes' clients keep the member for good (seen in bench/chaos).
func TestPresenceLeaveDuringWipeAnnouncesGone(t *testing.T) {
	ctx := context.Background()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	var gone []string
	p := NewRedisPresence(rdb, RedisPresenceOptions{NodeID: "n1", OnGone: func(_, _, u string) { gone = append(gone, u) }})
	if err := p.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	for _, j := range []struct{ sock, user string }{{"1.1", "u1"}, {"1.2", "u2"}, {"1.3", "u2"}} {
		if _, err := p.Join(ctx, "app", "presence-r", j.sock, channels.Member{UserID: j.user, Info: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	// Redis goes away; u1 leaves, and so does one of u2's two sockets.
	mr.Close()
	for _, l := range []struct{ sock, user string }{{"1.1", "u1"}, {"1.2", "u2"}} {
		if _, err := p.Leave(ctx, "app", "presence-r", l.sock, l.user); err == nil {
			t.Fatal("leave succeeded with Redis down")
		}
	}
	// It comes back empty; the heartbeat rejoins what the node holds (u2's other socket)
	// and retries the leaves.
	mr.FlushAll()
	if err := mr.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := p.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(gone, []string{"u1"}) {
		t.Fatalf("announced gone %q, want [u1] (u2 still has a socket)", gone)
	}
	ms, err := p.Members(ctx, "app", "presence-r")
	if err != nil || len(ms) != 1 || ms[0].UserID != "u2" {
		t.Fatalf("members %+v (%v), want u2 alone", ms, err)
	}
}
