package config

// RateLimiting is Laravel Reverb's per-app message rate limit (Reverb 1.9+), with Reverb's
// keys and defaults: at most MaxAttempts messages per connection in a window of DecaySeconds
// that starts with the connection's first message of the window. A message over the limit
// is answered with pusher:error 4301 "Rate limit exceeded" and dropped, or, with
// TerminateOnLimit, ends the connection (pusher.messageLimiter says exactly how).
type RateLimiting struct {
	// Enabled turns the limit on (default false, REVERB_APP_RATE_LIMITING_ENABLED).
	Enabled bool `mapstructure:"enabled"`
	// MaxAttempts is the number of messages allowed per window (default 60,
	// REVERB_APP_RATE_LIMIT_MAX_ATTEMPTS).
	MaxAttempts int `mapstructure:"max_attempts"`
	// DecaySeconds is the window's length in seconds (default 60, at most 86400,
	// REVERB_APP_RATE_LIMIT_DECAY_SECONDS).
	DecaySeconds int `mapstructure:"decay_seconds"`
	// TerminateOnLimit ends the connection on the first message over the limit instead of
	// answering it with an error (default false, REVERB_APP_RATE_LIMIT_TERMINATE).
	TerminateOnLimit bool `mapstructure:"terminate_on_limit"`
}

// Reverb's rate-limiting defaults (config/reverb.php).
const (
	DefaultRateLimitMaxAttempts  = 60
	DefaultRateLimitDecaySeconds = 60
	// MaxRateLimitDecaySeconds bounds decay_seconds: a window longer than a day is a ban,
	// not a rate.
	MaxRateLimitDecaySeconds = 86400
)

func (r *RateLimiting) applyDefaults() {
	setInt(&r.MaxAttempts, DefaultRateLimitMaxAttempts)
	setInt(&r.DecaySeconds, DefaultRateLimitDecaySeconds)
}

func (r *RateLimiting) validate(v *validator, p string) {
	v.positive(p+".max_attempts", int64(r.MaxAttempts))
	v.positive(p+".decay_seconds", int64(r.DecaySeconds))
	if r.DecaySeconds > MaxRateLimitDecaySeconds {
		v.add(p+".decay_seconds", "must be at most %d, got %d", MaxRateLimitDecaySeconds, r.DecaySeconds)
	}
}
