package channels_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/reverbgo/reverbgo/channels"
	"github.com/reverbgo/reverbgo/channels/channelstest"
)

// sink is a fake subscriber that records what it was sent.
type sink struct {
	id     string
	mu     sync.Mutex
	frames [][]byte
}

func (s *sink) SocketID() string { return s.id }
func (s *sink) Send(f []byte) {
	s.mu.Lock()
	s.frames = append(s.frames, f)
	s.mu.Unlock()
}
func (s *sink) got() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, len(s.frames))
	for i, f := range s.frames {
		out[i] = string(f)
	}
	return out
}

func TestMemoryPresence(t *testing.T) {
	channelstest.RunPresence(t, func(*testing.T) channels.PresenceStore { return channels.NewMemoryPresence() })
}

func TestKindAndNames(t *testing.T) {
	cases := []struct {
		name  string
		kind  channels.Kind
		valid bool
	}{
		{"news", channels.Public, true},
		{"private-a", channels.Private, true},
		{"presence-room.1", channels.Presence, true},
		{"private-encrypted-x", channels.PrivateEncrypted, true},
		{"cache-x", channels.Cache, true},
		{"private-cache-x", channels.PrivateCache, true},
		{"presence-cache-x", channels.PresenceCache, true},
		{"private-encrypted-cache-x", channels.PrivateEncryptedCache, true},
		{"#server-to-user-42", channels.ServerToUser, true},
		{"a=b@c,d;e", channels.Public, true},
		{"", channels.Public, false},
		{"#", channels.Public, false},
		{"has space", channels.Public, false},
		{"a#b", channels.Public, false},
		{"ünïcode", channels.Public, false},
		{string(make([]byte, 165)), channels.Public, false},
	}
	for _, c := range cases {
		if got := channels.ValidName(c.name); got != c.valid {
			t.Errorf("ValidName(%q) = %v, want %v", c.name, got, c.valid)
		}
		if c.valid && channels.KindOf(c.name) != c.kind {
			t.Errorf("KindOf(%q) = %v, want %v", c.name, channels.KindOf(c.name), c.kind)
		}
	}
}

func TestDeliverSkipsExceptAndIsolatesApps(t *testing.T) {
	r := channels.NewRegistry(channels.Options{})
	a, b, other := &sink{id: "1.1"}, &sink{id: "1.2"}, &sink{id: "1.3"}
	r.Subscribe("app1", "news", a)
	r.Subscribe("app1", "news", b)
	r.Subscribe("app2", "news", other)
	if err := r.Publish(context.Background(), channels.Message{AppID: "app1", Channel: "news", Frame: []byte("F"), Except: "1.1"}); err != nil {
		t.Fatal(err)
	}
	if len(a.got()) != 0 || len(b.got()) != 1 || len(other.got()) != 0 {
		t.Fatalf("a=%v b=%v other=%v", a.got(), b.got(), other.got())
	}
}

func TestSubscribeUnsubscribeCounts(t *testing.T) {
	r := channels.NewRegistry(channels.Options{})
	a := &sink{id: "1.1"}
	if n, added := r.Subscribe("app", "c", a); n != 1 || !added {
		t.Fatalf("subscribe: %d %v", n, added)
	}
	if n, added := r.Subscribe("app", "c", a); n != 1 || added {
		t.Fatalf("repeated subscribe: %d %v", n, added)
	}
	if got := r.Channels("app", ""); len(got) != 1 || got[0].Name != "c" || got[0].SubscriptionCount != 1 {
		t.Fatalf("channels: %+v", got)
	}
	if n, removed := r.Unsubscribe("app", "c", "1.1"); n != 0 || !removed {
		t.Fatalf("unsubscribe: %d %v", n, removed)
	}
	if _, removed := r.Unsubscribe("app", "c", "1.1"); removed {
		t.Fatal("second unsubscribe removed something")
	}
	if got := r.Channels("app", ""); len(got) != 0 {
		t.Fatalf("empty channel still listed: %+v", got)
	}
}

func TestCacheChannelKeepsLastFrame(t *testing.T) {
	r := channels.NewRegistry(channels.Options{})
	if _, ok := r.CachedFrame("app", "cache-x"); ok {
		t.Fatal("cache hit before any publish")
	}
	for _, f := range []string{"one", "two"} {
		_ = r.Publish(context.Background(), channels.Message{AppID: "app", Channel: "cache-x", Frame: []byte(f), Cacheable: true})
	}
	// Client and pusher_internal events are relayed but never become the replay.
	_ = r.Publish(context.Background(), channels.Message{AppID: "app", Channel: "cache-x", Frame: []byte("client")})
	_ = r.Publish(context.Background(), channels.Message{AppID: "app", Channel: "plain", Frame: []byte("x")})
	if f, ok := r.CachedFrame("app", "cache-x"); !ok || string(f) != "two" {
		t.Fatalf("cached = %q %v", f, ok)
	}
	if _, ok := r.CachedFrame("app", "plain"); ok {
		t.Fatal("non-cache channel cached")
	}
	if _, ok := r.CachedFrame("app2", "cache-x"); ok {
		t.Fatal("cache leaked across apps")
	}
}

// countingSub counts deliveries without storing them, for the benchmark.
type countingSub struct {
	id string
	n  atomic.Int64
}

func (c *countingSub) SocketID() string { return c.id }
func (c *countingSub) Send([]byte)      { c.n.Add(1) }

func TestConcurrentSubscribeAndDeliver(t *testing.T) {
	r := channels.NewRegistry(channels.Options{})
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				s := &countingSub{id: fmt.Sprintf("%d.%d", w, i)}
				r.Subscribe("app", "hot", s)
				r.DeliverLocal(channels.Message{AppID: "app", Channel: "hot", Frame: []byte("x")})
				r.Unsubscribe("app", "hot", s.id)
			}
		}(w)
	}
	wg.Wait()
	if n := r.SubscriptionCount("app", "hot"); n != 0 {
		t.Fatalf("count after churn = %d", n)
	}
}

// BenchmarkBroadcast10k measures one publish fanned out to 10,000 local subscribers: the
// frame is built once and only queued per subscriber.
func BenchmarkBroadcast10k(b *testing.B) {
	r := channels.NewRegistry(channels.Options{})
	subs := make([]*countingSub, 10000)
	for i := range subs {
		subs[i] = &countingSub{id: fmt.Sprintf("1.%d", i)}
		r.Subscribe("app", "bench", subs[i])
	}
	frame := []byte(`{"event":"e","channel":"bench","data":"{}"}`)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		_ = r.Publish(ctx, channels.Message{AppID: "app", Channel: "bench", Frame: frame})
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/10000, "ns/delivery")
}
