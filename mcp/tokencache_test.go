package mcp

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/reverbgo/reverbgo/config"
	"github.com/reverbgo/reverbgo/internal/testutil"
)

// TestTokenCache: a verified HS256 token is served from the cache (the same grant, no
// allocation) only for the same resource, within its validity window on the verifier's clock,
// and while its app keeps the secret it was checked with; a token that failed is never cached.
func TestTokenCache(t *testing.T) {
	clock := &fakeClock{t: time.Now()}
	apps := testApps()
	v := newVerifier(apps, clock.now)
	at := clock.now()
	tok := token("secret1", map[string]any{"iat": at.Unix(), "exp": at.Add(10 * time.Minute).Unix()})
	first, err := v.verify(context.Background(), tok, testResource)
	if err != nil {
		t.Fatal(err)
	}
	again, err := v.verify(context.Background(), tok, testResource)
	if err != nil || again != first {
		t.Fatalf("second verify: %v, same grant %v", err, again == first)
	}
	if !testutil.RaceEnabled {
		if n := testing.AllocsPerRun(100, func() { _, _ = v.verify(context.Background(), tok, testResource) }); n != 0 {
			t.Errorf("a cached token costs %v allocations, want 0", n)
		}
	}
	bad := tok[:len(tok)-2] + "AA"
	for _, tc := range []struct {
		name, tok, resource, err string
		advance                  time.Duration
		secret                   string
	}{
		{"other resource", tok, "http://other.test/toolmark/mcp", "aud", 0, ""},
		{"bad signature, twice", bad, testResource, "signature", 0, ""},
		{"bad signature, cached?", bad, testResource, "signature", 0, ""},
		{"still valid in the leeway", tok, testResource, "", 10*time.Minute + Leeway - time.Second, ""},
		{"expired", tok, testResource, "expired", 2 * time.Second, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock.add(tc.advance)
			g, err := v.verify(context.Background(), tc.tok, tc.resource)
			if tc.err == "" {
				if err != nil || g != first {
					t.Fatalf("got %v (cached grant %v)", err, g == first)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("got %v, want %q", err, tc.err)
			}
		})
	}
	// A new secret for the app (the same *config.App) invalidates what was checked with the old one.
	clock.add(-time.Hour)
	tok2 := token("secret1", map[string]any{"exp": clock.now().Add(10 * time.Minute).Unix()})
	if _, err := v.verify(context.Background(), tok2, testResource); err != nil {
		t.Fatal(err)
	}
	var app1 *config.App
	for _, a := range apps {
		if a.ID == "app1" {
			app1 = a
		}
	}
	app1.Secret = "rotated"
	if _, err := v.verify(context.Background(), tok2, testResource); err == nil || !strings.Contains(err.Error(), "signature") {
		t.Fatalf("a token of the old secret after the change: %v", err)
	}
}
