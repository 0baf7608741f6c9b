package pusher

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/reverbgo/reverbgo/config"
	"github.com/reverbgo/reverbgo/internal/testutil"
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
		c.SubscribeMsg(ch, privateAuth(ts.app.Key, ts.app.Secret, c.SocketID, ch), "")
		first := c.Next()
		if first.Event != ToolmarkSessionEvent || first.Channel != ch {
			t.Fatalf("first frame after subscribe: %s", first.Raw)
		}
		var d struct{ Token string }
		if err := json.Unmarshal([]byte(first.DataString(t)), &d); err != nil || len(d.Token) < 22 {
			t.Fatalf("session data %s: %v", first.Raw, err)
		}
		if next := c.Next(); next.Event != "pusher_internal:subscription_succeeded" || next.Channel != ch {
			t.Fatalf("after the session: %s", next.Raw)
		}
		return d.Token
	}
	a, b := ts.connect(t), ts.connect(t)
	ta := tokenOf(a)
	tb := tokenOf(b)
	if ta == tb {
		t.Fatal("two sockets got the same token")
	}
	a.ExpectNone(ToolmarkSessionEvent, "") // b's token never reaches a
	app, subs, ok := ts.s.Subscriptions(a.SocketID)
	if !ok || app != testAppID || subs[ch] != TokenHash(ta) {
		t.Fatalf("Subscriptions(a) = %q %v %v", app, subs, ok)
	}
	if again := tokenOf(a); again != ta {
		t.Fatal("a repeated subscribe changed the token")
	}
	a.Send(map[string]any{"event": "pusher:unsubscribe", "data": map[string]any{"channel": ch}})
	testutil.WaitFor(t, "unsubscribed", func() bool { _, subs, _ := ts.s.Subscriptions(a.SocketID); _, in := subs[ch]; return !in })
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
			c.SubscribeMsg("private-toolmark.u1.c1", privateAuth(ts.app.Key, ts.app.Secret, c.SocketID, "private-toolmark.u1.c1"), "")
			if ev := c.Next(); ev.Event != "pusher_internal:subscription_succeeded" {
				t.Fatalf("first frame: %s", ev.Raw)
			}
		})
	}
	ts := newServer(t, withApp(func(a *config.App) { a.Toolmark.Enabled = true }))
	c := ts.connect(t)
	c.SubscribeMsg("private-other", privateAuth(ts.app.Key, ts.app.Secret, c.SocketID, "private-other"), "")
	if ev := c.Next(); ev.Event != "pusher_internal:subscription_succeeded" {
		t.Fatalf("first frame: %s", ev.Raw)
	}
}

// parseToolmark reads private-toolmark.{user}.{conversation} as bridge.ParseChannel does
// (the bridge passes that function; pusher cannot import the bridge).
func parseToolmark(ch string) (string, string, bool) {
	rest, ok := strings.CutPrefix(ch, ToolmarkChannelPrefix)
	if !ok {
		return "", "", false
	}
	u, cv, ok := strings.Cut(rest, ".")
	return u, cv, ok && u != "" && cv != "" && !strings.Contains(cv, ".")
}

// TestSocketConversationAllocs: the page gate's lookup agrees with Subscriptions (app, the one
// channel of the conversation, its token hash), counts every channel of the conversation,
// and allocates only the one hash.
func TestSocketConversationAllocs(t *testing.T) {
	ts := newServer(t, withApp(func(a *config.App) { a.Toolmark.Enabled = true }))
	a := ts.connect(t)
	for _, ch := range []string{"private-toolmark.u1.c1", "private-toolmark.u1.c2", "private-toolmark.u2.c2", "private-other"} {
		a.SubscribeMsg(ch, privateAuth(ts.app.Key, ts.app.Secret, a.SocketID, ch), "")
		testutil.WaitFor(t, "subscribed "+ch, func() bool { _, subs, _ := ts.s.Subscriptions(a.SocketID); _, in := subs[ch]; return in })
	}
	_, subs, _ := ts.s.Subscriptions(a.SocketID)
	for _, tc := range []struct {
		conv, user, hash string
		n                int
	}{
		{"c1", "u1", subs["private-toolmark.u1.c1"], 1},
		{"c2", "", "", 2}, // two users' channels: the gate refuses it, only the count matters
		{"c3", "", "", 0},
	} {
		app, user, hash, n, ok := ts.s.SocketConversation(a.SocketID, tc.conv, parseToolmark)
		if !ok || app != testAppID || n != tc.n || (tc.n == 1 && (user != tc.user || hash != tc.hash || hash == "")) {
			t.Errorf("SocketConversation(%s) = %q %q %q %d %v", tc.conv, app, user, hash, n, ok)
		}
	}
	if _, _, _, _, ok := ts.s.SocketConversation("1.999", "c1", parseToolmark); ok {
		t.Error("an unknown socket was found")
	}
	if testutil.RaceEnabled {
		return
	}
	n := testing.AllocsPerRun(100, func() { _, _, _, _, _ = ts.s.SocketConversation(a.SocketID, "c1", parseToolmark) })
	m := testing.AllocsPerRun(100, func() { _, _, _ = ts.s.Subscriptions(a.SocketID) })
	if n != 1 {
		t.Errorf("SocketConversation: %v allocations, want 1 (the hash); Subscriptions makes %v", n, m)
	}
	t.Logf("allocations: SocketConversation %v, Subscriptions %v", n, m)
}
