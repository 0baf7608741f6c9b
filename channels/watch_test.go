package channels_test

import (
	"slices"
	"sync"
	"testing"

	"github.com/reverbgo/reverbgo/channels"
	"github.com/reverbgo/reverbgo/channels/channelstest"
)

// observer is a fake channels.Occupancy that records the changes it hears.
type observer struct {
	mu  sync.Mutex
	got []string
}

func (o *observer) Subscribed(app, ch, socket string)   { o.add("+" + app + "/" + ch + "/" + socket) }
func (o *observer) Unsubscribed(app, ch, socket string) { o.add("-" + app + "/" + ch + "/" + socket) }
func (o *observer) add(s string)                        { o.mu.Lock(); o.got = append(o.got, s); o.mu.Unlock() }
func (o *observer) list() []string                      { o.mu.Lock(); defer o.mu.Unlock(); return slices.Clone(o.got) }

// TestWatch: the observer hears, before Subscribe and Unsubscribe return, exactly the real
// changes of the channels under its prefix, and SubscribeWaits follows Waits.
func TestWatch(t *testing.T) {
	for _, waits := range []bool{false, true} {
		obs := &observer{}
		r := channels.NewRegistry(channels.Options{Watch: channels.Watch{Prefix: "private-toolmark.", Observer: obs, Waits: waits}})
		a, b := &channelstest.Sink{ID: "1.1"}, &channelstest.Sink{ID: "1.2"}
		r.Subscribe("app", "private-toolmark.u.c", a)
		r.Subscribe("app", "private-toolmark.u.c", a) // repeated: no change
		r.Subscribe("app", "private-toolmark.u.c", b)
		r.Subscribe("app", "news", a)                       // not watched
		r.Unsubscribe("app", "private-toolmark.u.c", "9.9") // never subscribed: no change
		r.Unsubscribe("app", "private-toolmark.u.c", "1.1")
		r.Unsubscribe("app", "news", "1.1")
		want := []string{"+app/private-toolmark.u.c/1.1", "+app/private-toolmark.u.c/1.2", "-app/private-toolmark.u.c/1.1"}
		if got := obs.list(); !slices.Equal(got, want) {
			t.Fatalf("waits=%v: heard %q, want %q", waits, got, want)
		}
		if got := r.SubscribeWaits("private-toolmark.x"); got != waits {
			t.Fatalf("SubscribeWaits(watched) = %v with Waits %v", got, waits)
		}
		if r.SubscribeWaits("news") {
			t.Fatal("an unwatched channel waits")
		}
	}
}
