package pusher

import (
	"testing"
	"time"

	"github.com/reverbgo/reverbgo/config"
)

func TestClientEventsOnPrivateChannel(t *testing.T) {
	ts := newServer(t)
	a, b, c := ts.connect(t), ts.connect(t), ts.connect(t)
	for _, cl := range []*client{a, b, c} {
		ts.subscribePrivate(cl, "private-chat")
	}
	tests := []struct {
		name string
		msg  string
		want string // data string the others receive
	}{
		{"object data", `{"event":"client-typing","channel":"private-chat","data":{"who":"a","n":1}}`, `{"who":"a","n":1}`},
		{"JSON-string data is decoded", `{"event":"client-typing","channel":"private-chat","data":"{\"who\":\"a\"}"}`, `{"who":"a"}`},
		{"plain string data", `{"event":"client-typing","channel":"private-chat","data":"hi \"there\""}`, `hi "there"`},
		{"no data", `{"event":"client-typing","channel":"private-chat"}`, `null`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a.t, b.t, c.t = t, t, t
			a.sendRaw(tc.msg)
			for _, other := range []*client{b, c} {
				ev := other.waitEvent("client-typing", "private-chat")
				if got := ev.dataString(t); got != tc.want {
					t.Errorf("data %q, want %q", got, tc.want)
				}
				if ev.UserID != "" {
					t.Errorf("user_id on a private channel: %s", ev.raw)
				}
			}
			a.expectNone("client-typing", "") // never echoed to the sender
		})
	}
}

func TestClientEventsOnPresenceCarryUserID(t *testing.T) {
	ts := newServer(t)
	a, b := ts.connect(t), ts.connect(t)
	ts.subscribePresence(a, "presence-chat", `{"user_id":42}`)
	ts.subscribePresence(b, "presence-chat", `{"user_id":"b"}`)
	a.sendRaw(`{"event":"client-wave","channel":"presence-chat","data":{}}`)
	ev := b.waitEvent("client-wave", "presence-chat")
	if ev.UserID != "42" {
		t.Errorf("user_id %q, want 42: %s", ev.UserID, ev.raw)
	}
	a.expectNone("client-wave", "")
}

func TestClientEventsRejected(t *testing.T) {
	tests := []struct {
		name    string
		app     func(*config.App)
		channel string // subscribed first unless notMember
		member  bool
		code    int
	}{
		{name: "public channel", channel: "public-x", member: true, code: 4301},
		{name: "encrypted channel", channel: "private-encrypted-x", member: true, code: 4301},
		{name: "not subscribed", channel: "private-x", code: 4301},
		{name: "app disables client events", app: func(a *config.App) { a.AcceptClientEventsFrom = config.ClientEventsNone }, channel: "private-x", member: true, code: 4301},
		{name: "encrypted channel even with all", app: func(a *config.App) { a.AcceptClientEventsFrom = config.ClientEventsAll }, channel: "private-encrypted-x", member: true, code: 4301},
		{name: "invalid channel", channel: "", code: 4200},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var opts []serverOpt
			if tc.app != nil {
				opts = append(opts, withApp(tc.app))
			}
			ts := newServer(t, opts...)
			sender, other := ts.connect(t), ts.connect(t)
			ch := tc.channel
			if ch == "" {
				ch = "bad name!"
			} else {
				if tc.member {
					subscribeAny(ts, sender, ch)
				}
				subscribeAny(ts, other, ch)
			}
			sender.send(map[string]any{"event": "client-x", "channel": ch, "data": map[string]any{}})
			if code, msg := sender.waitError(); code != tc.code {
				t.Errorf("code %d (%s), want %d", code, msg, tc.code)
			}
			other.expectNone("client-x", "")
			sender.ping()
		})
	}
}

func subscribeAny(ts *tserver, c *client, ch string) {
	if ch[0] == 'p' && len(ch) > 8 && ch[:8] == "private-" {
		ts.subscribePrivate(c, ch)
		return
	}
	c.subscribe(ch)
}

func TestClientEventsFromAll(t *testing.T) {
	ts := newServer(t, withApp(func(a *config.App) { a.AcceptClientEventsFrom = config.ClientEventsAll }))
	a, b := ts.connect(t), ts.connect(t)
	b.subscribe("public-x")
	ts.subscribePrivate(b, "private-y")
	// Allowed on public channels and without being subscribed.
	a.send(map[string]any{"event": "client-p", "channel": "public-x", "data": "1"})
	b.waitEvent("client-p", "public-x")
	a.send(map[string]any{"event": "client-q", "channel": "private-y", "data": "2"})
	b.waitEvent("client-q", "private-y")
	a.expectNone("pusher:error", "")
}

func TestClientEventRateLimit(t *testing.T) {
	clock := newFakeClock(time.Now())
	ts := newServer(t,
		withApp(func(a *config.App) { a.ClientEventRateLimit = intPtr(2) }),
		withOptions(func(o *Options) { o.Now = clock.Now }))
	a, b := ts.connect(t), ts.connect(t)
	ts.subscribePrivate(a, "private-r")
	ts.subscribePrivate(b, "private-r")
	send := func(n string) { a.send(map[string]any{"event": "client-" + n, "channel": "private-r", "data": n}) }
	send("1")
	send("2")
	send("3")
	if code, msg := a.waitError(); code != 4301 {
		t.Fatalf("third event in a second: %d (%s), want 4301", code, msg)
	}
	b.waitEvent("client-1", "")
	b.waitEvent("client-2", "")
	b.expectNone("client-3", "")
	// The limit is per second: the next second allows two more.
	clock.Advance(time.Second)
	send("4")
	b.waitEvent("client-4", "")
	a.expectNone("pusher:error", "")
}

func TestClientEventRateLimitDefaultIsTen(t *testing.T) {
	clock := newFakeClock(time.Now())
	ts := newServer(t, withOptions(func(o *Options) { o.Now = clock.Now }))
	a, b := ts.connect(t), ts.connect(t)
	ts.subscribePrivate(a, "private-r")
	ts.subscribePrivate(b, "private-r")
	for i := 0; i < 11; i++ {
		a.send(map[string]any{"event": "client-e", "channel": "private-r", "data": i})
	}
	if code, _ := a.waitError(); code != 4301 {
		t.Fatalf("code %d, want 4301", code)
	}
	for i := 0; i < 10; i++ {
		b.waitEvent("client-e", "")
	}
	b.expectNone("client-e", "")
}
