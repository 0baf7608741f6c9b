package config

import (
	"fmt"
	"sort"
	"strings"
)

// Reverb's rate-limiting variables (config/reverb.php, Reverb 1.9+); they apply to apps[0]
// like the other REVERB_APP_* names.
const (
	envRateLimitEnabled   = "REVERB_APP_RATE_LIMITING_ENABLED"
	envRateLimitMax       = "REVERB_APP_RATE_LIMIT_MAX_ATTEMPTS"
	envRateLimitDecay     = "REVERB_APP_RATE_LIMIT_DECAY_SECONDS"
	envRateLimitTerminate = "REVERB_APP_RATE_LIMIT_TERMINATE"
)

// applyRateLimitEnv maps Reverb's rate-limiting variables onto r. Laravel's env() turns only
// true/(true) and false/(false) into booleans, and Reverb enables the limit only for a real
// true (Application::usesRateLimiting compares with ===), so "1" would leave Reverb's limit
// off: rather than guess, such a value stops start-up naming the variable. The terminate
// flag is read for truthiness in Reverb, so 1 and 0 are accepted there too.
func applyRateLimitEnv(l lookupFunc, r *RateLimiting) error {
	if s, ok := l.env(envRateLimitEnabled); ok {
		b, ok := laravelBool(s, false)
		if !ok {
			return fmt.Errorf("%s: %q is not true or false (Reverb enables rate limiting only for true)", envRateLimitEnabled, s)
		}
		r.Enabled = b
	}
	if s, ok := l.env(envRateLimitTerminate); ok {
		b, ok := laravelBool(s, true)
		if !ok {
			return fmt.Errorf("%s: %q is not true, false, 1 or 0", envRateLimitTerminate, s)
		}
		r.TerminateOnLimit = b
	}
	if err := l.int(envRateLimitMax, &r.MaxAttempts); err != nil {
		return err
	}
	return l.int(envRateLimitDecay, &r.DecaySeconds)
}

// laravelBool reads a boolean as Laravel's env() writes one ("true", "(true)", "false",
// "(false)", any case); "0" is false as in PHP, and "1" true only when digits is set.
func laravelBool(s string, digits bool) (value, ok bool) {
	switch strings.ToLower(s) {
	case "true", "(true)":
		return true, true
	case "false", "(false)", "0":
		return false, true
	case "1":
		return true, digits
	}
	return false, false
}

// ReverbEnvUse says what reverbgo does with one environment variable of Laravel Reverb's
// config/reverb.php (or of a Laravel .env next to it).
type ReverbEnvUse struct {
	Name string
	// Applied is true when reverbgo honours the variable with Reverb's meaning.
	Applied bool
	// Note is the setting it maps to, or why it is not applied.
	Note string
}

// ReverbEnv lists every REVERB_* and REDIS_* variable of Reverb 1.10's config/reverb.php,
// plus the ones reverbgo reads beyond it, and what reverbgo does with each. config check
// warns about a set REVERB_* variable that is not in this list.
var ReverbEnv = []ReverbEnvUse{
	{"REVERB_SERVER", false, "Laravel's choice of server for `php artisan reverb:start` (only \"reverb\" exists); reverbgo is the server"},
	{"REVERB_SERVER_HOST", true, "server.host"},
	{"REVERB_SERVER_PORT", true, "server.port"},
	{"REVERB_SERVER_PATH", true, "server.path"},
	{"REVERB_HOST", false, "where Laravel and the browser reach the server (the app's options.host, and the server's hostname Reverb uses to find a Herd/Valet certificate); reverbgo takes its certificate from server.tls"},
	{"REVERB_PORT", false, "the port Laravel and the browser connect to (the app's options.port), not the listening port (REVERB_SERVER_PORT)"},
	{"REVERB_SCHEME", false, "http or https for Laravel and the browser (the app's options.scheme/useTLS); reverbgo serves TLS when server.tls is set"},
	{"REVERB_MAX_REQUEST_SIZE", true, "server.max_request_size (HTTP API bodies; headers have their own 64 KiB bound)"},
	{"REVERB_SCALING_ENABLED", true, "scaling.enabled"},
	{"REVERB_SCALING_CHANNEL", true, "scaling.channel"},
	{"REVERB_PULSE_INGEST_INTERVAL", false, "Laravel Pulse records inside Reverb's PHP process; reverbgo exports Prometheus metrics instead (metrics.enabled)"},
	{"REVERB_TELESCOPE_INGEST_INTERVAL", false, "Laravel Telescope records inside Reverb's PHP process; reverbgo has the debug console and logs instead"},
	{"REVERB_APP_KEY", true, "apps[0].key"},
	{"REVERB_APP_SECRET", true, "apps[0].secret"},
	{"REVERB_APP_ID", true, "apps[0].app_id"},
	{"REVERB_APP_PING_INTERVAL", true, "apps[0].ping_interval"},
	{"REVERB_APP_ACTIVITY_TIMEOUT", true, "apps[0].activity_timeout"},
	{"REVERB_APP_MAX_CONNECTIONS", true, "apps[0].max_connections (unset or 0 = unlimited)"},
	{"REVERB_APP_MAX_MESSAGE_SIZE", true, "apps[0].max_message_size"},
	{"REVERB_APP_ACCEPT_CLIENT_EVENTS_FROM", true, "apps[0].accept_client_events_from"},
	{envRateLimitEnabled, true, "apps[0].rate_limiting.enabled"},
	{envRateLimitMax, true, "apps[0].rate_limiting.max_attempts"},
	{envRateLimitDecay, true, "apps[0].rate_limiting.decay_seconds"},
	{envRateLimitTerminate, true, "apps[0].rate_limiting.terminate_on_limit"},
	{"REDIS_URL", true, "scaling.redis_url"},
	{"REDIS_HOST", true, "host of scaling.redis_url"},
	{"REDIS_PORT", true, "port of scaling.redis_url"},
	{"REDIS_USERNAME", true, "user of scaling.redis_url"},
	{"REDIS_PASSWORD", true, "password of scaling.redis_url (or of Sentinel/Cluster)"},
	{"REDIS_DB", true, "database of scaling.redis_url"},
	{"REDIS_TIMEOUT", false, "Reverb gives up (and exits) after this many seconds without Redis; reverbgo keeps serving its own sockets and reconnects with backoff for ever"},
	{"REDIS_CLUSTER", true, "scaling.redis_cluster.addrs when it lists host:port seeds (Laravel's own values redis/predis are ignored)"},
	{"REDIS_SENTINEL_HOST", true, "scaling.redis_sentinel.addrs"},
	{"REDIS_SENTINEL_PORT", true, "port of scaling.redis_sentinel.addrs (26379)"},
	{"REDIS_SENTINEL_SERVICE", true, "scaling.redis_sentinel.master_name"},
}

// UnknownReverbEnv returns, sorted, the REVERB_* variables set in environ (os.Environ's
// "NAME=value" form) that are not in ReverbEnv: a misspelt or newer Reverb setting that
// reverbgo would otherwise ignore without a word. REVERBGO_* names are reverbgo's own.
func UnknownReverbEnv(environ []string) []string {
	known := make(map[string]bool, len(ReverbEnv))
	for _, e := range ReverbEnv {
		known[e.Name] = true
	}
	var out []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "REVERB_") && !known[name] {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// IgnoredReverbEnv returns the variables of ReverbEnv set (non-empty) in environ that
// reverbgo does not apply, except the ones a Laravel .env always carries for the client
// side (REVERB_HOST, REVERB_PORT, REVERB_SCHEME), with the reason for each.
func IgnoredReverbEnv(environ []string) []ReverbEnvUse {
	set := make(map[string]bool, len(environ))
	for _, kv := range environ {
		name, value, _ := strings.Cut(kv, "=")
		if strings.TrimSpace(value) != "" {
			set[name] = true
		}
	}
	var out []ReverbEnvUse
	for _, e := range ReverbEnv {
		switch e.Name {
		case "REVERB_HOST", "REVERB_PORT", "REVERB_SCHEME":
			continue
		}
		if !e.Applied && set[e.Name] {
			out = append(out, e)
		}
	}
	return out
}
