// Package config holds reverbgo's typed configuration: the YAML file, its defaults, the
// environment overrides with Laravel Reverb's names, and the validation that stops start-up
// on a bad value. Only cmd/reverbgo reads files; every other package takes these structs.
package config

import "time"

// Config is the whole server configuration.
type Config struct {
	Server  Server  `mapstructure:"server"`
	Apps    []App   `mapstructure:"apps"`
	Scaling Scaling `mapstructure:"scaling"`
	Console Console `mapstructure:"console"`
	Metrics Metrics `mapstructure:"metrics"`

	// byID and byKey index Apps for AppByID and AppByKey. Validate builds them, so they point
	// into Apps: the Config is read-only once Load (or Validate) has returned.
	byID  map[string]*App
	byKey map[string]*App
}

// Server is the listening socket and the HTTP limits shared by every app.
type Server struct {
	Host string `mapstructure:"host"` // default 0.0.0.0
	Port int    `mapstructure:"port"` // default 8080
	// Path is an optional prefix for every route ("" = none, else "/x" without trailing slash).
	Path string `mapstructure:"path"`
	// PublicURL is the scheme and host clients reach this server at (e.g.
	// "https://ws.example.com", no path): the MCP endpoint's resource identifier is
	// {public_url}{path}/toolmark/mcp, which every MCP token must carry in aud. "" = built
	// from each request (TLS, or X-Forwarded-Proto from a trusted proxy, and Host), which
	// needs PublicHosts when MCP is enabled.
	PublicURL string `mapstructure:"public_url"`
	// PublicHosts lists the host[:port] names (as clients send them in Host, lower-cased by
	// ApplyDefaults) a request may name when PublicURL is empty: the MCP resource is built
	// from the request's Host only when it is one of these, and any other Host is refused
	// with 421, because the caller chooses Host, and a resource built from an unchecked one
	// would accept a token issued for another deployment of the same issuer. With MCP
	// enabled for any app, PublicURL or PublicHosts is required.
	PublicHosts []string `mapstructure:"public_hosts"`
	// MaxRequestSize bounds the Pusher HTTP API body in bytes (default 10000).
	MaxRequestSize int64 `mapstructure:"max_request_size"`
	TLS            TLS   `mapstructure:"tls"`
	// ShutdownTimeoutSeconds bounds how long in-flight HTTP requests may take on SIGTERM (default 10).
	ShutdownTimeoutSeconds int `mapstructure:"shutdown_timeout"`
	Log                    Log `mapstructure:"log"`
	// TrustedProxies lists reverse proxies (IP addresses or CIDR prefixes, e.g. "127.0.0.1",
	// "10.0.0.0/8") whose X-Forwarded-For names the client, for the per-client limits (the
	// share of pending request bodies, console logins), and whose X-Forwarded-Proto is
	// believed for the MCP resource URL when PublicURL is empty. Empty: the peer is the
	// client, and X-Forwarded-Proto is believed from loopback peers only.
	TrustedProxies []string `mapstructure:"trusted_proxies"`
	// WriteCoalesceMS is the longest, in milliseconds, that a frame for a socket may wait for
	// more frames to join it in one write. The wait is adaptive: it applies only while the
	// socket's flusher is busy (its previous round wrote, or left waiting, dozens of
	// sockets), so an idle server writes at once. 0 = off (every frame is written as soon as it is
	// queued); absent = DefaultWriteCoalesceMS. A pointer: an explicit 0 is not "default".
	WriteCoalesceMS *int `mapstructure:"write_coalesce_ms"`
	// Compression is permessage-deflate (compression.go); off by default.
	Compression Compression `mapstructure:"compression"`
	// MaxConnections caps this node's WebSocket connections over every app: a connection
	// over it gets pusher:error 4100 "Over capacity" and is closed, and pusher-js retries after
	// a back-off (behind a load balancer, on another node), while the node keeps the file
	// descriptors its HTTP API, Redis and webhooks need. 0 (the default) = the process's
	// open-file limit less a reserve (NodeConnectionCap); -1 = no cap.
	MaxConnections int `mapstructure:"max_connections"`
	// IOUring makes each flusher write a round's sockets with io_uring: one io_uring_enter
	// for the whole fan-out instead of a writev per socket (Linux). Absent (nil): io_uring
	// when a start-up probe proves the kernel completes a SENDMSG through a ring, else
	// writev (an old kernel, a seccomp profile such as Docker's default,
	// kernel.io_uring_disabled), logged at Info. true: required, start-up fails when the
	// probe does. false: writev. A pointer: absent and true differ.
	IOUring *bool `mapstructure:"io_uring"`
	// DrainDelay and DrainPeriod shape the drain on SIGTERM (drain.go): seconds the node keeps
	// serving while /up answers 503 draining, then seconds over which its sockets get 4200.
	// Absent = 5 and 10; 0 = no such stage (both 0: the listener closes at once, as before).
	DrainDelay  *int `mapstructure:"drain_delay"`
	DrainPeriod *int `mapstructure:"drain_period"`
}

// IOUringEnabled reports whether the flushers try io_uring (server.io_uring absent or true).
func (s *Server) IOUringEnabled() bool { return s.IOUring == nil || *s.IOUring }

// NodeConnectionCap is the effective server.max_connections (0 = no cap) for a process whose
// open-file limit is nofile (0 = unknown or unlimited). The automatic cap keeps 5 % of the
// limit, at least 512 and at most 4,096 descriptors, for everything but WebSockets: a node
// at its limit can no longer accept its HTTP API's requests (Laravel's publishes hang) nor
// dial Redis, and accepting fails for WebSockets too, so clients time out instead of being
// told to go elsewhere.
func (s *Server) NodeConnectionCap(nofile uint64) int {
	switch {
	case s.MaxConnections > 0:
		return s.MaxConnections
	case s.MaxConnections < 0 || nofile == 0 || nofile > 1<<40:
		return 0
	}
	reserve := min(max(nofile/20, 512), 4096)
	if nofile <= reserve {
		return 1 // a limit this low leaves nothing for sockets: refuse all but one
	}
	return int(nofile - reserve)
}

// WriteCoalesce is the effective coalescing window (0 = off).
func (s *Server) WriteCoalesce() time.Duration {
	ms := DefaultWriteCoalesceMS
	if s.WriteCoalesceMS != nil {
		ms = *s.WriteCoalesceMS
	}
	return time.Duration(ms) * time.Millisecond
}

// Log selects the log format and the minimum level; --log-level overrides Level.
type Log struct {
	Format string `mapstructure:"format"` // json | text (default json)
	Level  string `mapstructure:"level"`  // debug | info | warn | error (default info)
}

// Metrics serves Prometheus text format. Off by default: a scrape endpoint on the public
// listener is something an operator turns on, ideally with a token.
type Metrics struct {
	Enabled bool `mapstructure:"enabled"`
	// Listen "" serves {server.path}/metrics on the main listener; "host:port" serves
	// /metrics on a listener of its own (e.g. 127.0.0.1:9601, reachable only locally).
	Listen string `mapstructure:"listen"`
	// Token, when set, is required as "Authorization: Bearer <token>" (else 401).
	Token string `mapstructure:"token"`
}

// TLS enables HTTPS/WSS when both files are set.
type TLS struct {
	Cert string `mapstructure:"cert"`
	Key  string `mapstructure:"key"`
}

// Scaling selects the distributed engine. Disabled means one process, memory only. Exactly
// one of RedisURL, RedisSentinel and RedisCluster names the Redis when Enabled is true.
type Scaling struct {
	Enabled bool `mapstructure:"enabled"`
	// Redis URL of a standalone server, e.g. redis://user:pass@127.0.0.1:6379/0.
	RedisURL string `mapstructure:"redis_url"`
	// RedisSentinel names a master behind Redis Sentinel (the client follows failovers).
	RedisSentinel RedisSentinel `mapstructure:"redis_sentinel"`
	// RedisCluster lists seed nodes of a Redis Cluster.
	RedisCluster RedisCluster `mapstructure:"redis_cluster"`
	// Channel is the pub/sub channel name and key namespace (default "reverb").
	Channel string `mapstructure:"channel"`
	// NodeTimeout is how many seconds after its last heartbeat a node is declared dead and its
	// presence members and sockets are removed by the survivors (default 10).
	NodeTimeout int `mapstructure:"node_timeout"`
	// Routing is how publishes travel between nodes (default "interest"): "interest" sends a
	// channel's publishes only to the nodes with a subscriber of it and spreads the channels'
	// keys over Redis Cluster slots; "broadcast" is the single pub/sub channel and single hash
	// tag of earlier versions, to roll a cluster of them (see docs/scaling.md).
	Routing string `mapstructure:"routing"`
	// WebhookLease is how many seconds a node owns a webhook URL's outbox without renewing
	// it (default 15): a node that dies while delivering is taken over after at most this
	// long. It is renewed every quarter of it while a batch is in flight, so it must be
	// longer than every webhook's timeout plus that renewal interval.
	WebhookLease int `mapstructure:"webhook_lease"`
	// PublishTimeout is how many seconds an HTTP API publish waits for Redis to accept its
	// events (serial given, published) before it is answered 503 with Retry-After (default
	// 2): a 200 means every event of the request is in Redis.
	PublishTimeout float64 `mapstructure:"publish_timeout"`
}

// Routings scaling.routing accepts.
const (
	RoutingInterest  = "interest"
	RoutingBroadcast = "broadcast"
)

// RedisSentinel is a Sentinel-managed master. Password authenticates to the master and its
// replicas (the sentinels themselves are expected to run without a password).
type RedisSentinel struct {
	MasterName string   `mapstructure:"master_name"`
	Addrs      []string `mapstructure:"addrs"`
	Password   string   `mapstructure:"password"`
}

// Set reports whether any field is set (the topology was chosen).
func (s RedisSentinel) Set() bool { return s.MasterName != "" || len(s.Addrs) > 0 || s.Password != "" }

// RedisCluster is a Redis Cluster reached through any of its seed nodes.
type RedisCluster struct {
	Addrs    []string `mapstructure:"addrs"`
	Password string   `mapstructure:"password"`
}

// Set reports whether any field is set (the topology was chosen).
func (c RedisCluster) Set() bool { return len(c.Addrs) > 0 || c.Password != "" }

// Console is the embedded debug console at {server.path}/console (off by default). Token is
// the login secret; start-up refuses an enabled console without one.
type Console struct {
	Enabled bool   `mapstructure:"enabled"`
	Token   string `mapstructure:"token"`
}

// Client-event policies, Reverb's names.
const (
	ClientEventsMembers = "members"
	ClientEventsAll     = "all"
	ClientEventsNone    = "none"
)

// App is one tenant: its credentials and limits.
type App struct {
	ID     string `mapstructure:"app_id"`
	Key    string `mapstructure:"key"`
	Secret string `mapstructure:"secret"`
	// Enabled false refuses new connections with 4003 (default true).
	Enabled *bool `mapstructure:"enabled"`
	// AllowedOrigins are host globs; "*" allows every origin (default ["*"]).
	AllowedOrigins []string `mapstructure:"allowed_origins"`
	// PingInterval in seconds before the server pings an idle client (default 60).
	PingInterval int `mapstructure:"ping_interval"`
	// ActivityTimeout in seconds, sent to clients in connection_established (default 30).
	ActivityTimeout int `mapstructure:"activity_timeout"`
	// MaxConnections per app; 0 = unlimited.
	MaxConnections int `mapstructure:"max_connections"`
	// MaxMessageSize bounds client frames and event data in bytes (default 10000).
	MaxMessageSize int `mapstructure:"max_message_size"`
	// AcceptClientEventsFrom is members | all | none (default members).
	AcceptClientEventsFrom string `mapstructure:"accept_client_events_from"`
	// EnableUserAuthentication allows pusher:signin (default true).
	EnableUserAuthentication *bool `mapstructure:"enable_user_authentication"`
	// ClientEventRateLimit per connection per second; 0 = unlimited (default 10).
	ClientEventRateLimit *int `mapstructure:"client_event_rate_limit"`
	// RateLimiting is Reverb's per-connection message limit (ratelimit.go).
	RateLimiting RateLimiting `mapstructure:"rate_limiting"`
	// MaxPresenceMembers per presence channel (default 100).
	MaxPresenceMembers int `mapstructure:"max_presence_members"`
	// MaxBatchSize of batch_events (default 10).
	MaxBatchSize int `mapstructure:"max_batch_size"`
	// SubscriptionCount sends Pusher's pusher_internal:subscription_count to the subscribers
	// of every channel that is not presence when its cluster-wide count changes (at most once
	// a second per channel; default false).
	SubscriptionCount bool `mapstructure:"subscription_count"`
	// Recovery is per-channel history and resume (recovery.go); off by default.
	Recovery Recovery `mapstructure:"recovery"`
	// Toolmark configures the embedded bridge.
	Toolmark Toolmark `mapstructure:"toolmark"`
	// Webhooks receive signed event batches.
	Webhooks []Webhook `mapstructure:"webhooks"`
}

// Toolmark configures the bridge for one app.
type Toolmark struct {
	Enabled       bool `mapstructure:"enabled"`
	CallTimeoutMS int  `mapstructure:"call_timeout_ms"` // default 30000
	MaxTimeoutMS  int  `mapstructure:"max_timeout_ms"`  // default 600000
	// PageAuth is how the page's POSTs authenticate: "token" (default) requires the
	// X-Toolmark-Token the server sends on the page's channel as toolmark.session;
	// "socket_id" accepts the socket id alone (weaker: the id leaks through headers and logs).
	PageAuth string `mapstructure:"page_auth"`
	// Validate is when a call's input is checked against its tool's input schema before the
	// page sees it: "known" (default: when a describe of the page's current manifest was
	// answered on this node), "describe_first" (describe the tool first when not), "off".
	Validate string `mapstructure:"validate"`
	// MCP serves the app's page tools at {server.path}/toolmark/mcp (needs Enabled too).
	MCP ToolmarkMCP `mapstructure:"mcp"`
}

// ToolmarkMCP configures the MCP endpoint for one app: MCP clients authenticate with an HS256
// JWT signed with the app's secret (iss = the app's key), or with a token of the app's own
// authorization server (Issuer plus JWKSURL or JWKSFile; RS256, ES256 or EdDSA).
type ToolmarkMCP struct {
	Enabled bool `mapstructure:"enabled"` // default false: the endpoint answers 403 for this app
	// Issuer is the iss of the app's authorization server's tokens ("" = HS256 tokens only).
	Issuer string `mapstructure:"issuer"`
	// JWKSURL (http or https) or JWKSFile holds the server's public keys; exactly one with Issuer.
	JWKSURL  string `mapstructure:"jwks_url"`
	JWKSFile string `mapstructure:"jwks_file"`
	// AuthorizationServers are announced in the protected resource metadata (RFC 9728) so an
	// MCP client knows where to get a token (default: [Issuer] when Issuer is set).
	AuthorizationServers []string `mapstructure:"authorization_servers"`
	// MaxTokenLifetimeS refuses a token whose exp is further than this from its iat (or from
	// now without iat), in seconds (default 86400).
	MaxTokenLifetimeS int `mapstructure:"max_token_lifetime_s"`
}

// Input validation modes (toolmark.validate).
const (
	ValidateKnown         = "known"
	ValidateDescribeFirst = "describe_first"
	ValidateOff           = "off"
)

// Page authentication modes (toolmark.page_auth).
const (
	PageAuthToken    = "token"
	PageAuthSocketID = "socket_id"
)

// Webhook is one receiver. Empty EventTypes means every event.
type Webhook struct {
	URL        string   `mapstructure:"url"`
	EventTypes []string `mapstructure:"event_types"`
	// Headers are sent with every POST to URL, e.g. {Authorization: "Bearer ..."} for a
	// receiver behind a gateway. They cannot replace the headers the signature relies on.
	Headers map[string]string `mapstructure:"headers"`
	// Timeout bounds one POST, in seconds (default 10). With scaling it must be shorter
	// than scaling.webhook_lease minus its renewal interval (a quarter of the lease).
	Timeout int `mapstructure:"timeout"`
	// RetryFor is how long, in seconds, a batch that gets no 2xx is retried after its first
	// attempt before it is dropped (default 300, Pusher's 5 minutes).
	RetryFor int `mapstructure:"retry_for"`
}

// IsEnabled reports the effective enabled flag.
func (a *App) IsEnabled() bool { return a.Enabled == nil || *a.Enabled }

// UserAuthentication reports whether pusher:signin is allowed.
func (a *App) UserAuthentication() bool {
	return a.EnableUserAuthentication == nil || *a.EnableUserAuthentication
}

// ClientEventsPerSecond is the effective per-connection client event limit (0 = unlimited).
func (a *App) ClientEventsPerSecond() int {
	if a.ClientEventRateLimit == nil {
		return DefaultClientEventRateLimit
	}
	return *a.ClientEventRateLimit
}

// AppByID returns the app whose app_id is id, or nil. The HTTP API routes by app id
// (/apps/{id}/...), so this is an O(1) map lookup after Validate; before Validate it falls back
// to a scan so hand-built Configs in tests still work. Read-only: safe for concurrent use as
// long as nobody modifies the Config after Load.
func (c *Config) AppByID(id string) *App {
	if c.byID != nil {
		return c.byID[id]
	}
	for i := range c.Apps {
		if c.Apps[i].ID == id {
			return &c.Apps[i]
		}
	}
	return nil
}

// AppByKey returns the app whose key is key, or nil. WebSocket clients connect by key
// (/app/{key}); like AppByID it is an O(1) lookup after Validate and read-only after Load.
func (c *Config) AppByKey(key string) *App {
	if c.byKey != nil {
		return c.byKey[key]
	}
	for i := range c.Apps {
		if c.Apps[i].Key == key {
			return &c.Apps[i]
		}
	}
	return nil
}
