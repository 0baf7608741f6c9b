package config

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/reverbgo/reverbgo/origin"
)

// WebhookEventTypes are the names accepted in webhooks[].event_types: Pusher's webhook events
// plus the Toolmark bridge's. A typo there would silently never deliver, so Validate refuses
// names not in this list; add new event types here when the webhooks package learns them.
var WebhookEventTypes = []string{
	"channel_occupied",
	"channel_vacated",
	"member_added",
	"member_removed",
	"client_event",
	"cache_miss",
	"subscription_count",
	"toolmark_confirmed",
}

// FieldError is one invalid setting. Key is the setting's path as written in the YAML file
// (e.g. "apps[1].accept_client_events_from") so the operator knows what to fix.
type FieldError struct {
	Key string
	Msg string
}

func (e *FieldError) Error() string { return e.Key + ": " + e.Msg }

// validator collects every problem instead of stopping at the first, so one start-up attempt
// reports everything wrong with the file.
type validator struct{ errs []error }

func (v *validator) add(key, format string, args ...any) {
	v.errs = append(v.errs, &FieldError{Key: key, Msg: fmt.Sprintf(format, args...)})
}

func (v *validator) positive(key string, n int64) {
	if n <= 0 {
		v.add(key, "must be > 0, got %d", n)
	}
}

func (v *validator) nonNegative(key string, n int64) {
	if n < 0 {
		v.add(key, "must be >= 0, got %d", n)
	}
}

// Validate checks every setting and returns nil or the joined list of *FieldError, each
// naming its key. It does not fill defaults (call ApplyDefaults first; Load does both), so a
// zero that ApplyDefaults would have replaced is reported here. On success it also builds the
// indexes behind AppByID and AppByKey; the Config must not be modified afterwards.
func (c *Config) Validate() error {
	v := &validator{}
	c.validateServer(v)
	c.validateScaling(v)
	c.validateWebhookLease(v)
	if c.Console.Enabled && strings.TrimSpace(c.Console.Token) == "" {
		v.add("console.token", "is required when console.enabled is true")
	}
	c.validateOps(v)

	if len(c.Apps) == 0 {
		v.add("apps", "at least one app is required (in the config file or via REVERB_APP_ID, REVERB_APP_KEY and REVERB_APP_SECRET)")
	}
	byID := make(map[string]*App, len(c.Apps))
	byKey := make(map[string]*App, len(c.Apps))
	firstID := make(map[string]int, len(c.Apps))
	firstKey := make(map[string]int, len(c.Apps))
	firstIssuer := map[string]int{}
	for i := range c.Apps {
		a := &c.Apps[i]
		p := fmt.Sprintf("apps[%d]", i)
		a.validate(v, p)
		if a.ID != "" {
			if j, dup := firstID[a.ID]; dup {
				v.add(p+".app_id", "duplicate of apps[%d].app_id %q", j, a.ID)
			} else {
				firstID[a.ID], byID[a.ID] = i, a
			}
		}
		if a.Key != "" {
			if j, dup := firstKey[a.Key]; dup {
				v.add(p+".key", "duplicate of apps[%d].key", j)
			} else {
				firstKey[a.Key], byKey[a.Key] = i, a
			}
		}
		if iss := a.Toolmark.MCP.Issuer; iss != "" {
			// The issuer picks the app (and its keys) of a JWKS token: one app per issuer.
			if j, dup := firstIssuer[iss]; dup {
				v.add(p+".toolmark.mcp.issuer", "duplicate of apps[%d].toolmark.mcp.issuer %q", j, iss)
			} else {
				firstIssuer[iss] = i
			}
		}
	}
	c.validatePublicOrigin(v)
	if len(v.errs) > 0 {
		return errors.Join(v.errs...)
	}
	c.byID, c.byKey = byID, byKey
	return nil
}

func (c *Config) validateServer(v *validator) {
	s := &c.Server
	if s.Port < 1 || s.Port > 65535 {
		v.add("server.port", "must be between 1 and 65535, got %d", s.Port)
	}
	if s.Path != "" && (s.Path != normalizePath(s.Path) || strings.ContainsAny(s.Path, "?#% \t")) {
		v.add("server.path", "must be empty or like \"/prefix\" (leading slash, no trailing slash, no ?, #, %% or spaces), got %q", s.Path)
	}
	v.positive("server.max_request_size", s.MaxRequestSize)
	v.nonNegative("server.shutdown_timeout", int64(s.ShutdownTimeoutSeconds))
	s.validateDrain(v)
	if s.MaxConnections < -1 {
		v.add("server.max_connections", "must be -1 (no cap), 0 (from the open-file limit) or a positive count, got %d", s.MaxConnections)
	}
	if ms := s.WriteCoalesceMS; ms != nil && (*ms < 0 || *ms > MaxWriteCoalesceMS) {
		v.add("server.write_coalesce_ms", "must be between 0 (off) and %d milliseconds, got %d", MaxWriteCoalesceMS, *ms)
	}
	for i, tp := range s.TrustedProxies {
		if !validProxy(tp) {
			v.add(fmt.Sprintf("server.trusted_proxies[%d]", i), "must be an IP address or a CIDR prefix, got %q", tp)
		}
	}
	s.Compression.validate(v)
	if s.PublicURL != "" {
		if u, err := url.Parse(s.PublicURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
			(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
			v.add("server.public_url", "must be an absolute http(s) URL without path, query or fragment, like \"https://ws.example.com\", got %q", s.PublicURL)
		}
	}
	for i, h := range s.PublicHosts {
		if !validPublicHost(h) {
			v.add(fmt.Sprintf("server.public_hosts[%d]", i), "must be a host or host:port as clients send it in Host, like \"ws.example.com\" or \"ws.example.com:8443\", got %q", h)
		}
	}
	if s.PublicURL != "" && len(s.PublicHosts) > 0 {
		v.add("server.public_hosts", "must be empty when server.public_url is set (the MCP resource then comes from server.public_url, never from Host)")
	}
	switch {
	case s.TLS.Cert != "" && s.TLS.Key == "":
		v.add("server.tls.key", "must be set when server.tls.cert is set")
	case s.TLS.Cert == "" && s.TLS.Key != "":
		v.add("server.tls.cert", "must be set when server.tls.key is set")
	}
}

// validatePublicOrigin requires, when any app serves MCP, a way to know the MCP resource that
// the caller cannot choose: server.public_url, or server.public_hosts to check Host against.
// Without either the resource (the aud every token must name) would be built from whatever
// Host a request sends, so a token issued by the same issuer for another deployment would be
// accepted by sending that deployment's Host.
func (c *Config) validatePublicOrigin(v *validator) {
	s := &c.Server
	if s.PublicURL != "" || len(s.PublicHosts) > 0 {
		return
	}
	for i := range c.Apps {
		if tm := &c.Apps[i].Toolmark; tm.Enabled && tm.MCP.Enabled {
			v.add("server.public_url", "or server.public_hosts is required when MCP is enabled (apps[%d].toolmark.mcp.enabled): "+
				"set server.public_url to the URL clients reach this server at, like \"https://ws.example.com\", "+
				"or list the Host names clients use in server.public_hosts; the MCP token audience is never taken from an unchecked Host", i)
			return
		}
	}
}

// validPublicHost accepts host or host:port (a name, IPv4 or [IPv6]) with nothing else: no
// scheme, user info, path, query or fragment.
func validPublicHost(h string) bool {
	if h == "" || strings.ContainsAny(h, "/?#@ \t") {
		return false
	}
	u, err := url.Parse("http://" + h)
	if err != nil || u.Host != h || u.Hostname() == "" {
		return false
	}
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		return err == nil && n >= 1 && n <= 65535
	}
	return !strings.HasSuffix(h, ":")
}

func (c *Config) validateScaling(v *validator) {
	sc := &c.Scaling
	var chosen []string
	if sc.RedisURL != "" {
		chosen = append(chosen, "scaling.redis_url")
	}
	if sc.RedisSentinel.Set() {
		chosen = append(chosen, "scaling.redis_sentinel")
	}
	if sc.RedisCluster.Set() {
		chosen = append(chosen, "scaling.redis_cluster")
	}
	switch {
	case len(chosen) > 1:
		v.add(chosen[1], "set exactly one of scaling.redis_url, scaling.redis_sentinel, scaling.redis_cluster (got %s)", strings.Join(chosen, " and "))
	case sc.Enabled && len(chosen) == 0:
		v.add("scaling.redis_url", "required when scaling.enabled is true (or scaling.redis_sentinel / scaling.redis_cluster; or set REDIS_URL or REDIS_HOST)")
	}
	if sc.RedisURL != "" {
		u, err := url.Parse(sc.RedisURL)
		switch {
		case err != nil:
			// url.Parse errors quote the URL, which may hold a password; keep it out of logs.
			v.add("scaling.redis_url", "is not a valid URL")
		case u.Scheme != "redis" && u.Scheme != "rediss" && u.Scheme != "unix":
			v.add("scaling.redis_url", "scheme must be redis, rediss or unix, got %q", u.Scheme)
		}
	}
	if sc.RedisSentinel.Set() {
		if sc.RedisSentinel.MasterName == "" {
			v.add("scaling.redis_sentinel.master_name", "must not be empty")
		}
		checkAddrs(v, "scaling.redis_sentinel.addrs", sc.RedisSentinel.Addrs)
	}
	if sc.RedisCluster.Set() {
		checkAddrs(v, "scaling.redis_cluster.addrs", sc.RedisCluster.Addrs)
	}
	if sc.Enabled && sc.Channel == "" {
		v.add("scaling.channel", "must not be empty when scaling is enabled")
	}
	if sc.Channel != "" && strings.ContainsAny(sc.Channel, "{}") {
		// The channel goes inside the Redis Cluster hash tag of every key.
		v.add("scaling.channel", "must not contain { or }, got %q", sc.Channel)
	}
	if sc.Routing != RoutingInterest && sc.Routing != RoutingBroadcast {
		v.add("scaling.routing", "must be %q or %q, got %q", RoutingInterest, RoutingBroadcast, sc.Routing)
	}
	if sc.NodeTimeout < 2 || sc.NodeTimeout > 3600 {
		v.add("scaling.node_timeout", "must be between 2 and 3600 seconds, got %d", sc.NodeTimeout)
	}
	if sc.PublishTimeout < 0.05 || sc.PublishTimeout > 60 {
		v.add("scaling.publish_timeout", "must be between 0.05 and 60 seconds, got %g", sc.PublishTimeout)
	}
}

// checkAddrs requires a non-empty list of host:port addresses.
func checkAddrs(v *validator, key string, addrs []string) {
	if len(addrs) == 0 {
		v.add(key, "must list at least one host:port")
	}
	for i, a := range addrs {
		host, port, err := net.SplitHostPort(a)
		if n, perr := strconv.Atoi(port); err != nil || host == "" || perr != nil || n < 1 || n > 65535 {
			v.add(fmt.Sprintf("%s[%d]", key, i), "must be host:port, got %q", a)
		}
	}
}

func (a *App) validate(v *validator, p string) {
	// app_id and key appear in URL paths (/apps/{id}, /app/{key}) and the key is the part of
	// "key:signature" before the colon, so characters that would break either are refused.
	checkToken(v, p+".app_id", a.ID, "/?#%")
	checkToken(v, p+".key", a.Key, "/?#%:")
	if a.Secret == "" {
		v.add(p+".secret", "must not be empty")
	}
	for j, o := range a.AllowedOrigins {
		if strings.TrimSpace(o) == "" {
			v.add(fmt.Sprintf("%s.allowed_origins[%d]", p, j), "must not be empty")
		} else if err := origin.Validate(o); err != nil {
			// A pattern the matcher cannot read would silently never match.
			v.add(fmt.Sprintf("%s.allowed_origins[%d]", p, j), "%v", err)
		}
	}
	v.positive(p+".ping_interval", int64(a.PingInterval))
	v.positive(p+".activity_timeout", int64(a.ActivityTimeout))
	v.nonNegative(p+".max_connections", int64(a.MaxConnections))
	v.positive(p+".max_message_size", int64(a.MaxMessageSize))
	switch a.AcceptClientEventsFrom {
	case ClientEventsMembers, ClientEventsAll, ClientEventsNone:
	default:
		v.add(p+".accept_client_events_from", "must be one of members, all, none, got %q", a.AcceptClientEventsFrom)
	}
	if a.ClientEventRateLimit != nil {
		v.nonNegative(p+".client_event_rate_limit", int64(*a.ClientEventRateLimit))
	}
	v.positive(p+".max_presence_members", int64(a.MaxPresenceMembers))
	v.positive(p+".max_batch_size", int64(a.MaxBatchSize))
	a.RateLimiting.validate(v, p+".rate_limiting")
	a.Recovery.validate(v, p+".recovery")

	t := &a.Toolmark
	v.positive(p+".toolmark.call_timeout_ms", int64(t.CallTimeoutMS))
	v.positive(p+".toolmark.max_timeout_ms", int64(t.MaxTimeoutMS))
	if t.CallTimeoutMS > t.MaxTimeoutMS && t.MaxTimeoutMS > 0 {
		v.add(p+".toolmark.call_timeout_ms", "must not exceed toolmark.max_timeout_ms (%d), got %d", t.MaxTimeoutMS, t.CallTimeoutMS)
	}

	switch t.PageAuth {
	case PageAuthToken, PageAuthSocketID:
	default:
		v.add(p+".toolmark.page_auth", "must be one of token, socket_id, got %q", t.PageAuth)
	}
	switch t.Validate {
	case ValidateKnown, ValidateDescribeFirst, ValidateOff:
	default:
		v.add(p+".toolmark.validate", "must be one of known, describe_first, off, got %q", t.Validate)
	}
	a.validateMCP(v, p+".toolmark.mcp")

	for j, w := range a.Webhooks {
		wp := fmt.Sprintf("%s.webhooks[%d]", p, j)
		if u, err := url.Parse(w.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			v.add(wp+".url", "must be an absolute http(s) URL, got %q", w.URL)
		}
		for k, et := range w.EventTypes {
			if !slices.Contains(WebhookEventTypes, et) {
				v.add(fmt.Sprintf("%s.event_types[%d]", wp, k), "unknown event type %q (known: %s)", et, strings.Join(WebhookEventTypes, ", "))
			}
		}
		checkWebhookHeaders(v, wp+".headers", w.Headers)
		v.positive(wp+".timeout", int64(w.Timeout))
		v.positive(wp+".retry_for", int64(w.RetryFor))
	}
}

// validateWebhookLease: with scaling, a webhook's POST must end (its timeout) before the
// outbox lease could lapse after a renewal that came just too late (one renewal interval,
// a quarter of the lease); otherwise another node could take the batch while it is posted.
func (c *Config) validateWebhookLease(v *validator) {
	if !c.Scaling.Enabled {
		return
	}
	lease := c.Scaling.WebhookLease
	v.positive("scaling.webhook_lease", int64(lease))
	if lease <= 0 {
		return
	}
	for i, a := range c.Apps {
		for j, w := range a.Webhooks {
			// lease > timeout + lease/4, in milliseconds so a quarter second counts.
			if int64(lease)*1000 <= int64(w.Timeout)*1000+int64(lease)*250 {
				v.add(fmt.Sprintf("apps[%d].webhooks[%d].timeout", i, j),
					"must be shorter than scaling.webhook_lease (%d s) minus its renewal interval (a quarter of it), got %d s; raise scaling.webhook_lease", lease, w.Timeout)
			}
		}
	}
}

// validProxy accepts what httpguard.ParseProxy parses: an IP address or a CIDR prefix.
func validProxy(s string) bool {
	s = strings.TrimSpace(s)
	if strings.Contains(s, "/") {
		_, err := netip.ParsePrefix(s)
		return err == nil
	}
	_, err := netip.ParseAddr(s)
	return err == nil
}

// checkToken requires a non-empty printable ASCII string without spaces or any of forbidden.
func checkToken(v *validator, key, s, forbidden string) {
	if s == "" {
		v.add(key, "must not be empty")
		return
	}
	for _, r := range s {
		if r <= ' ' || r > '~' || strings.ContainsRune(forbidden, r) {
			v.add(key, "must be printable ASCII without spaces or any of %q, got %q", forbidden, s)
			return
		}
	}
}

// validateMCP checks the app's MCP token settings: an issuer needs exactly one key source, and
// every URL announced or fetched is absolute.
func (a *App) validateMCP(v *validator, p string) {
	m := &a.Toolmark.MCP
	v.positive(p+".max_token_lifetime_s", int64(m.MaxTokenLifetimeS))
	absolute := func(key, s string) {
		if u, err := url.Parse(s); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			v.add(key, "must be an absolute http(s) URL, got %q", s)
		}
	}
	switch {
	case m.Issuer == "" && (m.JWKSURL != "" || m.JWKSFile != ""):
		v.add(p+".issuer", "must be set with jwks_url or jwks_file")
	case m.Issuer != "" && m.JWKSURL == "" && m.JWKSFile == "":
		v.add(p+".jwks_url", "one of jwks_url and jwks_file must be set with issuer")
	case m.JWKSURL != "" && m.JWKSFile != "":
		v.add(p+".jwks_file", "must not be set with jwks_url (one key source)")
	}
	if m.Issuer == a.Key && m.Issuer != "" {
		v.add(p+".issuer", "must differ from the app key (the iss of the HS256 tokens)")
	}
	if m.JWKSURL != "" {
		absolute(p+".jwks_url", m.JWKSURL)
	}
	for j, s := range m.AuthorizationServers {
		absolute(fmt.Sprintf("%s.authorization_servers[%d]", p, j), s)
	}
}
