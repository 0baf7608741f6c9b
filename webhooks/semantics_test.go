package webhooks

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/reverbgo/reverbgo/config"
	"github.com/reverbgo/reverbgo/internal/testutil"
)

// TestPusherSemantics: the hold, cache_miss once per occupation and the subscription_count
// debounce, on the memory store, as a producer (the pusher server) emits them.
func TestPusherSemantics(t *testing.T) {
	type step struct {
		ev    Event
		sleep time.Duration // after the event
	}
	occ := func(ch string) Event { return Event{"name": ChannelOccupied, "channel": ch} }
	vac := func(ch string) Event { return Event{"name": ChannelVacated, "channel": ch} }
	add := func(u string) Event { return Event{"name": MemberAdded, "channel": "presence-c", "user_id": u} }
	rm := func(u string) Event { return Event{"name": MemberRemoved, "channel": "presence-c", "user_id": u} }
	miss := func(ch string) Event { return Event{"name": CacheMiss, "channel": ch} }
	count := func(ch string) Event { return Event{"name": SubscriptionCount, "channel": ch} }
	for _, tc := range []struct {
		name  string
		types []string
		steps []step
		want  []string
	}{
		{"reload within the hold sends nothing", nil,
			[]step{{ev: occ("c")}, {ev: vac("c"), sleep: 50 * time.Millisecond}, {ev: occ("c")}},
			[]string{"channel_occupied:c"}},
		{"vacated after the hold", nil,
			[]step{{ev: occ("c")}, {ev: vac("c")}},
			[]string{"channel_occupied:c", "channel_vacated:c"}},
		{"member rejoin within the hold sends nothing", nil,
			[]step{{ev: add("u")}, {ev: rm("u"), sleep: 50 * time.Millisecond}, {ev: add("u")}},
			[]string{"member_added:presence-c:u"}},
		{"member removed after the hold", []string{MemberRemoved},
			[]step{{ev: add("u")}, {ev: rm("u")}},
			[]string{"member_removed:presence-c:u"}},
		{"cache_miss once per occupation", nil,
			[]step{{ev: occ("cache-c")}, {ev: miss("cache-c")}, {ev: miss("cache-c")}, {ev: vac("cache-c"), sleep: 400 * time.Millisecond},
				{ev: occ("cache-c")}, {ev: miss("cache-c")}, {ev: miss("cache-c")}},
			[]string{"channel_occupied:cache-c", "cache_miss:cache-c", "channel_vacated:cache-c", "channel_occupied:cache-c", "cache_miss:cache-c"}},
		{"cache_miss alone still counts occupations", []string{CacheMiss},
			[]step{{ev: occ("cache-c")}, {ev: miss("cache-c")}, {ev: miss("cache-c")}, {ev: vac("cache-c"), sleep: 400 * time.Millisecond},
				{ev: occ("cache-c")}, {ev: miss("cache-c")}},
			[]string{"cache_miss:cache-c", "cache_miss:cache-c"}},
		{"subscription_count debounced", []string{SubscriptionCount},
			[]step{{ev: count("c")}, {ev: count("c")}, {ev: count("c")}, {ev: count("d")}, {ev: count("presence-c"), sleep: 400 * time.Millisecond}, {ev: count("c")}},
			[]string{"subscription_count:c=7", "subscription_count:d=7", "subscription_count:c=7"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rcv := newReceiver(t, nil)
			opts := testOptions(&syncBuffer{})
			opts.Hold = 200 * time.Millisecond
			opts.CountDebounce = 100 * time.Millisecond
			d := start(t, opts, app("1", "k", "s", hook(rcv.srv.URL, tc.types...)))
			d.SetCounter(func(context.Context, string, string) (int, error) { return 7, nil })
			for _, s := range tc.steps {
				d.Emit("1", s.ev)
				time.Sleep(s.sleep)
			}
			testutil.WaitFor(t, "settled", settled(d))
			got := []string{}
			for _, dv := range rcv.successful() {
				for _, e := range dv.Events {
					s := e["name"].(string) + ":" + e["channel"].(string)
					if u, ok := e["user_id"].(string); ok {
						s += ":" + u
					}
					if n, ok := e["subscription_count"].(float64); ok {
						s += "=" + string(rune('0'+int(n)))
					}
					got = append(got, s)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("delivered %v, want %v", got, tc.want)
			}
		})
	}
}

// TestWants: one lookup says whether a producer should build an event at all.
func TestWants(t *testing.T) {
	d := start(t, testOptions(&syncBuffer{}),
		app("all", "k", "s", hook("http://127.0.0.1:9/a")),
		app("vac", "k2", "s", hook("http://127.0.0.1:9/b", ChannelVacated)),
		app("miss", "k3", "s", hook("http://127.0.0.1:9/c", CacheMiss, SubscriptionCount)),
		app("rm", "k4", "s", hook("http://127.0.0.1:9/d", MemberRemoved)),
		config.App{ID: "none", Key: "k5", Secret: "s"},
	)
	for _, tc := range []struct {
		app, name string
		want      bool
	}{
		{"all", "client_event", true},
		{"all", SubscriptionCount, false}, // no counter set
		{"vac", ChannelOccupied, true},    // needed to know when the channel vacates
		{"vac", ChannelVacated, true},
		{"vac", MemberAdded, false},
		{"vac", "client_event", false},
		{"miss", ChannelOccupied, true}, // cache_miss is once per occupation
		{"miss", CacheMiss, true},
		{"rm", MemberAdded, true}, // a rejoin cancels the hold
		{"none", ChannelOccupied, false},
		{"unknown", "client_event", false},
	} {
		if got := d.Wants(tc.app, tc.name); got != tc.want {
			t.Errorf("Wants(%s, %s) = %v, want %v", tc.app, tc.name, got, tc.want)
		}
	}
	d.SetCounter(func(context.Context, string, string) (int, error) { return 0, nil })
	if !d.Wants("miss", SubscriptionCount) || !d.Wants("all", SubscriptionCount) || d.Wants("vac", SubscriptionCount) {
		t.Error("subscription_count is wanted where configured once a counter is set")
	}
}

// TestHeaders: configured headers go with every POST, and cannot replace the signature.
func TestHeaders(t *testing.T) {
	rcv := newReceiver(t, nil)
	wh := hook(rcv.srv.URL)
	wh.Headers = map[string]string{"authorization": "Bearer t0k", "X-Tenant": "acme", "X-Pusher-Signature": "forged"}
	d := start(t, testOptions(&syncBuffer{}), app("1", "k", "s", wh))
	d.Emit("1", ev("client_event", "a"))
	testutil.WaitFor(t, "delivered", func() bool { return len(rcv.successful()) == 1 })
	got := rcv.successful()[0]
	if got.Header.Get("Authorization") != "Bearer t0k" || got.Header.Get("X-Tenant") != "acme" {
		t.Errorf("headers = %v", got.Header)
	}
	if got.Header.Get("X-Pusher-Signature") != hmacHex("s", got.Body) {
		t.Error("a configured header replaced the signature")
	}
}

// TestWantsAllocatesNothing: the producers' check costs no allocation, wanted or not.
func TestWantsAllocatesNothing(t *testing.T) {
	d := start(t, testOptions(&syncBuffer{}), app("1", "k", "s", hook("http://127.0.0.1:9/a", ChannelOccupied)))
	if n := testing.AllocsPerRun(1000, func() {
		_ = d.Wants("1", ChannelOccupied)
		_ = d.Wants("1", "client_event")
		_ = d.Wants("other", SubscriptionCount)
	}); n != 0 {
		t.Fatalf("Wants allocates %v times per call", n)
	}
}

func BenchmarkWants(b *testing.B) {
	d := New(Options{})
	d.SetApps([]config.App{app("1", "k", "s", hook("http://127.0.0.1:9/a", ChannelOccupied))})
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			_ = d.Wants("2", ChannelOccupied)
		}
	})
}
