package pusher

import (
	"sync"
	"testing"
	"time"

	"github.com/reverbgo/reverbgo/channels"
)

// gatedRouter is a single-node broker that routes by interest and confirms a channel's
// routing only when the test says so (the Redis broker's PING round trip, held open).
type gatedRouter struct {
	*channels.MemoryBroker
	mu      sync.Mutex
	wanted  map[string]int
	waiting map[string][]func(bool)
	open    map[string]bool
}

func newGatedRouter() *gatedRouter {
	return &gatedRouter{wanted: map[string]int{}, waiting: map[string][]func(bool){}, open: map[string]bool{}}
}

func (g *gatedRouter) Want(app, ch string) {
	g.mu.Lock()
	g.wanted[ch]++
	g.mu.Unlock()
}

func (g *gatedRouter) Unwant(app, ch string) {
	g.mu.Lock()
	g.wanted[ch]--
	g.mu.Unlock()
}

func (g *gatedRouter) WhenRouted(app, ch string, fn func(bool)) {
	g.mu.Lock()
	if g.open[ch] {
		g.mu.Unlock()
		fn(true)
		return
	}
	g.waiting[ch] = append(g.waiting[ch], fn)
	g.mu.Unlock()
}

// confirm opens ch and runs its waiters, as a pong does.
func (g *gatedRouter) confirm(ch string) {
	g.mu.Lock()
	g.open[ch] = true
	fns := g.waiting[ch]
	delete(g.waiting, ch)
	g.mu.Unlock()
	for _, fn := range fns {
		fn(true)
	}
}

func (g *gatedRouter) wants(ch string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.wanted[ch]
}

var _ channels.Router = (*gatedRouter)(nil)

// subscription_succeeded (public, cache and presence channels alike) leaves only once the
// broker confirms the channel is routed to this node, first of the socket's output; other
// sockets are served meanwhile: the answer waits in the socket's write barrier, never on the
// goroutine that reads sockets. A second subscriber of a routed channel is answered at once.
func TestSubscribeAnsweredAfterRoutingConfirmed(t *testing.T) {
	g := newGatedRouter()
	var reg *channels.Registry
	g.MemoryBroker = channels.NewMemoryBroker(func(m channels.Message) int { return reg.DeliverLocal(m) })
	reg = channels.NewRegistry(channels.Options{Broker: g})
	ts := newServer(t, withOptions(func(o *Options) { o.Registry = reg }))
	cases := []struct {
		name, channel string
		subscribe     func(c *client, ch string)
	}{
		{"public", "news", func(c *client, ch string) { c.SubscribeMsg(ch, "", "") }},
		{"cache", "cache-news", func(c *client, ch string) { c.SubscribeMsg(ch, "", "") }},
		{"presence", "presence-room", func(c *client, ch string) {
			cd := `{"user_id":"u1"}`
			c.SubscribeMsg(ch, presenceAuth(ts.app.Key, ts.app.Secret, c.SocketID, ch, cd), cd)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := ts.connect(t)
			tc.subscribe(c, tc.channel)
			deadline := time.Now().Add(2 * time.Second)
			for g.wants(tc.channel) != 1 {
				if time.Now().After(deadline) {
					t.Fatal("the registry never told the router of the first subscriber")
				}
				time.Sleep(5 * time.Millisecond)
			}
			// Another socket is served meanwhile (no poller waits for the confirmation).
			other := ts.connect(t)
			other.Send(map[string]any{"event": "pusher:ping", "data": map[string]any{}})
			other.WaitEvent("pusher:pong", "")
			// This socket's own output waits in its barrier, its ping's pong included.
			c.Send(map[string]any{"event": "pusher:ping", "data": map[string]any{}})
			if ev, ok := c.TryNext(300 * time.Millisecond); ok {
				t.Fatalf("answered before the routing was confirmed: %s", ev.Event)
			}
			g.confirm(tc.channel)
			if ev, ok := c.TryNext(2 * time.Second); !ok || ev.Event != "pusher_internal:subscription_succeeded" {
				t.Fatalf("after the confirmation: got %q (%v), want subscription_succeeded first", ev.Event, ok)
			}
			c.WaitEvent("pusher:pong", "")
			// Routed now: a second socket's subscribe is answered at once.
			c2 := ts.connect(t)
			tc.subscribe(c2, tc.channel)
			c2.WaitEvent("pusher_internal:subscription_succeeded", tc.channel)
			if g.wants(tc.channel) != 1 {
				t.Fatalf("router told of %d first subscribers, want 1", g.wants(tc.channel))
			}
		})
	}
}
