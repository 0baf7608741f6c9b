package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/reverbgo/reverbgo/channels"
	"github.com/reverbgo/reverbgo/internal/cluster"
	"github.com/reverbgo/reverbgo/internal/testutil"
)

// back records OnBack calls.
type back struct {
	mu  sync.Mutex
	got []string
}

func (b *back) add(app, ch, socket string, m channels.Member) {
	b.mu.Lock()
	b.got = append(b.got, app+"/"+ch+"/"+m.UserID+"@"+socket)
	b.mu.Unlock()
}

func (b *back) list() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.got)
}

// TestRedisPresenceRejoinAnnouncesMemberAdded is fault 7 of issue 20: a node paused past
// NodeTimeout is reaped (its users announced gone), then wakes and joins its memberships
// again; each user the reap removed comes back through OnBack (member_added) once, however
// many sockets it has, and a user another node kept in the channel is not announced.
func TestRedisPresenceRejoinAnnouncesMemberAdded(t *testing.T) {
	ctx := context.Background()
	for _, be := range backends(t) {
		for _, l := range layouts() {
			t.Run(be.Name+"/"+l.name, func(t *testing.T) {
				ks := l.keys()
				const ttl = time.Second // 0.8 s of silence is death: margin for the joins below
				var g gone
				var b back
				paused := cluster.NewRedisPresence(be.Client(t), cluster.RedisPresenceOptions{Keys: ks, NodeID: "paused", NodeTimeout: ttl, OnBack: b.add})
				t.Cleanup(func() { _ = paused.Close() })
				if err := paused.Heartbeat(ctx); err != nil {
					t.Fatal(err)
				}
				survivor := newRedisPresenceIn(t, be.Client(t), ks, "survivor", ttl, g.add)
				if err := survivor.Heartbeat(ctx); err != nil {
					t.Fatal(err)
				}
				for _, j := range []struct {
					p          *cluster.RedisPresence
					sock, user string
				}{{survivor, "2.1", "u2"}, {paused, "1.1", "u1"}, {paused, "1.2", "u1"}, {paused, "1.3", "u2"}} {
					if _, err := j.p.Join(ctx, "app", "presence-r", j.sock, channels.Member{UserID: j.user, Info: []byte(`{}`)}); err != nil {
						t.Fatal(err)
					}
				}
				survivor.Start()
				testutil.WaitFor(t, "the paused node reaped", func() bool { return len(g.list()) == 1 })
				if err := paused.Heartbeat(ctx); err != nil { // it wakes up
					t.Fatal(err)
				}
				got := b.list()
				if len(got) != 1 || (got[0] != "app/presence-r/u1@1.1" && got[0] != "app/presence-r/u1@1.2") {
					t.Fatalf("announced back %q, want u1 once", got)
				}
				ms, err := survivor.Members(ctx, "app", "presence-r")
				if err != nil || len(ms) != 2 {
					t.Fatalf("members after the rejoin: %+v %v", ms, err)
				}
				if err := paused.Heartbeat(ctx); err != nil {
					t.Fatal(err)
				}
				if got := b.list(); len(got) != 1 {
					t.Fatalf("announced again on the next heartbeat: %q", got)
				}
			})
		}
	}
}

// TestRedisPresenceNoGhostAfterClose is the ghost-member half of issue 20's fault 6: joins
// still running while a node shuts down (Close reaps the node's own memberships) either
// land before the reap and are reaped with it, or are refused; none is left in Redis under
// a node no survivor lists, so once the node is gone the channel is empty for good.
func TestRedisPresenceNoGhostAfterClose(t *testing.T) {
	ctx := context.Background()
	for _, be := range backends(t) {
		for _, l := range layouts() {
			t.Run(be.Name+"/"+l.name, func(t *testing.T) {
				ks := l.keys()
				const ttl = 300 * time.Millisecond
				closing := cluster.NewRedisPresence(be.Client(t), cluster.RedisPresenceOptions{Keys: ks, NodeID: "closing", NodeTimeout: ttl})
				if err := closing.Heartbeat(ctx); err != nil {
					t.Fatal(err)
				}
				survivor := newRedisPresenceIn(t, be.Client(t), ks, "survivor", ttl, nil)
				survivor.Start()
				var wg sync.WaitGroup
				for i := 0; i < 50; i++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for j := 0; j < 20; j++ {
							_, _ = closing.Join(ctx, "app", "presence-r", fmt.Sprintf("1.%d", i*20+j), channels.Member{UserID: fmt.Sprint("u", i), Info: []byte(`{}`)})
						}
					}()
				}
				time.Sleep(time.Millisecond) // let some joins land first
				if err := closing.Close(); err != nil {
					t.Fatal(err)
				}
				wg.Wait()
				if _, err := closing.Join(ctx, "app", "presence-r", "1.9999", channels.Member{UserID: "late", Info: []byte(`{}`)}); !errors.Is(err, cluster.ErrPresenceClosed) {
					t.Fatalf("a join after Close: %v, want ErrPresenceClosed", err)
				}
				// A survivor's reaps (within NodeTimeout) would remove anything still owned by a
				// listed node; what is left after that is a ghost.
				time.Sleep(2 * ttl)
				testutil.WaitFor(t, "no member left", func() bool {
					ms, err := survivor.Members(ctx, "app", "presence-r")
					return err == nil && len(ms) == 0
				})
			})
		}
	}
}

// TestRedisPresenceLeaveDuringRestart: a user leaves while Redis is down, and Redis comes
// back empty (a restart without persistence). Nobody announced the leave, and the retry
// finds no membership to remove: the user is still reported gone (member_removed), or every
// client that saw it would keep a ghost; the node's other members are joined again.
func TestRedisPresenceLeaveDuringRestart(t *testing.T) {
	ctx := context.Background()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	var g gone
	var b back
	p := cluster.NewRedisPresence(rdb, cluster.RedisPresenceOptions{NodeID: "n1", OnGone: g.add, OnBack: b.add})
	t.Cleanup(func() { _ = p.Close() })
	for _, j := range []struct{ sock, user string }{{"1.1", "u1"}, {"1.2", "u2"}} {
		if _, err := p.Join(ctx, "app", "presence-r", j.sock, channels.Member{UserID: j.user, Info: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	addr := mr.Addr()
	mr.Close()
	if _, err := p.Leave(ctx, "app", "presence-r", "1.1", "u1"); err == nil {
		t.Fatal("leave during an outage reported no error")
	}
	if err := mr.StartAddr(addr); err != nil {
		t.Fatal(err)
	}
	mr.FlushAll() // it came back empty
	if err := p.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	if got := g.list(); !slices.Equal(got, []string{"app/presence-r/u1"}) {
		t.Fatalf("gone = %q, want u1", got)
	}
	if got := b.list(); !slices.Equal(got, []string{"app/presence-r/u2@1.2"}) {
		t.Fatalf("back = %q, want u2", got)
	}
	if ms, err := p.Members(ctx, "app", "presence-r"); err != nil || len(ms) != 1 || ms[0].UserID != "u2" {
		t.Fatalf("members: %+v %v", ms, err)
	}
}
