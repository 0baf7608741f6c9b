package api

import (
	"testing"

	"github.com/reverbgo/reverbgo/internal/testutil"
)

// terminate_connections closes every socket of the user (signed in or a presence member)
// with a pusher:error and a close frame 4009, and nobody else's.
func TestTerminateConnections(t *testing.T) {
	ts := newServer(t)
	u1a, u1b, u2 := ts.connect(t), ts.connect(t), ts.connect(t)
	ts.signin(u1a, `{"id":"u1"}`)
	ts.signin(u1b, `{"id":"u1"}`)
	ts.signin(u2, `{"id":"u2"}`)
	p1 := ts.connect(t) // presence user u1, not signed in
	ts.subscribePresence(p1, "presence-t", `{"user_id":"u1"}`)
	anon := ts.connect(t)
	anon.Subscribe("public")

	st, body := ts.api(t, "POST", "/apps/"+testAppID+"/users/u1/terminate_connections", nil, []byte(`{}`))
	if st != 200 || string(body) != "{}\n" {
		t.Fatalf("%d %s", st, body)
	}
	for i, c := range []*client{u1a, u1b, p1} {
		if code, _ := c.WaitError(); code != 4009 {
			t.Errorf("socket %d: pusher:error %d, want 4009", i, code)
		}
		if code := c.WaitClose(); code != 4009 {
			t.Errorf("socket %d: close %d, want 4009", i, code)
		}
	}
	u2.Ping()
	anon.Ping()
	testutil.WaitFor(t, "terminated sockets released", func() bool { return ts.s.ConnectionCount(testAppID) == 2 })

	// Unknown users are fine.
	if st, body := ts.api(t, "POST", "/apps/"+testAppID+"/users/nobody/terminate_connections", nil, []byte(`{}`)); st != 200 {
		t.Errorf("unknown user: %d %s", st, body)
	}
}
