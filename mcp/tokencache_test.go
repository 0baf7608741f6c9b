package mcp

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/reverbgo/reverbgo/bridge"
	"github.com/reverbgo/reverbgo/config"
	"github.com/reverbgo/reverbgo/internal/testutil"
)

// TestTokenCacheAllocs: a verified HS256 token is served from the cache (the same grant, no
// allocation) only for the same resource, within its validity window on the verifier's clock,
// and while its app keeps the secret it was checked with; a token that failed is never cached.
func TestTokenCacheAllocs(t *testing.T) {
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

// TestImplicitListing: the mapping of a session that never listed is reused only for the
// same manifest (clientId, rev and stored Tools slice), and rebuilt for any other.
func TestImplicitListing(t *testing.T) {
	v := newVerifier(testApps(), time.Now)
	g, err := v.verify(context.Background(), token("secret1", nil), testResource)
	if err != nil {
		t.Fatal(err)
	}
	tools := []bridge.Tool{{Name: "a.one", LLMName: "a_one"}}
	m := &bridge.Manifest{ClientID: "p1", Rev: 1, Tools: tools}
	first := g.implicitListing(m)
	if first.byName["a_one"] == nil || first.rev != 1 {
		t.Fatalf("listing %+v", first)
	}
	same := *m // what GetManifest returns: a copy sharing Tools
	if l := g.implicitListing(&same); l != first {
		t.Fatal("the same manifest was mapped again")
	}
	for _, tc := range []struct {
		name string
		m    bridge.Manifest
		tool string
		rev  int64
	}{
		{"new rev (changed)", bridge.Manifest{ClientID: "p1", Rev: 2, Tools: tools}, "a_one", 2},
		{"same rev, new tools", bridge.Manifest{ClientID: "p1", Rev: 2, Tools: []bridge.Tool{{Name: "b.two", LLMName: "b_two"}}}, "b_two", 2},
		{"another page", bridge.Manifest{ClientID: "p2", Rev: 2, Tools: tools}, "a_one", 2},
		{"no tools", bridge.Manifest{ClientID: "p2", Rev: 3}, "", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := g.implicitListing(&tc.m)
			if l == first || l.rev != tc.rev || l.clientID != tc.m.ClientID || (tc.tool != "" && l.byName[tc.tool] == nil) || len(l.byName) != len(tc.m.Tools) {
				t.Fatalf("listing %+v for %+v", l, tc.m)
			}
		})
	}
}

// TestSingleRequest: the method and id of a one-request body, and the id as text (as the
// tool_use_id carries it), table-driven.
func TestSingleRequest(t *testing.T) {
	for _, tc := range []struct {
		body, method, id, text string
		ok                     bool
	}{
		{`{"jsonrpc":"2.0","id":7,"method":"tools/call"}`, "tools/call", "7", "7", true},
		{` {"id":-1.5e3,"method":"m"}`, "m", "-1.5e3", "-1.5e3", true},
		{`{"id":"abc","method":"m"}`, "m", `"abc"`, "abc", true},
		{`{"id":"a\"b\u0041","method":"m"}`, "m", `"a\"b\u0041"`, `a"bA`, true},
		{`{"id":null,"method":"m"}`, "", "", "", false},
		{`{"id":{"x":1},"method":"m"}`, "", "", "", false},
		{`{"id":true,"method":"m"}`, "", "", "", false},
		{`{"method":"notifications/initialized"}`, "", "", "", false},
		{`[{"id":1,"method":"m"}]`, "", "", "", false},
		{`{"id":1,"method":"m"`, "", "", "", false},
	} {
		method, id, ok := singleRequest([]byte(tc.body))
		if method != tc.method || id != tc.id || ok != tc.ok {
			t.Errorf("singleRequest(%s) = %q %q %v", tc.body, method, id, ok)
		}
		if ok && idText(id) != tc.text {
			t.Errorf("idText(%s) = %q, want %q", id, idText(id), tc.text)
		}
	}
}

// FuzzSingleRequest: whatever the one-scan path decides equals encoding/json's answer.
func FuzzSingleRequest(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"x","arguments":{"a":[1,{"b":"c"}]}}}`,
		`{"id":"a\"b","method":"m"}`, `{"Method":"m","id":1}`, `{"method":"m","method":"n","id":1}`,
		`{"method":"m\u0041","id":1}`, `{"me\u0074hod":"x","id":1}`, `{"method":5,"id":1}`, `{"method":null,"id":1}`,
		`{"method":"m","id":null}`, `{"method":"","id":1}`, `{"method":"m","id":1} x`, `{"method":"m","ID":2,"id":1}`,
		"{\"method\":\"\xff\",\"id\":1}", `{"method":"m","id":01}`, `{"method":"m","id":1e5}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if len(body) == 0 || body[0] != '{' {
			return
		}
		m, id, decided, ok := fastSingleRequest(body)
		if !decided {
			return
		}
		wm, wid, wok := decodeSingleRequest(body)
		if m != wm || id != wid || ok != wok {
			t.Fatalf("%q: fast %q %q %v, encoding/json %q %q %v", body, m, id, ok, wm, wid, wok)
		}
	})
}
