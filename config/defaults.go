package config

import "strings"

// Defaults, matching Laravel Reverb's config/reverb.php and Pusher's limits so that a config
// written for Reverb behaves the same here.
const (
	DefaultHost                 = "0.0.0.0"
	DefaultPort                 = 8080
	DefaultMaxRequestSize       = 10000
	DefaultShutdownTimeout      = 10
	DefaultPingInterval         = 60
	DefaultActivityTimeout      = 30
	DefaultMaxMessageSize       = 10000
	DefaultClientEventRateLimit = 10
	DefaultMaxPresenceMembers   = 100
	DefaultMaxBatchSize         = 10
	DefaultCallTimeoutMS        = 30000
	DefaultMaxTimeoutMS         = 600000
	DefaultMaxTokenLifetimeS    = 86400
	DefaultScalingChannel       = "reverb"
	DefaultNodeTimeout          = 10
	DefaultWebhookLease         = 15  // seconds
	DefaultPublishTimeout       = 2.0 // seconds
	DefaultWebhookTimeout       = 10  // seconds
	DefaultWebhookRetryFor      = 300 // seconds: Pusher's 5 minutes
	DefaultLogFormat            = "json"
	DefaultLogLevel             = "info"
	// DefaultWriteCoalesceMS: adaptive coalescing, up to 2 ms, on by default. Under load
	// it turns several writes per socket into one; idle, it adds nothing.
	DefaultWriteCoalesceMS = 2
	// MaxWriteCoalesceMS bounds server.write_coalesce_ms: a longer window is a delay, not
	// batching, for a realtime protocol.
	MaxWriteCoalesceMS = 1000
)

// ApplyDefaults fills every field left at its zero value with its default and normalises
// server.path. A zero number therefore means "default", except max_connections where 0 means
// unlimited, and client_event_rate_limit and server.write_coalesce_ms, pointers, where only
// an absent value takes the default and an explicit 0 means unlimited (respectively off). An
// empty allowed_origins list also means ["*"]: list the origins to restrict them.
// server.io_uring stays nil when absent (Server.IOUringEnabled: on), since how a refusing
// kernel is logged depends on whether it was set. ApplyDefaults is idempotent.
func (c *Config) ApplyDefaults() {
	s := &c.Server
	if s.Host == "" {
		s.Host = DefaultHost
	}
	if s.Port == 0 {
		s.Port = DefaultPort
	}
	s.Path = normalizePath(s.Path)
	s.PublicURL = strings.TrimRight(strings.TrimSpace(s.PublicURL), "/")
	for i, h := range s.PublicHosts {
		s.PublicHosts[i] = strings.ToLower(strings.TrimSpace(h))
	}
	if s.MaxRequestSize == 0 {
		s.MaxRequestSize = DefaultMaxRequestSize
	}
	if s.ShutdownTimeoutSeconds == 0 {
		s.ShutdownTimeoutSeconds = DefaultShutdownTimeout
	}
	if s.Log.Format == "" {
		s.Log.Format = DefaultLogFormat
	}
	if s.Log.Level == "" {
		s.Log.Level = DefaultLogLevel
	}
	if s.WriteCoalesceMS == nil {
		s.WriteCoalesceMS = ptr(DefaultWriteCoalesceMS)
	}
	s.Compression.applyDefaults()
	s.applyDrainDefaults()
	if c.Scaling.Channel == "" {
		c.Scaling.Channel = DefaultScalingChannel
	}
	setInt(&c.Scaling.NodeTimeout, DefaultNodeTimeout)
	if c.Scaling.Routing == "" {
		c.Scaling.Routing = RoutingInterest
	}
	setInt(&c.Scaling.WebhookLease, DefaultWebhookLease)
	if c.Scaling.PublishTimeout == 0 {
		c.Scaling.PublishTimeout = DefaultPublishTimeout
	}
	for i := range c.Apps {
		c.Apps[i].applyDefaults()
	}
}

func (a *App) applyDefaults() {
	if a.Enabled == nil {
		a.Enabled = ptr(true)
	}
	if len(a.AllowedOrigins) == 0 {
		a.AllowedOrigins = []string{"*"}
	}
	setInt(&a.PingInterval, DefaultPingInterval)
	setInt(&a.ActivityTimeout, DefaultActivityTimeout)
	setInt(&a.MaxMessageSize, DefaultMaxMessageSize)
	setInt(&a.MaxPresenceMembers, DefaultMaxPresenceMembers)
	setInt(&a.MaxBatchSize, DefaultMaxBatchSize)
	a.RateLimiting.applyDefaults()
	a.Recovery.applyDefaults()
	setInt(&a.Toolmark.CallTimeoutMS, DefaultCallTimeoutMS)
	setInt(&a.Toolmark.MaxTimeoutMS, DefaultMaxTimeoutMS)
	for i := range a.Webhooks {
		setInt(&a.Webhooks[i].Timeout, DefaultWebhookTimeout)
		setInt(&a.Webhooks[i].RetryFor, DefaultWebhookRetryFor)
	}
	setInt(&a.Toolmark.MCP.MaxTokenLifetimeS, DefaultMaxTokenLifetimeS)
	if m := &a.Toolmark.MCP; len(m.AuthorizationServers) == 0 && m.Issuer != "" {
		m.AuthorizationServers = []string{m.Issuer}
	}
	if a.Toolmark.PageAuth == "" {
		a.Toolmark.PageAuth = PageAuthToken
	}
	if a.Toolmark.Validate == "" {
		a.Toolmark.Validate = ValidateKnown
	}
	if a.AcceptClientEventsFrom == "" {
		a.AcceptClientEventsFrom = ClientEventsMembers
	}
	if a.EnableUserAuthentication == nil {
		a.EnableUserAuthentication = ptr(true)
	}
	if a.ClientEventRateLimit == nil {
		a.ClientEventRateLimit = ptr(DefaultClientEventRateLimit)
	}
}

func setInt(p *int, def int) {
	if *p == 0 {
		*p = def
	}
}

func ptr[T any](v T) *T { return &v }

// normalizePath turns a route prefix into "" or "/a/b": routers join it with "/app/{key}",
// so a missing leading or a trailing slash would produce "a/app" or "//app".
func normalizePath(p string) string {
	p = strings.Trim(strings.TrimSpace(p), "/")
	if p == "" {
		return ""
	}
	return "/" + p
}
