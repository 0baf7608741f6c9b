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
			a.T, b.T, c.T = t, t, t
			a.SendRaw(tc.msg)
			for _, other := range []*client{b, c} {
				ev := other.WaitEvent("client-typing", "private-chat")
				if got := ev.DataString(t); got != tc.want {
					t.Errorf("data %q, want %q", got, tc.want)
				}
				if ev.UserID != "" {
					t.Errorf("user_id on a private channel: %s", ev.Raw)
				}
			}
			a.ExpectNone("client-typing", "") // never echoed to the sender
		})
	}
}

func TestClientEventsOnPresenceCarryUserID(t *testing.T) {
	ts := newServer(t)
	a, b := ts.connect(t), ts.connect(t)
	ts.subscribePresence(a, "presence-chat", `{"user_id":42}`)
	ts.subscribePresence(b, "presence-chat", `{"user_id":"b"}`)
	a.SendRaw(`{"event":"client-wave","channel":"presence-chat","data":{}}`)
	ev := b.WaitEvent("client-wave", "presence-chat")
	if ev.UserID != "42" {
		t.Errorf("user_id %q, want 42: %s", ev.UserID, ev.Raw)
	}
	a.ExpectNone("client-wave", "")
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
			sender.Send(map[string]any{"event": "client-x", "channel": ch, "data": map[string]any{}})
			if code, msg := sender.WaitError(); code != tc.code {
				t.Errorf("code %d (%s), want %d", code, msg, tc.code)
			}
			other.ExpectNone("client-x", "")
			sender.Ping()
		})
	}
}

func subscribeAny(ts *tserver, c *client, ch string) {
	if ch[0] == 'p' && len(ch) > 8 && ch[:8] == "private-" {
		ts.subscribePrivate(c, ch)
		return
	}
	c.Subscribe(ch)
}

func TestClientEventsFromAll(t *testing.T) {
	ts := newServer(t, withApp(func(a *config.App) { a.AcceptClientEventsFrom = config.ClientEventsAll }))
	a, b := ts.connect(t), ts.connect(t)
	b.Subscribe("public-x")
	ts.subscribePrivate(b, "private-y")
	// Allowed on public channels and without being subscribed.
	a.Send(map[string]any{"event": "client-p", "channel": "public-x", "data": "1"})
	b.WaitEvent("client-p", "public-x")
	a.Send(map[string]any{"event": "client-q", "channel": "private-y", "data": "2"})
	b.WaitEvent("client-q", "private-y")
	a.ExpectNone("pusher:error", "")
}

func TestClientEventRateLimit(t *testing.T) {
	clock := newFakeClock(time.Now())
	ts := newServer(t,
		withApp(func(a *config.App) { a.ClientEventRateLimit = intPtr(2) }),
		withOptions(func(o *Options) { o.Now = clock.Now }))
	a, b := ts.connect(t), ts.connect(t)
	ts.subscribePrivate(a, "private-r")
	ts.subscribePrivate(b, "private-r")
	send := func(n string) { a.Send(map[string]any{"event": "client-" + n, "channel": "private-r", "data": n}) }
	send("1")
	send("2")
	send("3")
	if code, msg := a.WaitError(); code != 4301 {
		t.Fatalf("third event in a second: %d (%s), want 4301", code, msg)
	}
	b.WaitEvent("client-1", "")
	b.WaitEvent("client-2", "")
	b.ExpectNone("client-3", "")
	// The limit is per second: the next second allows two more.
	clock.Advance(time.Second)
	send("4")
	b.WaitEvent("client-4", "")
	a.ExpectNone("pusher:error", "")
}

func TestClientEventRateLimitDefaultIsTen(t *testing.T) {
	clock := newFakeClock(time.Now())
	ts := newServer(t, withOptions(func(o *Options) { o.Now = clock.Now }))
	a, b := ts.connect(t), ts.connect(t)
	ts.subscribePrivate(a, "private-r")
	ts.subscribePrivate(b, "private-r")
	for i := 0; i < 11; i++ {
		a.Send(map[string]any{"event": "client-e", "channel": "private-r", "data": i})
	}
	if code, _ := a.WaitError(); code != 4301 {
		t.Fatalf("code %d, want 4301", code)
	}
	for i := 0; i < 10; i++ {
		b.WaitEvent("client-e", "")
	}
	b.ExpectNone("client-e", "")
}
