package pusher

import (
	"encoding/json"
	"github.com/reverbgo/reverbgo/internal/testutil"
	"testing"

	"github.com/reverbgo/reverbgo/config"
)

// TestToolmarkSession: the authorized subscription to a toolmark channel receives, on that
// channel and before subscription_succeeded, a toolmark.session token that the socket
// lookup returns hashed; a second socket on the same channel gets its own token and not the
// first one's; a repeated subscribe keeps the token; unsubscribing drops it.
func TestToolmarkSession(t *testing.T) {
	ts := newServer(t, withApp(func(a *config.App) { a.Toolmark.Enabled = true }))
	const ch = "private-toolmark.u1.c1"
	tokenOf := func(c *client) string {
		t.Helper()
		c.subscribeMsg(ch, privateAuth(ts.app.Key, ts.app.Secret, c.socketID, ch), "")
		first := c.next()
		if first.Event != ToolmarkSessionEvent || first.Channel != ch {
			t.Fatalf("first frame after subscribe: %s", first.raw)
		}
		var d struct{ Token string }
		if err := json.Unmarshal([]byte(first.dataString(t)), &d); err != nil || len(d.Token) < 22 {
			t.Fatalf("session data %s: %v", first.raw, err)
		}
		if next := c.next(); next.Event != "pusher_internal:subscription_succeeded" || next.Channel != ch {
			t.Fatalf("after the session: %s", next.raw)
		}
		return d.Token
	}
	a, b := ts.connect(t), ts.connect(t)
	ta := tokenOf(a)
	tb := tokenOf(b)
	if ta == tb {
		t.Fatal("two sockets got the same token")
	}
	a.expectNone(ToolmarkSessionEvent, "") // b's token never reaches a
	app, subs, ok := ts.s.Subscriptions(a.socketID)
	if !ok || app != testAppID || subs[ch] != TokenHash(ta) {
		t.Fatalf("Subscriptions(a) = %q %v %v", app, subs, ok)
	}
	if again := tokenOf(a); again != ta {
		t.Fatal("a repeated subscribe changed the token")
	}
	a.send(map[string]any{"event": "pusher:unsubscribe", "data": map[string]any{"channel": ch}})
	testutil.WaitFor(t, "unsubscribed", func() bool { _, subs, _ := ts.s.Subscriptions(a.socketID); _, in := subs[ch]; return !in })
	if again := tokenOf(a); again == ta {
		t.Fatal("a new subscription reused the token of the one that ended")
	}
}

// TestToolmarkSessionOff: socket_id mode, a disabled bridge and other channels send none.
func TestToolmarkSessionOff(t *testing.T) {
	for name, mod := range map[string]func(*config.App){
		"socket_id": func(a *config.App) { a.Toolmark.Enabled, a.Toolmark.PageAuth = true, config.PageAuthSocketID },
		"disabled":  func(a *config.App) {},
	} {
		t.Run(name, func(t *testing.T) {
			ts := newServer(t, withApp(mod))
			c := ts.connect(t)
			c.subscribeMsg("private-toolmark.u1.c1", privateAuth(ts.app.Key, ts.app.Secret, c.socketID, "private-toolmark.u1.c1"), "")
			if ev := c.next(); ev.Event != "pusher_internal:subscription_succeeded" {
				t.Fatalf("first frame: %s", ev.raw)
			}
		})
	}
	ts := newServer(t, withApp(func(a *config.App) { a.Toolmark.Enabled = true }))
	c := ts.connect(t)
	c.subscribeMsg("private-other", privateAuth(ts.app.Key, ts.app.Secret, c.socketID, "private-other"), "")
	if ev := c.next(); ev.Event != "pusher_internal:subscription_succeeded" {
		t.Fatalf("first frame: %s", ev.raw)
	}
}
