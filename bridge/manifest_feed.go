package bridge

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/reverbgo/reverbgo/internal/cluster"
	"github.com/reverbgo/reverbgo/internal/redisx"
)

// ManifestChange says that the manifest of Key was stored or its rev raised, to ClientID/Rev.
// A change may repeat an earlier one (the same manifest posted twice); subscribers compare.
type ManifestChange struct {
	Key      ConvKey `json:"key"`
	ClientID string  `json:"clientId"`
	Rev      int64   `json:"rev"`
}

// ManifestFeed carries manifest changes to every node, so that whoever watches a conversation
// (an MCP session waiting for tools/list_changed) learns of a manifest another node received.
// Delivery is best effort: a lost change only delays a client's next list.
type ManifestFeed interface {
	// Publish announces a change; it must not block for long (it runs in the page's POST).
	Publish(ctx context.Context, c ManifestChange)
	// Subscribe calls fn for every change until cancel is called. fn must not block.
	Subscribe(fn func(ManifestChange)) (cancel func())
}

// WithManifestFeed wraps s so that every manifest it stores and every rev it raises is
// published on feed. It is how the bridge's page endpoint feeds the MCP server without either
// knowing of the other. only, if not nil, limits the changes published to the apps it accepts
// (those with MCP on), so that an app without MCP pays nothing for it.
func WithManifestFeed(s Store, feed ManifestFeed, only func(appID string) bool) Store {
	return &feedStore{Store: s, feed: feed, only: only}
}

type feedStore struct {
	Store
	feed ManifestFeed
	only func(appID string) bool
}

func (f *feedStore) wanted(app string) bool { return f.only == nil || f.only(app) }

func (f *feedStore) PutManifest(ctx context.Context, k ConvKey, m Manifest, ttl time.Duration) (bool, error) {
	stored, err := f.Store.PutManifest(ctx, k, m, ttl)
	if err == nil && stored && f.wanted(k.App) {
		f.feed.Publish(ctx, ManifestChange{Key: k, ClientID: m.ClientID, Rev: m.Rev})
	}
	return stored, err
}

func (f *feedStore) ChangeRev(ctx context.Context, k ConvKey, clientID string, rev int64, ttl time.Duration) (bool, error) {
	current, err := f.Store.ChangeRev(ctx, k, clientID, rev, ttl)
	if err == nil && current && f.wanted(k.App) {
		// The stored rev is max(old, rev); a lower rev is announced too and subscribers that
		// already saw a higher one ignore it.
		f.feed.Publish(ctx, ManifestChange{Key: k, ClientID: clientID, Rev: rev})
	}
	return current, err
}

// LocalFeed is the single-node ManifestFeed: changes go straight to this process's subscribers.
type LocalFeed struct {
	mu   sync.Mutex
	next int
	subs map[int]func(ManifestChange)
}

// NewLocalFeed returns an empty in-process feed.
func NewLocalFeed() *LocalFeed { return &LocalFeed{subs: map[int]func(ManifestChange){}} }

// Publish implements ManifestFeed.
func (l *LocalFeed) Publish(_ context.Context, c ManifestChange) {
	l.mu.Lock()
	fns := make([]func(ManifestChange), 0, len(l.subs))
	for _, fn := range l.subs {
		fns = append(fns, fn)
	}
	l.mu.Unlock()
	for _, fn := range fns {
		fn(c)
	}
}

// Subscribe implements ManifestFeed.
func (l *LocalFeed) Subscribe(fn func(ManifestChange)) func() {
	l.mu.Lock()
	defer l.mu.Unlock()
	id := l.next
	l.next++
	l.subs[id] = fn
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		delete(l.subs, id)
	}
}

// RedisFeed is the cluster ManifestFeed: one pub/sub channel ({prefix}manifests) next to the
// RedisStore's results channel, one subscription per node, fanned out to local subscribers.
type RedisFeed struct {
	rc      *redisx.Client
	wrapped bool // rc wraps the caller's client: Close closes its Subs
	channel string
	log     *slog.Logger
	sub     *redisx.Sub // the node's pub/sub loop on the manifests channel
	local   *LocalFeed
}

// NewRedisFeed subscribes to the manifests channel (prefix as for NewRedisStore, default
// "reverbgo:toolmark:"). Close releases the subscription; the client stays the caller's.
func NewRedisFeed(ctx context.Context, rdb redis.UniversalClient, prefix string, log *slog.Logger) (*RedisFeed, error) {
	if prefix == "" {
		prefix = "reverbgo:toolmark:"
	}
	if log == nil {
		log = slog.Default()
	}
	f := &RedisFeed{channel: cluster.NewToolmarkKeys(prefix).Manifests(), log: log, local: NewLocalFeed()}
	f.rc, f.wrapped = redisx.Of(rdb, log)
	// Sharded on Redis Cluster, like RedisStore's wake-ups.
	sub, err := f.rc.Fixed(ctx, "toolmark-manifests", f.channel, f.dispatch)
	if err != nil {
		if f.wrapped {
			f.rc.CloseSubs()
		}
		return nil, err
	}
	f.sub = sub
	return f, nil
}

func (f *RedisFeed) dispatch(payload string) {
	var c ManifestChange
	if json.Unmarshal([]byte(payload), &c) != nil || !ValidChannelPart(c.Key.User) ||
		!ValidChannelPart(c.Key.Conversation) || !ValidID(c.ClientID) {
		return
	}
	f.local.Publish(context.Background(), c)
}

// Publish implements ManifestFeed: one PUBLISH, bounded by 2 s; a failure is logged only.
func (f *RedisFeed) Publish(ctx context.Context, c ManifestChange) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if err := f.rc.PublishTo(ctx, f.channel, mustJSON(c)); err != nil {
		f.log.Warn("toolmark manifest change not published", slog.String("app", c.Key.App), slog.String("error", err.Error()))
	}
}

// Subscribe implements ManifestFeed.
func (f *RedisFeed) Subscribe(fn func(ManifestChange)) func() { return f.local.Subscribe(fn) }

// Close stops the subscription.
func (f *RedisFeed) Close() error {
	f.sub.Close()
	if f.wrapped {
		f.rc.CloseSubs()
	}
	return nil
}

var (
	_ ManifestFeed = (*LocalFeed)(nil)
	_ ManifestFeed = (*RedisFeed)(nil)
)
