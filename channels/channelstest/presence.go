// Package channelstest holds the shared test suites that every PresenceStore and Broker
// implementation must pass, run against memory and against a real Redis.
package channelstest

import (
	"context"
	"testing"

	"github.com/reverbgo/reverbgo/channels"
)

// RunPresence runs the PresenceStore contract against stores made by newStore. Each
// subtest gets a fresh store.
func RunPresence(t *testing.T, newStore func(t *testing.T) channels.PresenceStore) {
	ctx := context.Background()
	t.Run("first and last connection of a user", func(t *testing.T) {
		p := newStore(t)
		first, err := p.Join(ctx, "app", "presence-a", "1.1", channels.Member{UserID: "u1", Info: []byte(`{"n":1}`)})
		if err != nil || !first {
			t.Fatalf("first join: first=%v err=%v", first, err)
		}
		first, err = p.Join(ctx, "app", "presence-a", "1.2", channels.Member{UserID: "u1", Info: []byte(`{"n":1}`)})
		if err != nil || first {
			t.Fatalf("second socket of same user: first=%v err=%v", first, err)
		}
		last, err := p.Leave(ctx, "app", "presence-a", "1.1", "u1")
		if err != nil || last {
			t.Fatalf("leave one of two: last=%v err=%v", last, err)
		}
		last, err = p.Leave(ctx, "app", "presence-a", "1.2", "u1")
		if err != nil || !last {
			t.Fatalf("leave last: last=%v err=%v", last, err)
		}
		ms, err := p.Members(ctx, "app", "presence-a")
		if err != nil || len(ms) != 0 {
			t.Fatalf("members after all left: %v %v", ms, err)
		}
	})
	t.Run("members are distinct and sorted with info", func(t *testing.T) {
		p := newStore(t)
		for _, j := range []struct{ sock, user string }{{"1.1", "b"}, {"1.2", "a"}, {"1.3", "b"}} {
			if _, err := p.Join(ctx, "app", "presence-x", j.sock, channels.Member{UserID: j.user, Info: []byte(`{"id":"` + j.user + `"}`)}); err != nil {
				t.Fatal(err)
			}
		}
		ms, err := p.Members(ctx, "app", "presence-x")
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) != 2 || ms[0].UserID != "a" || ms[1].UserID != "b" || string(ms[1].Info) != `{"id":"b"}` {
			t.Fatalf("members = %+v", ms)
		}
	})
	t.Run("apps and channels are isolated", func(t *testing.T) {
		p := newStore(t)
		if _, err := p.Join(ctx, "app1", "presence-x", "1.1", channels.Member{UserID: "u", Info: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
		for _, k := range [][2]string{{"app2", "presence-x"}, {"app1", "presence-y"}} {
			ms, err := p.Members(ctx, k[0], k[1])
			if err != nil || len(ms) != 0 {
				t.Fatalf("%v sees %v (err %v)", k, ms, err)
			}
		}
		first, err := p.Join(ctx, "app2", "presence-x", "1.2", channels.Member{UserID: "u", Info: []byte(`{}`)})
		if err != nil || !first {
			t.Fatalf("same user in another app must be a first join: %v %v", first, err)
		}
	})
	t.Run("leave of an unknown socket is not a last leave", func(t *testing.T) {
		p := newStore(t)
		if _, err := p.Join(ctx, "app", "presence-z", "1.1", channels.Member{UserID: "u", Info: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
		last, err := p.Leave(ctx, "app", "presence-z", "9.9", "u")
		if err != nil || last {
			t.Fatalf("unknown socket leave: last=%v err=%v", last, err)
		}
		last, err = p.Leave(ctx, "app", "presence-z", "1.1", "nobody")
		if err != nil || last {
			t.Fatalf("unknown user leave: last=%v err=%v", last, err)
		}
	})
}
