package config

import (
	"strings"
	"testing"
)

func TestOpsValidation(t *testing.T) {
	clearEnv(t)
	tests := []struct {
		name string
		yaml string
		want string // "" = valid
	}{
		{"defaults", minimal, ""},
		{"text debug", "server: {log: {format: text, level: debug}}\n" + minimal, ""},
		{"bad format", "server: {log: {format: xml}}\n" + minimal, `server.log.format: must be json or text, got "xml"`},
		{"bad level", "server: {log: {level: verbose}}\n" + minimal, `server.log.level: must be one of debug, info, warn, error, got "verbose"`},
		{"unknown log key", "server: {log: {colour: true}}\n" + minimal, "server.log.colour"},
		{"metrics on own listener", "metrics: {enabled: true, listen: '127.0.0.1:9601', token: s3cr3t}\n" + minimal, ""},
		{"metrics listen without port", "metrics: {listen: '127.0.0.1'}\n" + minimal, `metrics.listen: must be empty or host:port`},
		{"metrics listen bad port", "metrics: {listen: ':99999'}\n" + minimal, `metrics.listen: must be empty or host:port`},
		{"metrics listen = main", "server: {host: 127.0.0.1, port: 9000}\nmetrics: {listen: '127.0.0.1:9000'}\n" + minimal, "metrics.listen: must differ"},
		{"metrics token space", "metrics: {token: 'a b'}\n" + minimal, "metrics.token: must be printable ASCII"},
		{"metrics unknown key", "metrics: {enable: true}\n" + minimal, "metrics.enable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Load(writeFile(t, tt.yaml))
			if tt.want == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				if cfg.Server.Log.Format == "" || cfg.Server.Log.Level == "" {
					t.Fatalf("log defaults not applied: %+v", cfg.Server.Log)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestLogDefaults(t *testing.T) {
	clearEnv(t)
	cfg, err := Load(writeFile(t, minimal))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Server.Log != (Log{Format: "json", Level: "info"}) {
		t.Fatalf("log = %+v", cfg.Server.Log)
	}
	if cfg.Metrics.Enabled || cfg.Metrics.Listen != "" || cfg.Metrics.Token != "" {
		t.Fatalf("metrics must default to off: %+v", cfg.Metrics)
	}
}
