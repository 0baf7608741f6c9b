package config

import (
	"strings"
	"testing"
	"time"
)

// TestDrain: absent keys take the defaults, an explicit 0 stays 0, a negative value is
// refused naming its key.
func TestDrain(t *testing.T) {
	clearEnv(t)
	tests := []struct {
		name          string
		server        string
		delay, period time.Duration
		err           string
	}{
		{"absent", "", 5 * time.Second, 10 * time.Second, ""},
		{"both off", "server: {drain_delay: 0, drain_period: 0}\n", 0, 0, ""},
		{"delay only", "server: {drain_delay: 3, drain_period: 0}\n", 3 * time.Second, 0, ""},
		{"period only", "server: {drain_period: 7}\n", 5 * time.Second, 7 * time.Second, ""},
		{"negative delay", "server: {drain_delay: -1}\n", 0, 0, "server.drain_delay: must be >= 0"},
		{"negative period", "server: {drain_period: -2}\n", 0, 0, "server.drain_period: must be >= 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Load(writeFile(t, tt.server+minimal))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d, p := c.Server.Drain(); d != tt.delay || p != tt.period {
				t.Fatalf("Drain() = %v, %v; want %v, %v", d, p, tt.delay, tt.period)
			}
		})
	}
}
