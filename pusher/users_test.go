package pusher

import (
	"github.com/reverbgo/reverbgo/internal/testutil"
	"testing"

	"github.com/reverbgo/reverbgo/auth"
	"github.com/reverbgo/reverbgo/config"
)

func TestSignin(t *testing.T) {
	ts := newServer(t)
	a := ts.connect(t)
	userData := `{"id":"u1","name":"Ann \"A\"","watchlist":["u2"]}`
	var d struct {
		UserData string `json:"user_data"`
	}
	ts.signin(a, userData).DataInto(t, &d)
	if d.UserData != userData {
		t.Errorf("signin_success user_data %q, want %q", d.UserData, userData)
	}

	// Only the signed-in user may subscribe to its server-to-user channel, with no auth.
	a.Subscribe("#server-to-user-u1")
	ts.trigger(t, "#server-to-user-u1", "notice", `{"hello":"u1"}`)
	if got := a.WaitEvent("notice", "#server-to-user-u1").DataString(t); got != `{"hello":"u1"}` {
		t.Errorf("data %q", got)
	}

	anon := ts.connect(t)
	anon.SubscribeMsg("#server-to-user-u1", "", "")
	if code, _ := anon.WaitError(); code != 4009 {
		t.Errorf("anonymous subscribe: %d, want 4009", code)
	}
	other := ts.connect(t)
	ts.signin(other, `{"id":"u2"}`)
	other.SubscribeMsg("#server-to-user-u1", "", "")
	if code, _ := other.WaitError(); code != 4009 {
		t.Errorf("other user's subscribe: %d, want 4009", code)
	}
	// A channel signature does not open it either.
	other.SubscribeMsg("#server-to-user-u1", privateAuth(testKey, testSecret, other.SocketID, "#server-to-user-u1"), "")
	if code, _ := other.WaitError(); code != 4009 {
		t.Errorf("signed subscribe: %d, want 4009", code)
	}
	ts.trigger(t, "#server-to-user-u1", "private-note", "x")
	anon.ExpectNone("private-note", "")
	other.ExpectNone("private-note", "")

	// Client events are not allowed there.
	a.Send(map[string]any{"event": "client-x", "channel": "#server-to-user-u1", "data": "x"})
	if code, _ := a.WaitError(); code != 4301 {
		t.Errorf("client event on server-to-user: %d, want 4301", code)
	}
}

func TestSigninRejected(t *testing.T) {
	ts := newServer(t)
	tests := []struct {
		name     string
		userData string
		auth     func(socketID, userData string) string
		code     int
	}{
		{"bad signature", `{"id":"u1"}`, func(s, u string) string { return testKey + ":" + auth.SigninSignature("wrong", s, u) }, 4009},
		{"channel signature", `{"id":"u1"}`, func(s, u string) string { return privateAuth(testKey, testSecret, s, u) }, 4009},
		{"no id", `{"name":"x"}`, func(s, u string) string { return testKey + ":" + auth.SigninSignature(testSecret, s, u) }, 4009},
		{"user_data not JSON", `nope`, func(s, u string) string { return testKey + ":" + auth.SigninSignature(testSecret, s, u) }, 4009},
		{"no auth", `{"id":"u1"}`, func(string, string) string { return "" }, 4200},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := ts.connect(t)
			c.Send(map[string]any{"event": "pusher:signin", "data": map[string]any{"auth": tc.auth(c.SocketID, tc.userData), "user_data": tc.userData}})
			if code, msg := c.WaitError(); code != tc.code {
				t.Errorf("code %d (%s), want %d", code, msg, tc.code)
			}
			c.ExpectNone("pusher:signin_success", "")
			c.SubscribeMsg("#server-to-user-u1", "", "")
			if code, _ := c.WaitError(); code != 4009 {
				t.Errorf("server-to-user after failed signin: %d", code)
			}
		})
	}
	t.Run("user authentication disabled", func(t *testing.T) {
		ts := newServer(t, withApp(func(a *config.App) { a.EnableUserAuthentication = boolPtr(false) }))
		c := ts.connect(t)
		ud := `{"id":"u1"}`
		c.Send(map[string]any{"event": "pusher:signin", "data": map[string]any{"auth": testKey + ":" + auth.SigninSignature(testSecret, c.SocketID, ud), "user_data": ud}})
		if code, _ := c.WaitError(); code != 4009 {
			t.Errorf("code %d, want 4009", code)
		}
		c.ExpectNone("pusher:signin_success", "")
	})
}

// A socket's user bindings (for terminate_connections) must follow its memberships: none
// is left behind once it unsubscribes or closes, and one left channel does not unbind a
// user the socket still is.
func TestUserBindingsFollowMemberships(t *testing.T) {
	ts := newServer(t)
	bound := func(user string, c *client) bool {
		for _, conn := range ts.s.sockets.userConns(testAppID, user) {
			if conn.socketID == c.SocketID {
				return true
			}
		}
		return false
	}
	c := ts.connect(t)
	ts.subscribePresence(c, "presence-a", `{"user_id":"u1"}`)
	ts.subscribePresence(c, "presence-b", `{"user_id":"u1"}`)
	c.SendRaw(`{"event":"pusher:unsubscribe","data":{"channel":"presence-a"}}`)
	c.Ping() // the unsubscribe has been handled
	if !bound("u1", c) {
		t.Error("still in presence-b as u1, but unbound")
	}
	c.SendRaw(`{"event":"pusher:unsubscribe","data":{"channel":"presence-b"}}`)
	c.Ping()
	if bound("u1", c) {
		t.Error("left every presence channel, still bound as u1")
	}

	// Signing in as another user keeps the presence binding of the first one.
	ts.subscribePresence(c, "presence-a", `{"user_id":"p"}`)
	ts.signin(c, `{"id":"p"}`)
	ts.signin(c, `{"id":"q"}`)
	if !bound("p", c) || !bound("q", c) {
		t.Errorf("bindings after signin switch: p=%v q=%v", bound("p", c), bound("q", c))
	}

	_ = c.WS.Close()
	testutil.WaitFor(t, "socket released", func() bool { return ts.s.ConnectionCount(testAppID) == 0 })
	ts.s.sockets.usersMu.Lock()
	n := len(ts.s.sockets.users)
	ts.s.sockets.usersMu.Unlock()
	if n != 0 {
		t.Errorf("%d user bindings left after every socket closed", n)
	}
}
