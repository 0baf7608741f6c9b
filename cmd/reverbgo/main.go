// Command reverbgo is a Pusher Channels server, a drop-in for Laravel Reverb, with the
// Toolmark bridge embedded.
//
//	reverbgo start [--config PATH] [--host HOST] [--port PORT] [--log-level info] [--debug-addr ADDR]
//	reverbgo config check [--config PATH]
//	reverbgo healthcheck [--config PATH]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	_ "net/http/pprof" // only served with --debug-addr, on its own listener
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/reverbgo/reverbgo/api"
	"github.com/reverbgo/reverbgo/bridge"
	"github.com/reverbgo/reverbgo/channels"
	"github.com/reverbgo/reverbgo/config"
	"github.com/reverbgo/reverbgo/console"
	"github.com/reverbgo/reverbgo/httpguard"
	"github.com/reverbgo/reverbgo/internal/asynclog"
	"github.com/reverbgo/reverbgo/mcp"
	"github.com/reverbgo/reverbgo/pusher"
	"github.com/reverbgo/reverbgo/webhooks"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: reverbgo start [--config PATH] [--host HOST] [--port PORT] [--log-level debug|info|warn|error] [--debug-addr ADDR]")
	fmt.Fprintln(w, "       reverbgo config check [--config PATH]   validate, print the effective config (secrets masked)")
	fmt.Fprintln(w, "       reverbgo healthcheck [--config PATH]    exit 0 when the configured server's /up answers OK")
	fmt.Fprintln(w, "       reverbgo version")
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "version", "--version":
		fmt.Fprintln(stdout, "reverbgo", version)
		return 0
	case "start":
	case "config":
		return runConfig(args[1:], stdout, stderr)
	case "healthcheck":
		return runHealthcheck(args[1:], stdout, stderr)
	case "-h", "--help", "help":
		usage(stdout)
		return 0
	default:
		usage(stderr)
		return 2
	}
	fs := flag.NewFlagSet("start", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "", "config file (default ./config.yaml)")
	host := fs.String("host", "", "listen host (overrides server.host)")
	port := fs.Int("port", 0, "listen port (overrides server.port)")
	logLevel := fs.String("log-level", "", "debug, info, warn or error (overrides server.log.level)")
	debugAddr := fs.String("debug-addr", "", "serve /debug/pprof and an unauthenticated /metrics on this address (e.g. 127.0.0.1:6060); off by default")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	if *logLevel != "" {
		var level slog.Level
		if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
			fmt.Fprintln(stderr, "reverbgo: --log-level:", err)
			return 2
		}
	}

	// load is start's reading of the configuration, and SIGHUP's (reload.go).
	load := func() (*config.Config, error) {
		cfg, err := config.Load(*cfgPath)
		if err != nil {
			return nil, err
		}
		if *host != "" {
			cfg.Server.Host = *host
		}
		if *port != 0 {
			cfg.Server.Port = *port
		}
		return cfg, cfg.Validate()
	}
	cfg, err := load()
	if err != nil {
		fmt.Fprintln(stderr, "reverbgo: config:", err)
		return 1
	}
	// The audit log (a line per Toolmark call and page message) leaves through one goroutine
	// in batches instead of a write(2) per line on the call's goroutine; Close writes the rest.
	logOut := asynclog.New(stderr, asynclog.Options{})
	defer logOut.Close()
	logger, err := newLogger(logOut, cfg.Server.Log, *logLevel)
	if err != nil {
		fmt.Fprintln(stderr, "reverbgo: --log-level:", err)
		return 2
	}
	warnReverbEnv(logger, os.Environ())
	metrics := newMetricsRegistry()
	if *debugAddr != "" {
		http.Handle("/metrics", promhttp.HandlerFor(metrics, promhttp.HandlerOpts{}))
		go func() { logger.Warn("debug server stopped", "error", http.ListenAndServe(*debugAddr, nil)) }()
	}
	if err := serve(cfg, logger, metrics, load); err != nil {
		logger.Error("server stopped", "error", err)
		return 1
	}
	return 0
}

// emitter adapts the webhook dispatcher to the producers' Emit(appID, map) interface.
type emitter struct{ d *webhooks.Dispatcher }

func (e emitter) Emit(appID string, ev map[string]any) { e.d.Emit(appID, webhooks.Event(ev)) }

// Wants lets producers skip building events no webhook takes (pusher.Wanter).
func (e emitter) Wants(appID, name string) bool { return e.d.Wants(appID, name) }

// newConsole builds the debug console when console.enabled, else nil.
func newConsole(cfg *config.Config, srv *pusher.Server, httpAPI *api.API, br *bridge.Bridge, hooks *webhooks.Dispatcher, cl *clusterNode, clients *httpguard.Clients, logger *slog.Logger) *console.Console {
	if !cfg.Console.Enabled {
		return nil
	}
	ids := make([]string, len(cfg.Apps))
	for i := range cfg.Apps {
		ids[i] = cfg.Apps[i].ID
	}
	node := ""
	if cl != nil {
		node = cl.node
	}
	logger.Info("console enabled", "path", cfg.Server.Path+"/console")
	return console.New(console.Options{Token: cfg.Console.Token, Apps: ids, Node: node, Server: consoleServer{srv, httpAPI}, Bridge: br, Webhooks: hooks, Clients: clients, Logger: logger})
}

// consoleServer is what the console reads (the Pusher server) and triggers through (the
// HTTP API's validation and publish path).
type consoleServer struct {
	*pusher.Server
	httpAPI *api.API
}

func (c consoleServer) Trigger(ctx context.Context, appID, channel, event string, data []byte) error {
	return c.httpAPI.Trigger(ctx, appID, channel, event, data)
}

// trustedProxies parses server.trusted_proxies (validated: CIDRs or addresses).
func trustedProxies(list []string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range list {
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
		} else if a, err := netip.ParseAddr(s); err == nil {
			out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
		}
	}
	return out
}

// appDirectory gives the bridge and MCP app lookups over the apps in effect (reload.go).
type appDirectory struct{ live *liveConfig }

func (a appDirectory) AppByID(id string) *config.App { return a.live.Load().AppByID(id) }

func (a appDirectory) AppByKey(key string) *config.App { return a.live.Load().AppByKey(key) }

func (a appDirectory) AllApps() []*config.App {
	cfg := a.live.Load()
	out := make([]*config.App, len(cfg.Apps))
	for i := range cfg.Apps {
		out[i] = &cfg.Apps[i]
	}
	return out
}

// node is one running reverbgo: the Pusher server, the bridge and, with scaling, the
// cluster seams, mounted on one echo instance. Tests build several on one Redis.
type node struct {
	e     *echo.Echo
	srv   *pusher.Server
	br    *bridge.Bridge
	mcp   *mcp.Server
	cl    *clusterNode // nil on a single node
	hooks *webhooks.Dispatcher
	con   *console.Console    // nil unless console.enabled
	mem   *bridge.MemoryStore // the single node's bridge store; nil with scaling
	// clients finds a request's client (server.trusted_proxies) for the per-client limits.
	clients *httpguard.Clients
	log     *slog.Logger
	// live is the configuration whose apps are in effect; each SIGHUP's reload replaces it
	// and hands its apps to httpAPI (reload.go).
	live    *liveConfig
	reloads reloadCounts
	httpAPI *api.API
}

func newNode(cfg *config.Config, logger *slog.Logger, metrics *prometheus.Registry) (*node, error) {
	if err := requireIOUring(&cfg.Server); err != nil {
		return nil, err
	}
	clients, err := httpguard.NewClients(cfg.Server.TrustedProxies)
	if err != nil {
		return nil, fmt.Errorf("server.trusted_proxies: %w", err)
	}
	opts := pusher.Options{Config: cfg, Logger: logger, MaxConnections: cfg.Server.NodeConnectionCap(openFileLimit())}
	if opts.MaxConnections > 0 {
		logger.Info("connection cap", "max_connections", opts.MaxConnections, "open_file_limit", openFileLimit())
	}
	var store bridge.Store
	var feed bridge.ManifestFeed
	var memStore *bridge.MemoryStore // closed on release when single node
	var cl *clusterNode
	hookOpts := webhooks.Options{Logger: logger, Lease: time.Duration(cfg.Scaling.WebhookLease) * time.Second}
	if cfg.Scaling.Enabled {
		var err error
		if cl, err = newCluster(cfg, logger); err != nil {
			return nil, err
		}
		// The outbox and the occupancy/hold decisions are cluster-wide (webhooks.RedisStore).
		hookOpts.Store, hookOpts.NodeID = cl.webhookStore(), cl.node
		// A dead node's channels are vacated within the same node_timeout as its presence.
	}
	hooks := webhooks.New(hookOpts)
	hooks.SetApps(cfg.Apps)
	opts.Webhooks = emitter{hooks}
	if cl != nil {
		opts.Registry = channels.NewRegistry(channels.Options{
			Broker: cl.broker, Presence: cl.presence, Occupancy: cl.occ, Cache: cl.cache,
			// The bridge's socket index hears the toolmark channels; it writes through to Redis.
			Watch: channels.Watch{Prefix: bridge.ChannelPrefix, Observer: cl.sockets, Waits: true},
		})
		opts.Health = cl.health
		opts.Cluster = clusterView{cl.occ, cl.sockets}
		if cl.history != nil {
			opts.History = cl.history
		}
		store, feed = cl.store, cl.feed
		logger.Info("scaling: redis", "redis", cl.addr, "channel", cfg.Scaling.Channel, "routing", cfg.Scaling.Routing, "node", cl.node)
	} else {
		opts.Registry = channels.NewRegistry(channels.Options{})
		mem := bridge.NewMemoryStore(bridge.MemoryOptions{})
		store, feed, memStore = mem, bridge.NewLocalFeed(), mem
		logger.Info("scaling: single node (in memory)")
	}
	// Stored manifests and raised revs are announced (cluster-wide with Redis) for MCP's
	// notifications/tools/list_changed.
	live := newLiveConfig(cfg)
	store = bridge.WithManifestFeed(store, feed, func(appID string) bool {
		app := live.Load().AppByID(appID)
		return app != nil && app.Toolmark.MCP.Enabled
	})
	srv := pusher.NewServer(opts)
	hooks.SetCounter(srv.SubscriptionCount)
	if cl != nil {
		cl.start(opts.Registry, srv)
	}
	br := bridge.New(bridge.Options{
		Store:     store,
		Publisher: srv,
		Sockets:   srv,
		Webhooks:  emitter{hooks},
		Apps:      appDirectory{live},
		Logger:    logger,
		Metrics:   metrics,
	})
	for i := range cfg.Apps {
		if a := &cfg.Apps[i]; a.Toolmark.Enabled && a.Toolmark.PageAuth == config.PageAuthSocketID {
			logger.Warn("toolmark.page_auth is socket_id: a leaked socket id can speak for the page; use token",
				"app", a.ID)
		}
	}

	e := echo.New()
	e.HideBanner = true
	e.HidePort = true
	e.Use(middleware.Recover())
	prefix := cfg.Server.Path
	e.Use(srv.HTTPMetrics(prefix))
	srv.Routes(e, prefix)
	httpAPI := api.New(api.Options{Config: cfg, Publisher: srv, Info: srv, Terminator: srv})
	httpAPI.Routes(e, prefix)
	g := e.Group(prefix)
	br.Register(g, prefix)
	mcpSrv := mcp.New(mcp.Options{Bridge: br, Apps: appDirectory{live}, Feed: feed, Logger: logger,
		PublicURL: cfg.Server.PublicURL, PublicHosts: cfg.Server.PublicHosts, Path: prefix,
		TrustedProxies: trustedProxies(cfg.Server.TrustedProxies)})
	g.Any("/toolmark/mcp", echo.WrapHandler(mcpSrv))
	// RFC 9728: the metadata path is the resource's path under /.well-known/, outside server.path.
	e.Match([]string{http.MethodGet, http.MethodHead, http.MethodOptions}, mcp.MetadataPath(prefix),
		echo.WrapHandler(http.HandlerFunc(mcpSrv.ServeMetadata)))
	con := newConsole(cfg, srv, httpAPI, br, hooks, cl, clients, logger)
	if con != nil {
		con.Register(e, prefix)
	}
	n := &node{e: e, srv: srv, br: br, mcp: mcpSrv, cl: cl, mem: memStore, hooks: hooks, con: con, clients: clients, log: logger,
		live: live, httpAPI: httpAPI}
	registerNodeMetrics(metrics, n)
	mountMetrics(e, cfg, metrics, logger)
	return n, nil
}

// shutdown closes in dependency order once HTTP has stopped taking requests: every client
// gets 4200 and leaves its channels, the bridge settles waiting calls (publishing cancels),
// then the cluster seams and the webhook queue close.
func (n *node) shutdown(ctx context.Context, beforeClose func(context.Context)) {
	if n.con != nil {
		n.con.Close() // ends its streams, which HTTP shutdown would otherwise wait for
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = n.srv.Shutdown(ctx) }() // every client gets 4200
	n.mcp.Close()                                            // MCP sessions end their GET streams
	if beforeClose != nil {
		wg.Add(1)
		go func() { defer wg.Done(); beforeClose(ctx) }()
	}
	wg.Wait()
	n.br.Close() // may still publish cancels, so before the cluster closes
	n.release(ctx)
}

// release frees what newNode acquired besides the server and the bridge.
func (n *node) release(ctx context.Context) {
	// With scaling, the webhooks close between presence (whose last leaves they hear) and
	// the Redis client (which their outbox needs).
	closeHooks := func() {
		if err := n.hooks.Close(ctx); err != nil {
			n.log.Warn("webhooks not all settled at shutdown", "error", err)
		}
	}
	if n.cl != nil {
		n.cl.close(n.log, closeHooks)
	} else {
		closeHooks()
	}
	if n.mem != nil {
		_ = n.mem.Close()
	}
}

// newHTTPServer is the http.Server of a node's port.
//
// No ReadTimeout: it would cancel long-poll handlers (Toolmark calls wait up to
// max_timeout_ms) and, on the TLS path, stay armed on hijacked WebSockets. httpguard bounds
// bodies instead (a per-request body deadline cleared once the body is read, and a cap on
// requests still being read); ReadHeaderTimeout cuts slowloris headers.
//
// Without TLS the port also speaks HTTP/2 with prior knowledge (h2c): an agent then keeps its
// calls to the Toolmark calls API as streams of one connection, whose frames the server
// writes together, instead of one HTTP/1.1 connection per call in flight. Only a client that
// opens with the HTTP/2 preface gets it, so HTTP/1.1 clients and WebSocket upgrades (which
// the fast listener takes before net/http sees them) are unchanged. With TLS, HTTP/2 is
// negotiated by ALPN as before.
func newHTTPServer(n *node, logger *slog.Logger, tlsOn bool) *http.Server {
	srv := &http.Server{
		Handler:           httpguard.Wrap(n.e, httpguard.Options{Clients: n.clients}),
		ReadHeaderTimeout: 10 * time.Second,
		MaxHeaderBytes:    64 << 10,
		IdleTimeout:       120 * time.Second, // keep-alive API clients (SDKs, agents) reuse connections
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	if !tlsOn {
		srv.Protocols = new(http.Protocols)
		srv.Protocols.SetHTTP1(true)
		srv.Protocols.SetUnencryptedHTTP2(true)
	}
	return srv
}

func serve(cfg *config.Config, logger *slog.Logger, metrics *prometheus.Registry, load func() (*config.Config, error)) error {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	hups := make(chan os.Signal, 1)
	signal.Notify(hups, syscall.SIGHUP) // reloads TLS certificates and apps; never stops the server
	return serveWith(cfg, logger, metrics, lifecycle{stop: sigs, hup: hups, load: load})
}

// lifecycle is what drives a serving node from outside: the stop signals (SIGINT, SIGTERM;
// a second one cuts the drain short), SIGHUP, and, for tests, the listening address.
type lifecycle struct {
	stop, hup <-chan os.Signal
	listening func(addr net.Addr) // nil: nobody asks
	// load reads the configuration again as start did (file, environment, flags,
	// validation), for SIGHUP; nil: SIGHUP reloads only the TLS certificate.
	load func() (*config.Config, error)
}

func serveWith(cfg *config.Config, logger *slog.Logger, metrics *prometheus.Registry, life lifecycle) error {
	n, err := newNode(cfg, logger, metrics)
	if err != nil {
		return err
	}
	prefix := cfg.Server.Path
	addr := net.JoinHostPort(cfg.Server.Host, strconv.Itoa(cfg.Server.Port))
	// No TCP keepalive: the Pusher protocol's own pings find dead peers, and the four
	// setsockopt calls per accepted socket are a measurable share of accept cost.
	lc := net.ListenConfig{KeepAlive: -1}
	// Plain TCP: Go 1.24+ listens with MPTCP by default, and every accepted socket of a
	// plain-TCP client then runs through the MPTCP fallback layer.
	lc.SetMultipathTCP(false)
	ln, err := lc.Listen(context.Background(), "tcp", addr)
	if err != nil {
		n.shutdown(context.Background(), nil)
		return err
	}
	tlsOn := tlsEnabled(cfg)
	httpSrv := newHTTPServer(n, logger, tlsOn)
	var certs *certReloader
	if tlsOn {
		if certs, err = newCertReloader(cfg.Server.TLS.Cert, cfg.Server.TLS.Key); err != nil {
			_ = ln.Close()
			n.shutdown(context.Background(), nil)
			return err
		}
		httpSrv.TLSConfig = certs.tlsConfig()
	}
	metricsSrv, err := metricsListener(cfg, metrics, logger)
	if err != nil {
		_ = ln.Close()
		n.shutdown(context.Background(), nil)
		return fmt.Errorf("metrics.listen: %w", err)
	}
	defer closeMetricsListener(metricsSrv)
	if !tlsOn {
		ln = n.srv.FastListener(ln, prefix) // WebSocket upgrades skip net/http; the rest is served below
	}
	logger.Info("reverbgo listening", "addr", ln.Addr().String(), "path", prefix, "tls", tlsOn, "apps", len(cfg.Apps), "version", version)
	if life.listening != nil {
		life.listening(ln.Addr())
	}

	errc := make(chan error, 1)
	go func() {
		if tlsOn {
			errc <- httpSrv.ServeTLS(ln, "", "") // certificates come from certs.getCertificate
		} else {
			errc <- httpSrv.Serve(ln)
		}
	}()

wait:
	for {
		select {
		case err := <-errc:
			if !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			break wait
		case <-life.hup:
			if certs != nil {
				certs.onSIGHUP(logger)
			}
			n.reload(life.load)
		case sig := <-life.stop:
			logger.Info("shutting down", "signal", sig.String())
			break wait
		}
	}
	closeHTTP := n.drain(httpSrv, life.stop, cfg.Server)
	timeout := time.Duration(cfg.Server.ShutdownTimeoutSeconds) * time.Second
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	// In-flight HTTP requests finish while the sockets close.
	n.shutdown(ctx, closeHTTP)
	logger.Info("stopped")
	return nil
}
