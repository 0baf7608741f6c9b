package config

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/viper"
)

// DefaultPath is the file Load reads when given "".
const DefaultPath = "config.yaml"

// Load reads the YAML file at path (./config.yaml when path is ""), applies the environment
// overrides with Laravel Reverb's variable names, fills defaults and validates. The order
// (file, then environment, then defaults) means an environment variable wins over the file,
// and an app created only from REVERB_APP_* still gets every default.
//
// Unknown keys anywhere in the file are an error naming them, because a misspelt limit that
// is silently ignored is worse than a refused start. When path is "" and ./config.yaml does
// not exist, the configuration comes from the environment alone, as with Laravel's .env; an
// explicit path must exist. Every error names the offending key or variable.
func Load(path string) (*Config, error) {
	file := path
	if file == "" {
		file = DefaultPath
	}
	v := viper.New()
	v.SetConfigFile(file)
	v.SetConfigType("yaml") // whatever the extension: the format is documented as YAML
	var cfg Config
	if err := v.ReadInConfig(); err != nil {
		if !(path == "" && errors.Is(err, fs.ErrNotExist)) {
			return nil, fmt.Errorf("config %s: %w", file, err)
		}
	} else if err := decode(v, &cfg); err != nil {
		return nil, fmt.Errorf("config %s: %w", file, err)
	}
	if err := cfg.applyEnv(os.LookupEnv); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("config %s: %w", file, err)
	}
	return &cfg, nil
}

// decode unmarshals with viper.UnmarshalExact, the authority on unknown keys. Its error lists
// them per parent ("'apps[0]' has invalid keys: x"), so on failure a second, lenient decode
// collects their full paths ("apps[0].x") for a message an operator can act on directly.
func decode(v *viper.Viper, cfg *Config) error {
	err := v.UnmarshalExact(cfg)
	if err == nil {
		return nil
	}
	var md mapstructure.Metadata
	var scratch Config
	if v.Unmarshal(&scratch, func(dc *mapstructure.DecoderConfig) { dc.Metadata = &md }) == nil && len(md.Unused) > 0 {
		sort.Strings(md.Unused)
		return fmt.Errorf("unknown key(s): %s", strings.Join(md.Unused, ", "))
	}
	return errors.New(strings.TrimPrefix(err.Error(), "decoding failed due to the following error(s):\n\n"))
}

// lookupFunc has the signature of os.LookupEnv, so tests can pass a map.
type lookupFunc func(string) (string, bool)

// env reads a variable the way Laravel's env() does: "null" and "(null)" mean unset (Laravel's
// default .env has REDIS_PASSWORD=null), "empty" and "(empty)" mean the empty string. An empty
// value also counts as unset so that template lines like "REDIS_URL=" change nothing.
func (l lookupFunc) env(name string) (string, bool) {
	s, ok := l(name)
	s = strings.TrimSpace(s)
	switch strings.ToLower(s) {
	case "", "null", "(null)":
		return "", false
	case "empty", "(empty)":
		return "", true
	}
	return s, ok
}

func (l lookupFunc) int(name string, dst *int) error {
	s, ok := l.env(name)
	if !ok {
		return nil
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return fmt.Errorf("%s: %q is not an integer", name, s)
	}
	*dst = n
	return nil
}

func (l lookupFunc) str(name string, dst *string) {
	if s, ok := l.env(name); ok {
		*dst = s
	}
}

// applyEnv overrides the decoded file with Laravel Reverb's environment variables. REVERB_APP_*
// set the first app, creating it when the file defines none, so a Laravel .env alone is enough
// to run one app. REDIS_URL replaces scaling.redis_url; otherwise REDIS_HOST, REDIS_PORT,
// REDIS_USERNAME, REDIS_PASSWORD and REDIS_DB replace those parts of it (starting from
// redis://127.0.0.1:6379 when the file has no URL), mirroring Reverb's scaling.server options,
// unless a Sentinel or Cluster topology is configured (see applyTopologyEnv).
func (c *Config) applyEnv(lookup func(string) (string, bool)) error {
	l := lookupFunc(lookup)
	l.str("REVERB_SERVER_HOST", &c.Server.Host)
	l.str("REVERB_SERVER_PATH", &c.Server.Path)
	l.str("REVERB_SCALING_CHANNEL", &c.Scaling.Channel)
	if err := l.int("REVERB_SERVER_PORT", &c.Server.Port); err != nil {
		return err
	}
	if s, ok := l.env("REVERB_MAX_REQUEST_SIZE"); ok {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fmt.Errorf("REVERB_MAX_REQUEST_SIZE: %q is not an integer", s)
		}
		c.Server.MaxRequestSize = n
	}
	if s, ok := l.env("REVERB_SCALING_ENABLED"); ok {
		b, err := strconv.ParseBool(strings.Trim(s, "()"))
		if err != nil {
			return fmt.Errorf("REVERB_SCALING_ENABLED: %q is not a boolean", s)
		}
		c.Scaling.Enabled = b
	}
	if err := c.applyAppEnv(l); err != nil {
		return err
	}
	return c.applyRedisEnv(l)
}

// appEnvNames are the per-app variables of Laravel's config/reverb.php; they apply to apps[0].
var appEnvNames = []string{
	"REVERB_APP_ID", "REVERB_APP_KEY", "REVERB_APP_SECRET",
	"REVERB_APP_PING_INTERVAL", "REVERB_APP_ACTIVITY_TIMEOUT", "REVERB_APP_MAX_CONNECTIONS",
	"REVERB_APP_MAX_MESSAGE_SIZE", "REVERB_APP_ACCEPT_CLIENT_EVENTS_FROM",
	envRateLimitEnabled, envRateLimitMax, envRateLimitDecay, envRateLimitTerminate,
}

func (c *Config) applyAppEnv(l lookupFunc) error {
	set := false
	for _, name := range appEnvNames {
		if _, ok := l.env(name); ok {
			set = true
			break
		}
	}
	if !set {
		return nil
	}
	if len(c.Apps) == 0 {
		c.Apps = append(c.Apps, App{})
	}
	a := &c.Apps[0]
	l.str("REVERB_APP_ID", &a.ID)
	l.str("REVERB_APP_KEY", &a.Key)
	l.str("REVERB_APP_SECRET", &a.Secret)
	l.str("REVERB_APP_ACCEPT_CLIENT_EVENTS_FROM", &a.AcceptClientEventsFrom)
	for _, e := range []struct {
		name string
		dst  *int
	}{
		{"REVERB_APP_PING_INTERVAL", &a.PingInterval},
		{"REVERB_APP_ACTIVITY_TIMEOUT", &a.ActivityTimeout},
		{"REVERB_APP_MAX_CONNECTIONS", &a.MaxConnections},
		{"REVERB_APP_MAX_MESSAGE_SIZE", &a.MaxMessageSize},
	} {
		if err := l.int(e.name, e.dst); err != nil {
			return err
		}
	}
	return applyRateLimitEnv(l, &a.RateLimiting)
}

// splitList splits a comma-separated environment value into trimmed, non-empty items.
func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// applyTopologyEnv maps the Sentinel and Cluster variables. REDIS_CLUSTER is Laravel's name,
// but Laravel sets it to the client-side driver ("redis" or "predis") by default, so only a
// value that lists addresses (contains ':') selects scaling.redis_cluster. Sentinel uses the
// names of the common Laravel Sentinel packages: REDIS_SENTINEL_HOST (comma-separated, each
// host or host:port), REDIS_SENTINEL_PORT (default 26379) and REDIS_SENTINEL_SERVICE (the
// master name, default "mymaster"). REDIS_PASSWORD then authenticates to the chosen topology.
// It reports whether a Sentinel or Cluster topology is configured (file or environment).
func (c *Config) applyTopologyEnv(l lookupFunc) (bool, error) {
	sc := &c.Scaling
	if s, ok := l.env("REDIS_CLUSTER"); ok && strings.Contains(s, ":") {
		sc.RedisCluster.Addrs = splitList(s)
	}
	if s, ok := l.env("REDIS_SENTINEL_HOST"); ok {
		port := "26379"
		if p, ok := l.env("REDIS_SENTINEL_PORT"); ok {
			if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
				return false, fmt.Errorf("REDIS_SENTINEL_PORT: %q is not a port number", p)
			}
			port = p
		}
		sc.RedisSentinel.Addrs = nil
		for _, h := range splitList(s) {
			if _, _, err := net.SplitHostPort(h); err != nil {
				h = net.JoinHostPort(h, port)
			}
			sc.RedisSentinel.Addrs = append(sc.RedisSentinel.Addrs, h)
		}
		if sc.RedisSentinel.MasterName == "" {
			sc.RedisSentinel.MasterName = "mymaster"
		}
	}
	l.str("REDIS_SENTINEL_SERVICE", &sc.RedisSentinel.MasterName)
	switch {
	case sc.RedisCluster.Set():
		l.str("REDIS_PASSWORD", &sc.RedisCluster.Password)
	case sc.RedisSentinel.Set():
		l.str("REDIS_PASSWORD", &sc.RedisSentinel.Password)
	default:
		return false, nil
	}
	return true, nil
}

func (c *Config) applyRedisEnv(l lookupFunc) error {
	if s, ok := l.env("REDIS_URL"); ok {
		c.Scaling.RedisURL = s
		return nil
	}
	// A Laravel .env always carries REDIS_HOST and REDIS_PORT; with a Sentinel or Cluster
	// topology they must not conjure up a standalone redis_url next to it.
	if topo, err := c.applyTopologyEnv(l); err != nil || topo {
		return err
	}
	host, hasHost := l.env("REDIS_HOST")
	port, hasPort := l.env("REDIS_PORT")
	user, hasUser := l.env("REDIS_USERNAME")
	pass, hasPass := l.env("REDIS_PASSWORD")
	db, hasDB := l.env("REDIS_DB")
	if !hasHost && !hasPort && !hasUser && !hasPass && !hasDB {
		return nil
	}
	base := c.Scaling.RedisURL
	if base == "" {
		base = "redis://127.0.0.1:6379"
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") {
		// REDIS_HOST and friends describe a TCP server; a unix socket or broken URL in the file
		// cannot be patched, so say which setting is in the way (without echoing a password).
		return errors.New("REDIS_HOST/REDIS_PORT/REDIS_PASSWORD: scaling.redis_url is not a redis:// or rediss:// URL to apply them to")
	}
	if hasPort {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("REDIS_PORT: %q is not a port number", port)
		}
	} else {
		port = u.Port()
		if port == "" {
			port = "6379"
		}
	}
	if !hasHost {
		host = u.Hostname()
	}
	u.Host = net.JoinHostPort(host, port)
	if hasUser || hasPass {
		if !hasUser {
			user = u.User.Username()
		}
		if !hasPass {
			pass, _ = u.User.Password()
		}
		switch {
		case user == "" && pass == "":
			u.User = nil
		case pass == "":
			u.User = url.User(user)
		default:
			u.User = url.UserPassword(user, pass)
		}
	}
	if hasDB {
		if n, err := strconv.Atoi(db); err != nil || n < 0 {
			return fmt.Errorf("REDIS_DB: %q is not a database number", db)
		}
		u.Path = "/" + db
	}
	c.Scaling.RedisURL = u.String()
	return nil
}
