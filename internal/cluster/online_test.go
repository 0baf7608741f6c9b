package cluster_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/reverbgo/reverbgo/channels"
	"github.com/reverbgo/reverbgo/internal/cluster"
)

// TestOnlineChannel: the signed-in users' count (the watchlist's) works in every store,
// Redis included, whose node entries are NUL-separated: a NUL in the channel name would
// make every leave and reap miss.
func TestOnlineChannel(t *testing.T) {
	type store interface {
		channels.PresenceStore
		channels.PresenceLookup
	}
	stores := map[string]func(t *testing.T) store{
		"memory": func(t *testing.T) store { return channels.NewMemoryPresence() },
	}
	for _, be := range backends(t) {
		stores["redis/"+be.Name] = func(t *testing.T) store { return newRedisPresence(t, be.Client(t), testPrefix(), "", 0, nil) }
	}
	ctx := context.Background()
	ch := channels.OnlineChannel
	for name, mk := range stores {
		t.Run(name, func(t *testing.T) {
			p := mk(t)
			steps := []struct {
				op           string // join | leave
				socket, user string
				edge         bool   // first join / last leave
				present      []bool // of u1, u2 after the step
			}{
				{"join", "1.1", "u1", true, []bool{true, false}},
				{"join", "1.2", "u1", false, []bool{true, false}},
				{"join", "2.1", "u2", true, []bool{true, true}},
				{"leave", "1.1", "u1", false, []bool{true, true}},
				{"leave", "1.2", "u1", true, []bool{false, true}},
				{"leave", "1.2", "u1", false, []bool{false, true}}, // again: nothing
				{"leave", "2.1", "u2", true, []bool{false, false}},
			}
			for i, s := range steps {
				var edge bool
				var err error
				if s.op == "join" {
					edge, err = p.Join(ctx, "app", ch, s.socket, channels.Member{UserID: s.user})
				} else {
					edge, err = p.Leave(ctx, "app", ch, s.socket, s.user)
				}
				if err != nil || edge != s.edge {
					t.Fatalf("step %d %s %s/%s: edge %v err %v, want %v", i, s.op, s.socket, s.user, edge, err, s.edge)
				}
				got, err := p.Present(ctx, "app", ch, []string{"u1", "u2"})
				if err != nil || !slices.Equal(got, s.present) {
					t.Fatalf("step %d: present %v %v, want %v", i, got, err, s.present)
				}
			}
		})
	}
}

// TestOnlineChannelReaped: a dead node's signed-in users are removed by a survivor's reap
// and reported through OnGone, which is how their watchers learn they went offline.
func TestOnlineChannelReaped(t *testing.T) {
	ctx := context.Background()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	var g gone
	survivor := newRedisPresence(t, rdb, "", "n1", 0, g.add)
	dead := cluster.NewRedisPresence(rdb, cluster.RedisPresenceOptions{NodeID: "n2"})
	if _, err := dead.Join(ctx, "app", channels.OnlineChannel, "9.9", channels.Member{UserID: "u9"}); err != nil {
		t.Fatal(err)
	}
	if _, err := survivor.Reap(ctx, "n2", time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if got := g.list(); !slices.Equal(got, []string{"app/" + channels.OnlineChannel + "/u9"}) {
		t.Errorf("OnGone %q", got)
	}
	if on, err := survivor.Present(ctx, "app", channels.OnlineChannel, []string{"u9"}); err != nil || on[0] {
		t.Errorf("present after the reap: %v %v", on, err)
	}
}
