package bridge

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/reverbgo/reverbgo/config"
	"github.com/reverbgo/reverbgo/internal/httpbody"
	"github.com/reverbgo/reverbgo/origin"
)

// Publisher broadcasts one Pusher event to a channel of an app; data is the JSON string
// payload, e.g. {"message":{...}}.
type Publisher interface {
	Publish(appID, channel, event string, data []byte) error
}

// Sockets finds a connected socket anywhere in the cluster (pusher.Server.Subscriptions).
type Sockets interface {
	// Subscriptions returns the socket's app and channels, each mapped to TokenHash of the
	// page token issued with that subscription ("" when none). The bridge needs only the
	// toolmark channels, which is all the cluster index holds for sockets on other nodes.
	Subscriptions(socketID string) (appID string, subs map[string]string, ok bool)
}

// ConversationSockets is optionally implemented by Sockets (pusher.Server): the page gate's
// lookup without a copy of the socket's channels and their token hashes. Of the socket's
// channels that parse (ParseChannel) reads as a channel of conversation it returns how many
// there are and the user and page-token hash of the last one, with the socket's app; ok is
// Subscriptions' ok.
type ConversationSockets interface {
	SocketConversation(socketID, conversation string, parse func(channel string) (user, conv string, ok bool)) (appID, user, tokenHash string, n int, ok bool)
}

// socketConversation is ConversationSockets' lookup through s, which need not implement it.
func socketConversation(s Sockets, socketID, conversation string) (appID, user, tokenHash string, n int, ok bool) {
	if cs, is := s.(ConversationSockets); is {
		return cs.SocketConversation(socketID, conversation, ParseChannel)
	}
	appID, subs, ok := s.Subscriptions(socketID)
	for ch, hash := range subs {
		if u, cv, ok := ParseChannel(ch); ok && cv == conversation {
			user, tokenHash, n = u, hash, n+1
		}
	}
	return appID, user, tokenHash, n, ok
}

// Occupancy is optionally implemented by Sockets: it tells whether any socket is subscribed
// to a channel, so a call to a conversation whose page was closed fails at once with "No
// page is connected" instead of waiting for its deadline (a stored manifest outlives the tab).
type Occupancy interface {
	Subscribed(appID, channel string) bool
}

// Emitter delivers webhook events (toolmark_confirmed) for an app.
type Emitter interface {
	Emit(appID string, event map[string]any)
}

// Apps looks apps up by id.
type Apps interface {
	AppByID(id string) *config.App
}

// AppLister should also be implemented by Apps. A CORS preflight carries no X-Socket-ID, so
// its app is unknown: the preflight is allowed when any toolmark-enabled app allows the Origin
// (the POST itself is then checked against the socket's own app). Without AppLister every
// preflight is refused, so cross-origin pages cannot post.
type AppLister interface {
	AllApps() []*config.App
}

// Options configure a Bridge. Publisher, Sockets and Apps are required.
type Options struct {
	// Store holds bindings and manifests; nil = a new MemoryStore owned (and closed) by the Bridge.
	Store Store
	// Publisher broadcasts call/describe/cancel.
	Publisher Publisher
	// Sockets resolves X-Socket-ID to the socket's app and channels.
	Sockets Sockets
	// Webhooks receives toolmark_confirmed; nil drops them.
	Webhooks Emitter
	// Apps resolves app ids (and, with AppLister, answers CORS preflights).
	Apps Apps
	// Logger receives one audit line per call and per page message; nil = slog.Default().
	Logger *slog.Logger
	// Metrics registers the bridge's collectors; nil = no metrics.
	Metrics prometheus.Registerer
	// Now is the clock for deadlines, signatures and limits; nil = time.Now.
	Now func() time.Time
	// Limits; zero fields take their documented defaults.
	Limits Limits
}

// Bridge is the embedded Toolmark bridge: the page and app HTTP endpoints and the call
// state machine between them.
type Bridge struct {
	store     Store
	ownStore  *MemoryStore
	pub       Publisher
	sockets   Sockets
	hooks     Emitter
	apps      Apps
	log       *slog.Logger
	met       *metrics
	now       func() time.Time
	lim       Limits
	pageRate  *limiter[string]
	callRate  *limiter[ConvKey]
	flight    *inflight
	schemas   *schemaCache                // described input schemas (toolmark.validate)
	cors      echo.MiddlewareFunc         // preflight answers (preflightCORS)
	obs       atomic.Pointer[observerBox] // the console's, nil unless one is open (observe.go)
	closing   chan struct{}
	closeOnce sync.Once
	done      chan struct{}
}

// New builds a Bridge; call Register to mount it and Close on shutdown.
func New(opts Options) *Bridge {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	b := &Bridge{
		store: opts.Store, pub: opts.Publisher, sockets: opts.Sockets, hooks: opts.Webhooks,
		apps: opts.Apps, log: opts.Logger, met: newMetrics(opts.Metrics), now: opts.Now,
		lim: opts.Limits.withDefaults(), closing: make(chan struct{}), done: make(chan struct{}),
	}
	if b.store == nil {
		b.ownStore = NewMemoryStore(MemoryOptions{})
		b.store = b.ownStore
	}
	b.pageRate = newLimiter[string](b.lim.PageRate, b.lim.PageBurst, b.now)
	b.callRate = newLimiter[ConvKey](b.lim.CallRate, b.lim.CallBurst, b.now)
	b.cors = b.preflightCORS()
	b.flight = &inflight{max: b.lim.MaxInFlight, n: map[ConvKey]int{}}
	b.schemas = newSchemaCache()
	go b.janitor()
	return b
}

// janitor bounds the limiters' memory.
func (b *Bridge) janitor() {
	defer close(b.done)
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for {
		select {
		case <-b.closing:
			return
		case <-t.C:
			b.pageRate.sweep()
			b.callRate.sweep()
			b.met.sweepTools(b.now().Add(-b.lim.ManifestTTL))
		}
	}
}

// Close wakes every waiting call (each is settled as a timeout: claimed, cancel sent, agent
// answered) so a graceful HTTP shutdown does not wait for deadlines of up to max_timeout_ms,
// then stops background work. Calls started after Close are settled the same way at once.
// The HTTP server's shutdown is what waits for those handlers to return.
func (b *Bridge) Close() {
	b.closeOnce.Do(func() {
		close(b.closing)
		<-b.done
		if b.ownStore != nil {
			_ = b.ownStore.Close()
		}
	})
}

// Register mounts the page and app routes on g, the echo group at the server's path prefix.
// prefix is that path prefix ("" or "/x"); it is stripped from the path before verifying
// signatures because SDKs sign the path without it.
func (b *Bridge) Register(g *echo.Group, prefix string) {
	g.POST("/toolmark/bridge/:conversation", b.handlePage)
	g.OPTIONS("/toolmark/bridge/:conversation", b.handlePreflight)
	g.POST("/apps/:app/toolmark/calls", b.signed(prefix, b.handleCall))
	g.POST("/apps/:app/toolmark/describe", b.signed(prefix, b.handleDescribe))
	g.GET("/apps/:app/toolmark/manifest", b.signed(prefix, b.handleManifest))
	g.POST("/apps/:app/toolmark/messages", b.signed(prefix, b.handleMessages))
}

// errBodyTooLarge means the body exceeded Limits.MaxBody (413).
var errBodyTooLarge = httpbody.ErrTooLarge

// readBody reads at most MaxBody bytes (httpbody.Read); more means 413. It runs only after
// the request's cheap checks (the page's socket and token).
func (b *Bridge) readBody(c echo.Context) ([]byte, error) {
	return httpbody.Read(c.Response().Writer, c.Request(), b.lim.MaxBody)
}

// jsonError writes {"error": msg} with status code.
func jsonError(c echo.Context, code int, msg string) error {
	return c.JSON(code, map[string]string{"error": msg})
}

// writeRaw writes pre-encoded JSON.
func writeRaw(c echo.Context, code int, body []byte) error {
	return c.Blob(code, echo.MIMEApplicationJSONCharsetUTF8, body)
}

// originAllowed is the shared matcher (package origin) over the app's allowed_origins, so a
// pattern means the same on the page endpoint as on the WebSocket upgrade.
func originAllowed(app *config.App, o string) bool { return origin.Allowed(app.AllowedOrigins, o) }

// corsAllowHeaders are the headers echoTransport and Laravel's stack send with a page POST.
const corsAllowHeaders = "Content-Type, Accept, X-Requested-With, X-Socket-ID, X-Toolmark-Token, X-CSRF-TOKEN, X-XSRF-TOKEN, Authorization"

func setCORS(c echo.Context, origin string) {
	h := c.Response().Header()
	h.Add("Vary", "Origin")
	if origin == "" {
		return
	}
	h.Set("Access-Control-Allow-Origin", origin)
	h.Set("Access-Control-Allow-Credentials", "true")
}

// preflightAllowed reports whether any toolmark-enabled app allows the Origin: a preflight
// has no socket id, so its app is unknown (see AppLister).
func (b *Bridge) preflightAllowed(o string) bool {
	if lister, ok := b.apps.(AppLister); ok && o != "" {
		for _, app := range lister.AllApps() {
			if app != nil && app.Toolmark.Enabled && originAllowed(app, o) {
				return true
			}
		}
	}
	return false
}

// preflightCORS is echo's CORS middleware answering an allowed preflight.
func (b *Bridge) preflightCORS() echo.MiddlewareFunc {
	return middleware.CORSWithConfig(middleware.CORSConfig{
		AllowOriginFunc:  func(o string) (bool, error) { return b.preflightAllowed(o), nil },
		AllowMethods:     []string{http.MethodPost, http.MethodOptions},
		AllowHeaders:     strings.Split(corsAllowHeaders, ", "),
		AllowCredentials: true,
		MaxAge:           7200,
	})
}

// handlePreflight answers the page's CORS preflight: 403 for an Origin no toolmark-enabled
// app allows (echo's middleware would answer 204 without CORS headers), else echo's CORS.
func (b *Bridge) handlePreflight(c echo.Context) error {
	if !b.preflightAllowed(c.Request().Header.Get("Origin")) {
		c.Response().Header().Add("Vary", "Origin")
		return c.NoContent(http.StatusForbidden)
	}
	return b.cors(func(echo.Context) error { return nil })(c)
}

// appTimeouts returns the app's default and maximum call timeout.
func appTimeouts(app *config.App) (def, max time.Duration) {
	d, m := app.Toolmark.CallTimeoutMS, app.Toolmark.MaxTimeoutMS
	if m <= 0 {
		m = 600000
	}
	if d <= 0 {
		d = 30000
	}
	if d > m {
		d = m
	}
	return time.Duration(d) * time.Millisecond, time.Duration(m) * time.Millisecond
}

// mustJSON marshals values that cannot fail (maps of strings and raw JSON).
func mustJSON(v any) []byte {
	out, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return out
}
