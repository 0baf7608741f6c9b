package bridge_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/reverbgo/reverbgo/bridge"
	"github.com/reverbgo/reverbgo/internal/testutil"
)

// changeLog records the changes a subscriber saw.
type changeLog struct {
	mu  sync.Mutex
	got []bridge.ManifestChange
}

func (l *changeLog) add(c bridge.ManifestChange) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.got = append(l.got, c)
}

func (l *changeLog) wait(t *testing.T, n int) []bridge.ManifestChange {
	t.Helper()
	var out []bridge.ManifestChange
	testutil.WaitFor(t, fmt.Sprintf("%d manifest changes", n), func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		out = append(out[:0], l.got...)
		return len(out) >= n
	})
	return out
}

// TestManifestFeedStore: a stored manifest and a raised rev are announced; a manifest the store
// keeps out (same clientId, lower rev) and a changed from another clientId are not.
func TestManifestFeedStore(t *testing.T) {
	ctx := context.Background()
	feed := bridge.NewLocalFeed()
	var log changeLog
	cancel := feed.Subscribe(log.add)
	s := bridge.WithManifestFeed(bridge.NewMemoryStore(bridge.MemoryOptions{}), feed, func(app string) bool { return app != "quiet" })
	k := bridge.ConvKey{App: "a", User: "u", Conversation: "c"}
	steps := []func() error{
		func() error {
			_, err := s.PutManifest(ctx, k, bridge.Manifest{ClientID: "p1", Rev: 2}, time.Minute)
			return err
		},
		func() error {
			_, err := s.PutManifest(ctx, k, bridge.Manifest{ClientID: "p1", Rev: 1}, time.Minute)
			return err
		},
		func() error { _, err := s.ChangeRev(ctx, k, "p2", 5, time.Minute); return err },
		func() error { _, err := s.ChangeRev(ctx, k, "p1", 3, time.Minute); return err },
		func() error {
			_, err := s.PutManifest(ctx, k, bridge.Manifest{ClientID: "p2", Rev: 0}, time.Minute)
			return err
		},
	}
	quiet := bridge.ConvKey{App: "quiet", User: "u", Conversation: "c"}
	steps = append([]func() error{func() error {
		_, err := s.PutManifest(ctx, quiet, bridge.Manifest{ClientID: "p1", Rev: 1}, time.Minute) // filtered out
		return err
	}}, steps...)
	for i, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	want := []bridge.ManifestChange{{Key: k, ClientID: "p1", Rev: 2}, {Key: k, ClientID: "p1", Rev: 3}, {Key: k, ClientID: "p2", Rev: 0}}
	got := log.wait(t, len(want))
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("change %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	cancel()
	_, _ = s.PutManifest(ctx, k, bridge.Manifest{ClientID: "p3", Rev: 0}, time.Minute)
	if n := len(log.wait(t, len(want))); n != len(want) {
		t.Fatalf("a cancelled subscriber still got changes: %d", n)
	}
}

// TestRedisFeedAcrossNodes: a change published on one node's feed reaches another node's
// subscribers over Redis pub/sub; malformed payloads on the channel are dropped.
func TestRedisFeedAcrossNodes(t *testing.T) {
	mr := miniredis.RunT(t)
	ctx := context.Background()
	newFeed := func() *bridge.RedisFeed {
		rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
		t.Cleanup(func() { _ = rdb.Close() })
		f, err := bridge.NewRedisFeed(ctx, rdb, "feedtest:", nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.Close() })
		return f
	}
	a, b := newFeed(), newFeed()
	var log changeLog
	defer b.Subscribe(log.add)()
	mr.Publish("feedtest:manifests", `{"key":{"app":"a","user":"bad.user","conversation":"c"},"clientId":"p","rev":1}`)
	mr.Publish("feedtest:manifests", `not json`)
	c := bridge.ManifestChange{Key: bridge.ConvKey{App: "a", User: "u", Conversation: "c"}, ClientID: "p1", Rev: 4}
	a.Publish(ctx, c)
	if got := log.wait(t, 1); len(got) != 1 || got[0] != c {
		t.Fatalf("got %+v", got)
	}
}
