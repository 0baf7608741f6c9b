package mcp

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// TestAuthenticate: every 401/403 case of the contract, and the accepted edges of the 30 s
// leeway.
func TestAuthenticate(t *testing.T) {
	now := time.Now()
	at := func(d time.Duration) int64 { return now.Add(d).Unix() }
	v := newVerifier(testApps(), func() time.Time { return now })
	signed := func(method jwt.SigningMethod, key any, claims jwt.MapClaims) string {
		s, err := jwt.NewWithClaims(method, claims).SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	base := func() jwt.MapClaims {
		return jwt.MapClaims{"iss": "key1", "sub": "u1", "conversation_id": "c1", "aud": testResource, "exp": at(time.Hour)}
	}
	with := func(k string, val any) jwt.MapClaims {
		c := base()
		if val == nil {
			delete(c, k)
		} else {
			c[k] = val
		}
		return c
	}
	hs := func(c jwt.MapClaims) string { return signed(jwt.SigningMethodHS256, []byte("secret1"), c) }
	none := signed(jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, base())
	tests := []struct {
		name   string
		header string // the whole Authorization header; "" = absent
		code   int    // 0 = accepted
	}{
		{"valid", "Bearer " + hs(base()), 0},
		{"scheme is case-insensitive", "bearer " + hs(base()), 0},
		{"exp within leeway", "Bearer " + hs(with("exp", at(-20*time.Second))), 0},
		{"nbf within leeway", "Bearer " + hs(with("nbf", at(20*time.Second))), 0},
		{"iat within leeway", "Bearer " + hs(with("iat", at(20*time.Second))), 0},
		{"iat in the past", "Bearer " + hs(with("iat", at(-time.Hour))), 0},
		{"no Authorization", "", 401},
		{"not Bearer", "Basic dTpw", 401},
		{"Bearer without token", "Bearer ", 401},
		{"garbage", "Bearer not.a.jwt", 401},
		{"alg none", "Bearer " + none, 401},
		{"HS384", "Bearer " + signed(jwt.SigningMethodHS384, []byte("secret1"), base()), 401},
		{"HS512", "Bearer " + signed(jwt.SigningMethodHS512, []byte("secret1"), base()), 401},
		{"wrong secret", "Bearer " + signed(jwt.SigningMethodHS256, []byte("secret2"), base()), 401},
		{"another app's secret for its key", "Bearer " + signed(jwt.SigningMethodHS256, []byte("secret2"), with("iss", "key1")), 401},
		{"missing exp", "Bearer " + hs(with("exp", nil)), 401},
		{"exp past the leeway", "Bearer " + hs(with("exp", at(-40*time.Second))), 401},
		{"exp not a number", "Bearer " + hs(with("exp", "tomorrow")), 401},
		{"nbf past the leeway", "Bearer " + hs(with("nbf", at(40*time.Second))), 401},
		{"iat more than 30 s in the future", "Bearer " + hs(with("iat", at(40*time.Second))), 401},
		{"unknown iss", "Bearer " + hs(with("iss", "nobody")), 401},
		{"missing iss", "Bearer " + hs(with("iss", nil)), 401},
		{"missing sub", "Bearer " + hs(with("sub", nil)), 401},
		{"numeric sub", "Bearer " + hs(with("sub", 42)), 401},
		{"sub with a dot", "Bearer " + hs(with("sub", "u.1")), 401},
		{"missing conversation_id", "Bearer " + hs(with("conversation_id", nil)), 401},
		{"empty conversation_id", "Bearer " + hs(with("conversation_id", "")), 401},
		{"numeric conversation_id", "Bearer " + hs(with("conversation_id", 7)), 401},
		{"oversized token", "Bearer " + strings.Repeat("a", maxTokenLen+1), 401},
		{"app with mcp disabled", "Bearer " + signed(jwt.SigningMethodHS256, []byte("secret2"), with("iss", "key2")), 403},
		{"app with toolmark disabled", "Bearer " + signed(jwt.SigningMethodHS256, []byte("secret3"), with("iss", "key3")), 403},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/toolmark/mcp", nil)
			if tc.header != "" {
				r.Header.Set("Authorization", tc.header)
			}
			g, err := v.authenticate(r, testResource)
			switch {
			case tc.code == 0 && err != nil:
				t.Fatalf("refused: %d %s", err.code, err.reason)
			case tc.code == 0:
				if g.key.App != "app1" || g.key.User != "u1" || g.key.Conversation != "c1" {
					t.Fatalf("grant %+v", g.key)
				}
			case err == nil:
				t.Fatalf("accepted, want %d", tc.code)
			case err.code != tc.code:
				t.Fatalf("got %d (%s), want %d", err.code, err.reason, tc.code)
			case strings.Contains(err.reason, "secret"):
				t.Fatalf("reason names a secret: %s", err.reason)
			}
		})
	}
}

// TestHTTPAuthStatus: over HTTP, no Authorization is 401 with WWW-Authenticate: Bearer, a bad
// token 401 with invalid_token, a disabled app 403 — before the SDK sees the request.
func TestHTTPAuthStatus(t *testing.T) {
	h := newHarness(t, bridgeLimits())
	for _, tc := range []struct {
		name, auth string
		code       int
		www        string
	}{
		{"missing", "", 401, `Bearer resource_metadata="http://mcp.test/.well-known/oauth-protected-resource/toolmark/mcp"`},
		{"bad", "Bearer x.y.z", 401, `Bearer resource_metadata="http://mcp.test/.well-known/oauth-protected-resource/toolmark/mcp", error="invalid_token"`},
		{"disabled", "Bearer " + token("secret2", map[string]any{"iss": "key2"}), 403, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, h.srv.URL+"/toolmark/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_ = res.Body.Close()
			if res.StatusCode != tc.code || res.Header.Get("WWW-Authenticate") != tc.www {
				t.Fatalf("got %d WWW-Authenticate %q", res.StatusCode, res.Header.Get("WWW-Authenticate"))
			}
		})
	}
}

// TestForgedHost (issue 24): without server.public_url the resource a token must name comes
// from Host only when server.public_hosts lists that Host. A caller holding a token of the
// same issuer for another deployment ("staging.test") who sends that deployment's Host is
// refused with 421, never authenticated against a resource built from it; the metadata
// document is refused the same way. Before the fix the forged Host made the token valid.
func TestForgedHost(t *testing.T) {
	const initBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	listed := func(o *Options) { o.PublicURL, o.PublicHosts = "", []string{"mcp.test"} }
	neither := func(o *Options) { o.PublicURL, o.PublicHosts = "", nil }
	for _, tc := range []struct {
		name string
		opts func(*Options)
		host string
		code int
	}{
		{"a listed Host, its own token", listed, "mcp.test", http.StatusOK},
		{"a forged Host, a token for its resource", listed, "staging.test", http.StatusMisdirectedRequest},
		{"a forged Host in upper case", listed, "STAGING.test", http.StatusMisdirectedRequest},
		{"no public_url nor public_hosts", neither, "mcp.test", http.StatusMisdirectedRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, bridgeLimits(), tc.opts)
			aud := "http://" + strings.ToLower(tc.host) + "/toolmark/mcp"
			req, _ := http.NewRequest(http.MethodPost, h.srv.URL+"/toolmark/mcp", strings.NewReader(initBody))
			req.Host = tc.host
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			req.Header.Set("Authorization", "Bearer "+token("secret1", map[string]any{"aud": aud}))
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_ = res.Body.Close()
			if res.StatusCode != tc.code {
				t.Fatalf("POST with Host %q and a token for %s: %d, want %d", tc.host, aud, res.StatusCode, tc.code)
			}

			meta := httptest.NewRequest(http.MethodGet, MetadataPath(""), nil)
			meta.Host = tc.host
			rec := httptest.NewRecorder()
			h.mcp.ServeMetadata(rec, meta)
			if rec.Code != tc.code {
				t.Fatalf("metadata with Host %q: %d %s, want %d", tc.host, rec.Code, rec.Body, tc.code)
			}
			if tc.code == http.StatusOK && !strings.Contains(rec.Body.String(), `"resource":"`+aud+`"`) {
				t.Fatalf("metadata %s does not name %s", rec.Body, aud)
			}
		})
	}
}
