package config

import (
	"strings"
	"testing"
)

// server.compression: off by default with min_bytes 256 and level 1; each key read from
// the file; a level outside 1..9 or a negative min_bytes stops start-up naming the key.
func TestCompressionConfig(t *testing.T) {
	clearEnv(t)
	tests := []struct {
		name, server string
		want         Compression
		err          string
	}{
		{"absent", "", Compression{Enabled: false, MinBytes: 256, Level: 1}, ""},
		{"enabled", "server: {compression: {enabled: true}}\n", Compression{Enabled: true, MinBytes: 256, Level: 1}, ""},
		{"every key", "server: {compression: {enabled: true, min_bytes: 1024, level: 9}}\n", Compression{Enabled: true, MinBytes: 1024, Level: 9}, ""},
		{"level 0 is the default", "server: {compression: {level: 0}}\n", Compression{MinBytes: 256, Level: 1}, ""},
		{"level 10", "server: {compression: {enabled: true, level: 10}}\n", Compression{}, "server.compression.level: must be between 1 (fastest) and 9 (smallest), got 10"},
		{"level negative", "server: {compression: {level: -1}}\n", Compression{}, "server.compression.level: must be between 1"},
		{"min_bytes negative", "server: {compression: {min_bytes: -1}}\n", Compression{}, "server.compression.min_bytes: must be >= 0"},
		{"unknown key", "server: {compression: {window_bits: 10}}\n", Compression{}, "server.compression.window_bits"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Load(writeFile(t, tt.server+minimal))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want one containing %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Server.Compression != tt.want {
				t.Fatalf("compression %+v, want %+v", c.Server.Compression, tt.want)
			}
		})
	}
}
