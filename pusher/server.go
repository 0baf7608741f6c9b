// Package pusher speaks the Pusher Channels wire protocol over the WebSocket transport of
// package ws: connection state, client messages, subscriptions and presence, client events,
// signin, the event encoding and close reasons. The signed HTTP API is package api's, over
// the small seam in apiseam.go.
package pusher

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/reverbgo/reverbgo/channels"
	"github.com/reverbgo/reverbgo/config"
	"github.com/reverbgo/reverbgo/ws"
)

// appState is an app's configuration plus its live counters. One appState lives as long as
// its app id is configured: a reload (ReloadApps) swaps its configuration, never its counters.
type appState struct {
	conf  atomic.Pointer[config.App] // cfg(); swapped whole by ReloadApps
	conns atomic.Int64
	stats appStats               // metrics.go
	hist  channels.HistoryLimits // cfg.Recovery's bounds (recovery.go)
}

// Emitter receives Pusher webhook events (channel_occupied, member_added, ...).
type Emitter interface {
	Emit(appID string, event map[string]any)
}

// Options configures a Server.
type Options struct {
	Config        *config.Config
	Registry      *channels.Registry
	Logger        *slog.Logger
	Webhooks      Emitter // nil = no webhooks
	MaxQueueBytes int     // per-connection outbound limit (default DefaultMaxQueueBytes)
	Now           func() time.Time
	// Health reports what this node depends on and cannot reach, e.g. {"redis": "unreachable"};
	// a non-empty answer turns /up into 503 DEGRADED. nil = always healthy (single node).
	Health func(ctx context.Context) map[string]string
	// Cluster answers subscription counts, channel lists and socket lookups for every node;
	// nil = this node's registry is the whole truth.
	Cluster ClusterView
	// History keeps recovery channels' serials and events (recovery.go); nil = a
	// MemoryHistory when an app enables recovery and nothing is remote, else none.
	History channels.History
	// MaxConnections caps this node's WebSocket connections over every app (0 = no cap): a
	// connection over it is told 4100 "Over capacity" and closed, so pusher-js retries after a
	// back-off, behind a load balancer on another node, and the node keeps the file
	// descriptors its HTTP API, Redis and webhooks need (cmd/reverbgo derives it from
	// server.max_connections and the open-file limit).
	MaxConnections int
}

// ClusterView is the cluster-wide read side (cluster.RedisOccupancy and, for Socket, the
// bridge.RedisSocketIndex, combined in cmd/reverbgo). When it fails, the
// server answers from this node alone rather than failing the request.
type ClusterView interface {
	SubscriptionCount(ctx context.Context, app, channel string) (int, error)
	Channels(ctx context.Context, app, prefix string) ([]channels.ChannelInfo, error)
	// Socket finds an indexed (toolmark) socket on any node: its app and indexed channels,
	// each mapped to its credential hash ("" when none, see CredentialIndex).
	Socket(ctx context.Context, socketID string) (app string, subs map[string]string, ok bool, err error)
	// RemoteConnections counts the app's sockets on every other live node.
	RemoteConnections(ctx context.Context, app string) (int, error)
}

// Server holds every app's sockets and channels on this node.
type Server struct {
	taskCounters
	remote bool // the registry's presence or broker makes network round trips (tasks.go)

	cfg      *config.Config           // as started: server.* and what only start-up reads
	apps     atomic.Pointer[appTable] // the apps now (apps.go); replaced whole by ReloadApps
	maxConns int64                    // Options.MaxConnections
	reg      *channels.Registry
	sockets  *socketTable
	log      *slog.Logger
	hooks    Emitter
	health   func(ctx context.Context) map[string]string
	cluster  ClusterView
	now      func() time.Time

	transport *ws.Server  // accepts, reads and writes the sockets (package ws)
	watch     *watchlist  // online users and their watchers (watchlist.go)
	stats     serverStats // metrics.go

	tasksCtx    context.Context // parent of every task's context, cancelled once Shutdown is done
	cancelTasks context.CancelFunc

	tap      atomic.Pointer[tap] // the console's observer, nil unless one is open (observe.go)
	draining atomic.Bool
	leaving  atomic.Bool // BeginDrain: /up answers 503 draining (drain.go)
	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
	active   sync.WaitGroup // live connections, for shutdown
	activeMu sync.Mutex     // orders active.Add against Shutdown setting draining

	reconcile presenceReconcile // presence_reconcile.go
	counts    subCounts         // Pusher's subscription counts (subcount.go)
	history   channels.History  // recovery.go; nil when no app enables recovery
	// publishTimeout bounds an HTTP API publish's wait for Redis (scaling.publish_timeout).
	publishTimeout time.Duration
}

// NewServer builds a server over a validated config.
func NewServer(opts Options) *Server {
	s := &Server{
		cfg:      opts.Config,
		reg:      opts.Registry,
		sockets:  newSocketTable(),
		log:      opts.Logger,
		hooks:    opts.Webhooks,
		health:   opts.Health,
		cluster:  opts.Cluster,
		now:      opts.Now,
		stop:     make(chan struct{}),
		maxConns: int64(max(opts.MaxConnections, 0)),
	}
	s.counts.s = s
	s.tasksCtx, s.cancelTasks = context.WithCancel(context.Background())
	if s.reg == nil {
		s.reg = channels.NewRegistry(channels.Options{})
	}
	s.remote = s.reg.Remote()
	s.history = newHistory(s.cfg, opts.History, s.remote)
	if mb, ok := s.reg.Broker().(*channels.MemoryBroker); ok && s.history != nil {
		mb.SetHistory(s.history) // it gives recovery messages their serial (recovery.go)
		if mh, ok := s.history.(*channels.MemoryHistory); ok {
			// A channel whose history expired takes a new epoch: its sockets are told.
			mh.OnNewEpoch = func(app, ch, epoch string) { s.ToldGap(app, ch, channels.ResumeEpochChanged, epoch, 0) }
		}
	}
	if s.remote {
		t := s.cfg.Scaling.PublishTimeout
		if t <= 0 {
			t = config.DefaultPublishTimeout
		}
		s.publishTimeout = time.Duration(t * float64(time.Second))
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.now == nil {
		s.now = time.Now
	}
	s.apps.Store(newAppTable(s.cfg.Apps, nil, nil))
	for _, a := range s.appList() {
		s.reg.Subscribe(a.cfg().ID, channels.TerminateChannel, terminator{s: s, appID: a.cfg().ID})
	}
	// Origin is checked per app after the upgrade (4009), in Accept.
	s.transport = ws.NewServer(ws.Options{Handler: (*wsHandler)(s), Logger: s.log, MaxQueueBytes: opts.MaxQueueBytes,
		CoalesceWindow: s.cfg.Server.WriteCoalesce(), Compression: wsCompression(s.cfg.Server.Compression),
		IOUring: wsIOUring(&s.cfg.Server)})
	s.wg.Add(1)
	go s.sweepLoop()
	s.startHistorySweep()
	s.warnRecoveryOff()
	s.startPresenceReconcile()
	s.watch = newWatchlist(s)
	return s
}

// wsIOUring is server.io_uring for the transport: off, or on by default (absent: io_uring
// where the kernel allows it, a refusal logged at Info), or on as asked for (true: a
// refusal is a Warn).
func wsIOUring(s *config.Server) ws.IOUringMode {
	switch {
	case !s.IOUringEnabled():
		return ws.IOUringOff
	case s.IOUring == nil:
		return ws.IOUringAuto
	}
	return ws.IOUringOn
}

// Registry exposes the channel registry (for the bridge's publisher).
func (s *Server) Registry() *channels.Registry { return s.reg }

// newSocketID returns "<a>.<b>" with both parts random: a socket id is a capability in the
// Toolmark bridge, so it must not be guessable.
func newSocketID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("pusher: crypto/rand failed: " + err.Error())
	}
	a := binary.LittleEndian.Uint64(b[:8]) % 1_000_000_000_000
	c := binary.LittleEndian.Uint64(b[8:]) % 1_000_000_000_000
	var id [32]byte // one allocation, the string (two FormatUint and a concatenation made three)
	d := strconv.AppendUint(id[:0], a, 10)
	d = append(d, '.')
	d = strconv.AppendUint(d, c, 10)
	return string(d)
}

// ConnectionCount is the number of open sockets of an app on this node.
func (s *Server) ConnectionCount(appID string) int {
	if a := s.appByID(appID); a != nil {
		return int(a.conns.Load())
	}
	return 0
}

// totalConns is this node's connections over every app, handshakes under way included (the
// apps' counts are the one record of them).
func (s *Server) totalConns() int64 {
	var n int64
	for _, a := range s.appList() {
		n += a.conns.Load()
	}
	return n
}

// clusterConnections is the app's open sockets over the cluster: this node's exact count
// plus the other live nodes' last batches; this node's alone when Redis cannot answer.
func (s *Server) clusterConnections(ctx context.Context, appID string) int {
	n := s.ConnectionCount(appID)
	if s.cluster != nil {
		if remote, err := s.cluster.RemoteConnections(ctx, appID); err == nil {
			n += remote
		}
	}
	return n
}

// clusterTimeout bounds one cluster-wide read.
const clusterTimeout = 2 * time.Second

// Channels returns the app and channels of a live socket anywhere in the cluster (see
// Subscriptions).
func (s *Server) Channels(socketID string) (appID string, chans []string, ok bool) {
	appID, subs, ok := s.Subscriptions(socketID)
	for name := range subs {
		chans = append(chans, name)
	}
	return appID, chans, ok
}

// subscriptionCount is the channel's count over the cluster, or this node's.
func (s *Server) subscriptionCount(ctx context.Context, appID, channel string) int {
	if s.cluster != nil {
		if n, err := s.cluster.SubscriptionCount(ctx, appID, channel); err == nil {
			// Local changes reach Redis in batches: never answer less than this node knows.
			return max(n, s.reg.SubscriptionCount(appID, channel))
		}
	}
	return s.reg.SubscriptionCount(appID, channel)
}

// channelList lists occupied channels over the cluster, or this node's.
func (s *Server) channelList(ctx context.Context, appID, prefix string) []channels.ChannelInfo {
	if s.cluster != nil {
		if list, err := s.cluster.Channels(ctx, appID, prefix); err == nil {
			return mergeLocal(list, s.reg.Channels(appID, prefix))
		}
	}
	return s.reg.Channels(appID, prefix)
}

// mergeLocal adds channels this node has but the (batched) cluster view does not show yet.
func mergeLocal(cluster, local []channels.ChannelInfo) []channels.ChannelInfo {
	have := make(map[string]int, len(cluster))
	for i, c := range cluster {
		have[c.Name] = i
	}
	for _, l := range local {
		if i, ok := have[l.Name]; ok {
			cluster[i].SubscriptionCount = max(cluster[i].SubscriptionCount, l.SubscriptionCount)
		} else {
			cluster = append(cluster, l)
		}
	}
	sort.Slice(cluster, func(i, j int) bool { return cluster[i].Name < cluster[j].Name })
	return cluster
}

// Publish encodes an event once and hands it to the broker for every node.
func (s *Server) Publish(appID, channel, event string, data []byte) error {
	return s.publish(context.Background(), appID, channel, event, string(data), "")
}

func (s *Server) publish(ctx context.Context, appID, channel, event, data, except string) error {
	return s.reg.Publish(ctx, s.eventMessage(appID, channel, event, data, except))
}

// eventMessage encodes one event for the broker (and counts it as published).
func (s *Server) eventMessage(appID, channel, event, data, except string) channels.Message {
	s.countPublished(appID, event)
	frame := EventFrame(event, channel, data)
	cacheable := !strings.HasPrefix(event, "pusher_internal:")
	return channels.Message{AppID: appID, Channel: channel, Frame: frame, Except: except, Cacheable: cacheable}
}

// publishAll publishes the messages of one HTTP request all or nothing: with scaling, a
// refused publish (Redis backlog full) delivers none of them, so the 503 the caller gets
// never follows a local delivery and its retry duplicates nothing.
func (s *Server) publishAll(ctx context.Context, ms []channels.Message) error {
	if s.history != nil {
		return s.publishRecovered(ctx, ms)
	}
	return s.publishAcked(ctx, ms)
}

// publishAcked publishes the messages of one HTTP request and returns once the cluster has
// them (with scaling: once Redis accepted every one, within scaling.publish_timeout; else
// channels.ErrPublishTimeout, answered 503 with Retry-After).
func (s *Server) publishAcked(ctx context.Context, ms []channels.Message) error {
	if s.publishTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.publishTimeout)
		defer cancel()
	}
	return s.reg.PublishAcked(ctx, ms)
}

// publishNoWait is publish for callers that must not wait on Redis: this node's subscribers
// get the event at once, other nodes through the broker's queue (Registry.PublishNoWait).
func (s *Server) publishNoWait(appID, channel, event, data, except string) error {
	s.countPublished(appID, event)
	frame := EventFrame(event, channel, data)
	cacheable := !strings.HasPrefix(event, "pusher_internal:")
	return s.reg.PublishNoWait(channels.Message{AppID: appID, Channel: channel, Frame: frame, Except: except, Cacheable: cacheable})
}

// MemberGone announces that a user left a presence channel without a local Leave saying so:
// the presence store reaped a dead node's sockets or retried a leave that failed during a
// Redis outage. Every node's subscribers get member_removed; the webhook fires here.
func (s *Server) MemberGone(appID, channel, userID string) {
	if channel == channels.OnlineChannel { // a signed-in user's last connection (watchlist.go)
		s.watch.announce(appID, userID)
		return
	}
	if err := s.reg.Publish(context.Background(), memberRemoved(appID, channel, userID, "")); err != nil {
		s.log.Warn("member_removed not published to other nodes", "app", appID, "channel", channel, "error", err)
	}
	if s.wants(appID, "member_removed") {
		s.emit(appID, map[string]any{"name": "member_removed", "channel": channel, "user_id": userID})
	}
}

// Shutdown tells every client to reconnect (4200) and waits, until ctx ends, for their
// sockets to close and then for the work their connections queued (the leaves OnClose
// queues, and a presence join still in flight ahead of one): the node reaps its own presence
// and closes Redis after this returns, and a join landing after the reap would stay a
// member no survivor reaps. Tasks still running then have their round trips cancelled.
func (s *Server) Shutdown(ctx context.Context) error {
	s.activeMu.Lock()
	s.draining.Store(true)
	s.activeMu.Unlock()
	s.sockets.each(func(c *Conn) { c.closeWith(CloseServerShutdown) })
	done := make(chan struct{})
	go func() { s.active.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		s.sockets.each(func(c *Conn) { c.abort(CloseServerShutdown) })
		err = ctx.Err()
	}
	if werr := s.taskRunners.wait(ctx); werr != nil && err == nil {
		err = werr
	}
	s.cancelTasks()
	// Flushers and the sweeper stop only after the close frames went out.
	s.stopOnce.Do(func() { close(s.stop); s.transport.Stop() })
	s.wg.Wait()
	return err
}

// Subscribed reports whether any socket of the cluster is subscribed to the channel; the
// bridge uses it to answer "No page is connected" at once.
func (s *Server) Subscribed(appID, channel string) bool {
	if s.reg.SubscriptionCount(appID, channel) > 0 {
		return true
	}
	if s.cluster == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	n, err := s.cluster.SubscriptionCount(ctx, appID, channel)
	// Unknown is answered as subscribed: the call then waits for its deadline instead of
	// failing a page that may well be connected elsewhere.
	return err != nil || n > 0
}
