package bridge

import (
	"strings"
	"testing"

	"github.com/reverbgo/reverbgo/config"
	"github.com/reverbgo/reverbgo/internal/testutil"
)

// subscriptionsOnly is a Sockets that offers only Subscriptions (a socket lookup without
// ConversationSockets): the page gate's fallback.
type subscriptionsOnly struct{ s *testutil.Sockets }

func (o subscriptionsOnly) Subscriptions(id string) (string, map[string]string, bool) {
	return o.s.Subscriptions(id)
}

// TestSocketConversation: the gate's lookup through ConversationSockets and through
// Subscriptions agree, table-driven over the sockets of the harness.
func TestSocketConversation(t *testing.T) {
	s := &testutil.Sockets{Hash: TokenHash, Prefix: ChannelPrefix}
	s.Set("1.1", "app1", "presence-room", "private-toolmark.u1.c1")
	s.Set("3.1", "app1", "private-toolmark.u1.c1", "private-toolmark.u2.c1")
	s.Set("5.1", "app1", "private-toolmark.u2.c1", "private-toolmark.bad!.c2", "private-toolmark.u3.c2")
	for _, tc := range []struct {
		socket, conv, user string
		n                  int
		ok                 bool
	}{
		{"1.1", "c1", "u1", 1, true},
		{"1.1", "c2", "", 0, true},
		{"3.1", "c1", "", 2, true},
		{"5.1", "c2", "u3", 1, true}, // a channel ParseChannel refuses does not count
		{"9.9", "c1", "", 0, false},
	} {
		for name, socks := range map[string]Sockets{"conversation": s, "subscriptions": subscriptionsOnly{s}} {
			app, user, hash, n, ok := socketConversation(socks, tc.socket, tc.conv)
			if ok != tc.ok || n != tc.n || (n == 1 && (user != tc.user || app != "app1" || hash != TokenHash(testutil.PageToken(tc.socket)))) {
				t.Errorf("%s: %s %s = %q %q %q %d %v", name, tc.socket, tc.conv, app, user, hash, n, ok)
			}
		}
	}
}

// TestPageTokenOKAllocs: the page token check, table-driven, and without allocating.
func TestPageTokenOKAllocs(t *testing.T) {
	app := &config.App{Toolmark: config.Toolmark{PageAuth: config.PageAuthToken}}
	want := TokenHash("tok")
	for _, tc := range []struct {
		presented, hash string
		ok              bool
	}{
		{"tok", want, true},
		{"tok2", want, false},
		{"", want, false},
		{"tok", "", false},
		{"tok", strings.ToUpper(want), false},
		{"tok", want[:63], false},
		{strings.Repeat("t", 257), TokenHash(strings.Repeat("t", 257)), false},
		{strings.Repeat("t", 256), TokenHash(strings.Repeat("t", 256)), true},
	} {
		if got := pageTokenOK(app, tc.presented, tc.hash); got != tc.ok {
			t.Errorf("pageTokenOK(%.20q, %.12q) = %v", tc.presented, tc.hash, got)
		}
	}
	if !pageTokenOK(&config.App{Toolmark: config.Toolmark{PageAuth: config.PageAuthSocketID}}, "", "") {
		t.Error("socket_id mode needs no token")
	}
	if raceEnabled {
		return
	}
	if n := testing.AllocsPerRun(100, func() { pageTokenOK(app, "tok", want) }); n != 0 {
		t.Errorf("pageTokenOK: %v allocations, want 0", n)
	}
	if n := testing.AllocsPerRun(100, func() { _ = TokenHash("tok") }); n != 1 {
		t.Errorf("TokenHash: %v allocations, want 1 (the string)", n)
	}
}
