// Package console serves reverbgo's live debug console at {server.path}/console: a login
// with the configured token, then per-app views of connections, channels, events and Toolmark
// calls streamed over Server-Sent Events, and a form that triggers a test event.
//
// It costs nothing while nobody watches: the producers (pusher, bridge, webhooks) get an
// observer only while at least one console stream is open, and every event that reaches it
// passes a per-app sampling budget before anything is copied, so a busy server cannot flood a
// browser (dropped events are counted and shown).
package console

import (
	"context"
	"crypto/sha256"
	"github.com/reverbgo/reverbgo/httpguard"
	"log/slog"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/reverbgo/reverbgo/bridge"
	"github.com/reverbgo/reverbgo/channels"
	"github.com/reverbgo/reverbgo/pusher"
	"github.com/reverbgo/reverbgo/webhooks"
)

// Server is what the console reads from (*pusher.Server) and triggers through (Trigger is
// the HTTP API's, api.API.Trigger, as cmd/reverbgo wires it).
type Server interface {
	SetObserver(pusher.Observer)
	Counters(appID string) (in, out, nodeDeliveries uint64)
	ConnectionCount(appID string) int
	ChannelList(ctx context.Context, appID string) []channels.ChannelInfo
	Members(ctx context.Context, appID, channel string) ([]channels.Member, error)
	Health(ctx context.Context) map[string]string
	Clustered() bool
	Trigger(ctx context.Context, appID, channel, event string, data []byte) error
}

// Bridge is the Toolmark side (*bridge.Bridge); optional.
type Bridge interface {
	SetObserver(bridge.Observer)
	Manifest(ctx context.Context, appID, user, conversation string) (*bridge.Manifest, error)
}

// Webhooks is the webhook dispatcher (*webhooks.Dispatcher); optional.
type Webhooks interface {
	SetObserver(webhooks.Observer)
	Stats() webhooks.Stats
}

// Options configure a Console. Token, Apps and Server are required.
type Options struct {
	Token    string
	Apps     []string // app ids, in config order
	Node     string   // this node's id when scaled ("" = single node)
	Server   Server
	Bridge   Bridge   // nil = no Toolmark view data
	Webhooks Webhooks // nil = no webhook counters
	Logger   *slog.Logger
	// Clients finds a request's client for the per-client login limit (nil: the peer
	// address; no proxy is trusted).
	Clients *httpguard.Clients
	// EventsPerSecond is each app's sampling budget for the event log (default 50).
	EventsPerSecond int
	// Now is the clock; nil = time.Now.
	Now func() time.Time
}

// Limits of what one console holds or sends.
const (
	defaultEventsPerSecond = 50
	ringSize               = 300 // recent events kept per app for a console that opens
	historySeconds         = 600 // the connections chart: 10 minutes at 1 Hz
	streamQueue            = 256 // messages waiting for one browser before it drops
	maxStreams             = 16
	maxChannels            = 500 // channels listed per snapshot
	maxPresenceLookups     = 50  // presence channels whose members one snapshot fetches
	maxMembersShown        = 100
	maxConversations       = 50
	maxInflight            = 500
	recentCalls            = 50
	dataPreview            = 200
)

// Console is the debug console of one node.
type Console struct {
	opts      Options
	tokenHash [sha256.Size]byte
	log       *slog.Logger
	now       func() time.Time
	sessions  *sessions
	logins    loginLimiter
	base      string // {server.path}/console, set by Register

	mu       sync.Mutex
	streams  map[*stream]struct{}
	attached bool

	apps  map[string]*appView
	order []string

	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
}

// New builds a console and starts its 1 Hz sampler (connections chart and rates).
func New(opts Options) *Console {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.EventsPerSecond <= 0 {
		opts.EventsPerSecond = defaultEventsPerSecond
	}
	c := &Console{
		opts:      opts,
		tokenHash: sha256.Sum256([]byte(opts.Token)),
		log:       opts.Logger,
		now:       opts.Now,
		sessions:  newSessions(opts.Now),
		streams:   make(map[*stream]struct{}),
		apps:      make(map[string]*appView, len(opts.Apps)),
		stop:      make(chan struct{}),
		done:      make(chan struct{}),
	}
	for _, id := range opts.Apps {
		if _, dup := c.apps[id]; !dup {
			c.apps[id] = newAppView(opts.EventsPerSecond)
			c.order = append(c.order, id)
		}
	}
	go c.sampler()
	return c
}

// Close stops the sampler, ends every open stream and detaches the observers.
func (c *Console) Close() {
	c.stopOnce.Do(func() {
		close(c.stop)
		<-c.done
		c.mu.Lock()
		c.detachLocked()
		c.mu.Unlock()
	})
}

// Register mounts the console under prefix+"/console" on e.
func (c *Console) Register(e *echo.Echo, prefix string) {
	base := prefix + "/console"
	c.base = base
	e.GET(base, c.handleIndex)
	e.GET(base+"/", c.handleIndex)
	e.POST(base+"/login", c.handleLogin)
	e.GET(base+"/assets/:file", c.handleAsset)
	api := e.Group(base+"/api", c.requireSession)
	api.GET("/session", c.handleSession)
	api.GET("/stream", c.handleStream)
	api.POST("/trigger", c.handleTrigger, c.requireCSRF)
	api.POST("/logout", c.handleLogout, c.requireCSRF)
}

// attachLocked gives the producers this console as their observer (first stream opened).
func (c *Console) attachLocked() {
	if c.attached {
		return
	}
	c.attached = true
	c.opts.Server.SetObserver(serverTap{c})
	if c.opts.Bridge != nil {
		c.opts.Bridge.SetObserver(bridgeTap{c})
	}
	if c.opts.Webhooks != nil {
		c.opts.Webhooks.SetObserver(hookTap{c})
	}
}

// detachLocked takes the observers back (last stream closed): the hot path is free again.
func (c *Console) detachLocked() {
	if !c.attached {
		return
	}
	c.attached = false
	c.opts.Server.SetObserver(nil)
	if c.opts.Bridge != nil {
		c.opts.Bridge.SetObserver(nil)
	}
	if c.opts.Webhooks != nil {
		c.opts.Webhooks.SetObserver(nil)
	}
}

// Observing reports whether the producers currently have the console as their observer.
func (c *Console) Observing() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.attached
}

// sampler records each app's connection count and message rates once a second.
func (c *Console) sampler() {
	defer close(c.done)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	c.sample()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
			c.sample()
		}
	}
}

// sample reads each app's connection count and the message counters (a few atomic loads).
func (c *Console) sample() {
	for _, id := range c.order {
		in, out, del := c.opts.Server.Counters(id)
		c.apps[id].sample(c.opts.Server.ConnectionCount(id), in, out, del)
	}
}
