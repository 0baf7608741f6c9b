package config

import (
	"strings"
	"testing"
)

// Reverb 1.10's config/reverb.php: rate_limiting defaults to enabled false, max_attempts 60,
// decay_seconds 60, terminate_on_limit false, from REVERB_APP_RATE_LIMITING_ENABLED,
// REVERB_APP_RATE_LIMIT_MAX_ATTEMPTS, REVERB_APP_RATE_LIMIT_DECAY_SECONDS and
// REVERB_APP_RATE_LIMIT_TERMINATE (git show v1.10.2:config/reverb.php in laravel/reverb).
func TestRateLimitingConfig(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		env  map[string]string
		want RateLimiting
		err  string
	}{
		{"defaults", minimal, nil, RateLimiting{MaxAttempts: 60, DecaySeconds: 60}, ""},
		{"yaml", minimal + "    rate_limiting: {enabled: true, max_attempts: 5, decay_seconds: 2, terminate_on_limit: true}\n", nil,
			RateLimiting{Enabled: true, MaxAttempts: 5, DecaySeconds: 2, TerminateOnLimit: true}, ""},
		{"yaml partial keeps defaults", minimal + "    rate_limiting: {enabled: true}\n", nil,
			RateLimiting{Enabled: true, MaxAttempts: 60, DecaySeconds: 60}, ""},
		{"env", minimal, map[string]string{envRateLimitEnabled: "true", envRateLimitMax: "3", envRateLimitDecay: "7", envRateLimitTerminate: "true"},
			RateLimiting{Enabled: true, MaxAttempts: 3, DecaySeconds: 7, TerminateOnLimit: true}, ""},
		{"env laravel words", minimal, map[string]string{envRateLimitEnabled: "(TRUE)", envRateLimitTerminate: "1"},
			RateLimiting{Enabled: true, MaxAttempts: 60, DecaySeconds: 60, TerminateOnLimit: true}, ""},
		{"env overrides yaml", minimal + "    rate_limiting: {enabled: true, max_attempts: 5, terminate_on_limit: true}\n",
			map[string]string{envRateLimitEnabled: "false", envRateLimitTerminate: "0"},
			RateLimiting{MaxAttempts: 5, DecaySeconds: 60}, ""},
		{"env creates the app", "server: {port: 8080}\n", map[string]string{
			"REVERB_APP_ID": "e", "REVERB_APP_KEY": "ek", "REVERB_APP_SECRET": "es", envRateLimitEnabled: "true"},
			RateLimiting{Enabled: true, MaxAttempts: 60, DecaySeconds: 60}, ""},
		{"enabled=1 is refused (Reverb would leave it off)", minimal, map[string]string{envRateLimitEnabled: "1"}, RateLimiting{}, envRateLimitEnabled},
		{"terminate yes refused", minimal, map[string]string{envRateLimitTerminate: "yes"}, RateLimiting{}, envRateLimitTerminate},
		{"max not a number", minimal, map[string]string{envRateLimitMax: "lots"}, RateLimiting{}, envRateLimitMax},
		{"negative max", minimal + "    rate_limiting: {max_attempts: -1}\n", nil, RateLimiting{}, "apps[0].rate_limiting.max_attempts"},
		{"decay too long", minimal + "    rate_limiting: {decay_seconds: 86401}\n", nil, RateLimiting{}, "apps[0].rate_limiting.decay_seconds"},
		{"unknown key", minimal + "    rate_limiting: {enable: true}\n", nil, RateLimiting{}, "apps[0].rate_limiting.enable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clearEnv(t)
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			c, err := Load(writeFile(t, tt.yaml))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want it to name %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := c.Apps[0].RateLimiting; got != tt.want {
				t.Errorf("rate_limiting %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestUnknownReverbEnv(t *testing.T) {
	tests := []struct {
		env  []string
		want string
	}{
		{[]string{"REVERB_APP_KEY=k", "REVERB_HOST=x", "REVERBGO_BIN=/b", "PATH=/bin"}, ""},
		{[]string{"REVERB_APP_RATE_LIMIT_ENABLED=true", "REVERB_APP_KEY=k", "REVERB_SERVER_PROT=1"}, "REVERB_APP_RATE_LIMIT_ENABLED,REVERB_SERVER_PROT"},
		{[]string{"REVERB_="}, "REVERB_"},
	}
	for _, tt := range tests {
		if got := strings.Join(UnknownReverbEnv(tt.env), ","); got != tt.want {
			t.Errorf("UnknownReverbEnv(%v) = %q, want %q", tt.env, got, tt.want)
		}
	}
	ign := IgnoredReverbEnv([]string{"REDIS_TIMEOUT=60", "REVERB_HOST=h", "REVERB_PULSE_INGEST_INTERVAL=", "REVERB_APP_KEY=k"})
	if len(ign) != 1 || ign[0].Name != "REDIS_TIMEOUT" || ign[0].Note == "" {
		t.Errorf("IgnoredReverbEnv = %+v", ign)
	}
}
