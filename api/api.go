// Package api is the Pusher HTTP API: the signed routes under /apps/:app_id (events,
// batch_events, channels, users, connections, terminate_connections), their input validation
// and their answers. It owns no socket and no channel: it publishes and reads through the
// small interfaces below, which *pusher.Server satisfies, so the protocol package never
// depends on HTTP handlers (cmd → api → pusher → channels).
package api

import (
	"context"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/reverbgo/reverbgo/apisign"
	"github.com/reverbgo/reverbgo/channels"
	"github.com/reverbgo/reverbgo/config"
	"github.com/reverbgo/reverbgo/pusher"
)

// The Pusher server is the production implementation of every seam.
var (
	_ Publisher  = (*pusher.Server)(nil)
	_ Info       = (*pusher.Server)(nil)
	_ Terminator = (*pusher.Server)(nil)
)

// Publisher encodes and publishes events (*pusher.Server).
type Publisher interface {
	// EventMessage encodes one event once, for every subscriber on every node, and counts it
	// as published; except is the socket id the event must skip ("" for none).
	EventMessage(appID, channel, event, data, except string) channels.Message
	// PublishAll publishes the messages of one request all or nothing (see
	// channels.Registry.PublishAll): a 503 never follows a partial delivery.
	PublishAll(ctx context.Context, ms []channels.Message) error
	// ObserveTrigger reports a published trigger to the debug console's observer, if one is
	// attached (kind is pusher.ObservedAPI or pusher.ObservedConsole); it must not block.
	ObserveTrigger(appID, kind, channel, event, data, socketID string)
}

// Info answers the read endpoints, cluster-wide when scaled (*pusher.Server).
type Info interface {
	// SubscriptionCount is the channel's subscriber count; the error is never fatal to an
	// answer (a cluster outage falls back to this node's count inside the implementation).
	SubscriptionCount(ctx context.Context, appID, channel string) (int, error)
	// ChannelsWithPrefix lists the app's occupied channels whose names start with prefix,
	// sorted by name.
	ChannelsWithPrefix(ctx context.Context, appID, prefix string) []channels.ChannelInfo
	// Members is a presence channel's members; an error means presence is unreachable.
	Members(ctx context.Context, appID, channel string) ([]channels.Member, error)
	// ClusterConnections is the app's open sockets over the cluster.
	ClusterConnections(ctx context.Context, appID string) int
}

// Terminator closes a user's sockets on every node (*pusher.Server).
type Terminator interface {
	TerminateUser(ctx context.Context, appID, userID string) error
}

// Options configures an API. Config, Publisher, Info and Terminator are required.
type Options struct {
	// Config gives the apps (id, key, secret, max_message_size, max_batch_size) and
	// server.max_request_size; it must be validated and must not change afterwards.
	Config     *config.Config
	Publisher  Publisher
	Info       Info
	Terminator Terminator
	// Now is the clock of the signature's timestamp window (default time.Now).
	Now func() time.Time
}

// API serves the Pusher HTTP API of every configured app.
type API struct {
	cfg     *config.Config
	apps    atomic.Pointer[map[string]*config.App] // by id; replaced whole by SetApps
	pub     Publisher
	info    Info
	term    Terminator
	now     func() time.Time
	maxBody int64
}

// New builds the API over a validated config.
func New(opts Options) *API {
	a := &API{
		cfg:  opts.Config,
		pub:  opts.Publisher,
		info: opts.Info,
		term: opts.Terminator,
		now:  opts.Now,
	}
	if a.now == nil {
		a.now = time.Now
	}
	a.SetApps(a.cfg.Apps)
	a.maxBody = a.cfg.Server.MaxRequestSize
	if a.maxBody <= 0 { // a Config built by hand rather than loaded: the documented default
		a.maxBody = config.DefaultMaxRequestSize
	}
	return a
}

// SetApps makes apps (a validated configuration's, not modified afterwards) the apps the API
// serves: a request is verified with the secret of the apps in place when it arrives, and an
// app no longer listed answers 404. server.* stays as New had it.
func (a *API) SetApps(apps []config.App) {
	m := make(map[string]*config.App, len(apps))
	for i := range apps {
		m[apps[i].ID] = &apps[i]
	}
	a.apps.Store(&m)
}

func (a *API) app(id string) *config.App { return (*a.apps.Load())[id] }

// Routes mounts the signed API routes under prefix (SDKs sign the path without it).
func (a *API) Routes(e *echo.Echo, prefix string) {
	signed := a.signedRequest(prefix)
	e.POST(prefix+"/apps/:app_id/events", a.handleEvents, signed)
	e.POST(prefix+"/apps/:app_id/batch_events", a.handleBatch, signed)
	e.GET(prefix+"/apps/:app_id/channels", a.handleChannels, signed)
	e.GET(prefix+"/apps/:app_id/channels/:channel", a.handleChannel, signed)
	e.GET(prefix+"/apps/:app_id/channels/:channel/users", a.handleUsers, signed)
	e.POST(prefix+"/apps/:app_id/users/:user_id/terminate_connections", a.handleTerminate, signed)
	e.GET(prefix+"/apps/:app_id/connections", a.handleConnections, signed)
}

// apiError answers with a real HTTP status and {"error": message}.
func apiError(c echo.Context, status int, message string) error {
	return c.JSON(status, map[string]string{"error": message})
}

// publishRefused answers a publish that Redis did not accept (scaling.publish_timeout
// passed, the backlog is full, the node is shutting down): 503 with Retry-After, so a
// queued Laravel broadcast retries; none of the request's events was answered 200.
func publishRefused(c echo.Context, err error) error {
	c.Response().Header().Set("Retry-After", "1")
	return apiError(c, http.StatusServiceUnavailable, "Could not publish: "+err.Error())
}

// signedRequest is the shared signing middleware (apisign) for the Pusher HTTP API: the
// body is bounded by server.max_request_size and the path is verified without prefix.
func (a *API) signedRequest(prefix string) echo.MiddlewareFunc {
	return apisign.Middleware(apisign.Config{
		Prefix: prefix,
		Param:  "app_id",
		Lookup: func(id string) (any, apisign.Credentials, bool) {
			app := a.app(id)
			if app == nil {
				return nil, apisign.Credentials{}, false
			}
			return app, apisign.Credentials{Key: app.Key, Secret: app.Secret}, true
		},
		MaxBody: a.maxBody,
		Now:     a.now,
	})
}

func appOf(c echo.Context) *config.App { return apisign.App(c).(*config.App) }
func bodyOf(c echo.Context) []byte     { return apisign.Body(c) }

// handleConnections answers {"connections": n}, the app's sockets over the cluster.
func (a *API) handleConnections(c echo.Context) error {
	return c.JSON(http.StatusOK, map[string]int{"connections": a.info.ClusterConnections(c.Request().Context(), appOf(c).ID)})
}
