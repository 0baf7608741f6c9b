package channels_test

import (
	"testing"

	"github.com/reverbgo/reverbgo/channels"
)

func TestKindString(t *testing.T) {
	for name, want := range map[string]string{
		"x": "public", "private-x": "private", "presence-x": "presence",
		"private-encrypted-x": "private-encrypted", "private-encrypted-cache-x": "private-encrypted-cache",
		"cache-x": "cache", "private-cache-x": "private-cache", "presence-cache-x": "presence-cache",
		"#server-to-user-1": "server-to-user",
	} {
		if got := channels.KindOf(name).String(); got != want {
			t.Errorf("KindOf(%q).String() = %q, want %q", name, got, want)
		}
	}
}

func TestDeliveriesAndCensus(t *testing.T) {
	r := channels.NewRegistry(channels.Options{})
	a, b, c := &sink{id: "1.1"}, &sink{id: "1.2"}, &sink{id: "1.3"}
	r.Subscribe("app", "news", a)
	r.Subscribe("app", "news", b)
	r.Subscribe("app", "presence-room", c)
	r.Subscribe("other", "private-x", a)
	r.Subscribe("app", channels.TerminateChannel, c) // internal: never counted

	if n := r.DeliverLocal(channels.Message{AppID: "app", Channel: "news", Frame: []byte("12345")}); n != 2 {
		t.Fatalf("delivered to %d", n)
	}
	r.DeliverLocal(channels.Message{AppID: "app", Channel: "news", Frame: []byte("123"), Except: "1.1"})
	r.DeliverLocal(channels.Message{AppID: "app", Channel: "empty", Frame: []byte("123")})
	frames, bytes := r.Deliveries()
	if frames != 3 || bytes != 2*5+3 {
		t.Fatalf("Deliveries() = %d frames, %d bytes; want 3, 13", frames, bytes)
	}

	occ := r.Census()
	app := occ["app"]
	if app == nil || app.Channels[channels.Public] != 1 || app.Subscriptions[channels.Public] != 2 ||
		app.Channels[channels.Presence] != 1 || app.Subscriptions[channels.Presence] != 1 {
		t.Fatalf("app occupancy = %+v", app)
	}
	if o := occ["other"]; o == nil || o.Subscriptions[channels.Private] != 1 {
		t.Fatalf("other occupancy = %+v", o)
	}
	r.Unsubscribe("app", "presence-room", "1.3")
	if got := r.Census()["app"].Channels[channels.Presence]; got != 0 {
		t.Fatalf("presence channels after leave = %d", got)
	}
}
