package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/reverbgo/reverbgo/config"
)

// TestPageAuthSocketIDWarns: toolmark.page_auth socket_id starts, with a warning naming the
// app; the default (token) starts without one.
func TestPageAuthSocketIDWarns(t *testing.T) {
	for mode, warn := range map[string]bool{"socket_id": true, "token": false, "": false} {
		yaml := "apps:\n  - {app_id: a1, key: k1, secret: s1, toolmark: {enabled: true"
		if mode != "" {
			yaml += ", page_auth: " + mode
		}
		yaml += "}}\n"
		path := filepath.Join(t.TempDir(), "config.yaml")
		if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := config.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		var logs bytes.Buffer
		nd, err := newNode(cfg, slog.New(slog.NewJSONHandler(&logs, nil)), prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		nd.shutdown(ctx, nil)
		cancel()
		got := strings.Contains(logs.String(), `"msg":"toolmark.page_auth is socket_id`) && strings.Contains(logs.String(), `"app":"a1"`)
		if got != warn {
			t.Fatalf("page_auth %q: warning logged = %v, want %v\n%s", mode, got, warn, logs.String())
		}
	}
}
