package mcp

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/golang-jwt/jwt/v5"

	"github.com/reverbgo/reverbgo/config"
	"github.com/reverbgo/reverbgo/internal/testutil"
)

// testIssuer is the authorization server of app "as" in the verifier tests.
const testIssuer = "https://auth.example"

// signer is one key pair of the test authorization server.
type signer struct {
	kid    string
	method jwt.SigningMethod
	priv   any
	pub    any
}

func newSigners(t testing.TB) (rs, es, ed signer) {
	t.Helper()
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ek, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	edPub, edPriv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return signer{"rs1", jwt.SigningMethodRS256, rk, &rk.PublicKey},
		signer{"es1", jwt.SigningMethodES256, ek, &ek.PublicKey},
		signer{"ed1", jwt.SigningMethodEdDSA, edPriv, edPub}
}

func (s signer) sign(t testing.TB, c jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(s.method, c)
	if s.kid != "" {
		tok.Header["kid"] = s.kid
	}
	out, err := tok.SignedString(s.priv)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// jwksDoc is the public JWK Set of signers.
func jwksDoc(t testing.TB, ss ...signer) []byte {
	t.Helper()
	var set jose.JSONWebKeySet
	for _, s := range ss {
		set.Keys = append(set.Keys, jose.JSONWebKey{Key: s.pub, KeyID: s.kid, Use: "sig", Algorithm: s.method.Alg()})
	}
	b, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// jwksServer serves a JWKS on loopback that a test can replace, counting fetches; status != 200
// makes it fail.
type jwksServer struct {
	*httptest.Server
	mu      sync.Mutex
	doc     []byte
	status  int
	fetches atomic.Int32
}

func newJWKSServer(t testing.TB, doc []byte) *jwksServer {
	j := &jwksServer{doc: doc, status: http.StatusOK}
	j.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		j.fetches.Add(1)
		j.mu.Lock()
		doc, status := j.doc, j.status
		j.mu.Unlock()
		w.Header().Set("Content-Type", "application/jwk-set+json")
		w.WriteHeader(status)
		_, _ = w.Write(doc)
	}))
	t.Cleanup(j.Close)
	return j
}

func (j *jwksServer) set(doc []byte, status int) {
	j.mu.Lock()
	j.doc, j.status = doc, status
	j.mu.Unlock()
}

// asApps: app1 (HS256 only) and "as" whose tokens come from testIssuer's JWKS at url (or file).
func asApps(url, file string) testutil.Apps {
	apps := testApps()
	return append(apps, &config.App{ID: "as", Key: "askey", Secret: "assecret", Toolmark: config.Toolmark{Enabled: true,
		MCP: config.ToolmarkMCP{Enabled: true, Issuer: testIssuer, JWKSURL: url, JWKSFile: file, MaxTokenLifetimeS: 3600}}})
}

// fakeClock is a settable now.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// TestVerifyJWKS: authorization-server tokens, table-driven: each algorithm by kid, every
// required claim, aud as string and array, the lifetime bound, algorithm/key confusion, and
// HS256 tokens beside them.
func TestVerifyJWKS(t *testing.T) {
	rs, es, ed := newSigners(t)
	other, _, _ := newSigners(t) // same kid "rs1", another key
	srv := newJWKSServer(t, jwksDoc(t, rs, es, ed))
	clock := &fakeClock{t: time.Now()}
	v := newVerifierWith(asApps(srv.URL, ""), verifierOptions{now: clock.now})
	now := clock.now()
	at := func(d time.Duration) int64 { return now.Add(d).Unix() }
	base := func(edit ...func(jwt.MapClaims)) jwt.MapClaims {
		c := jwt.MapClaims{"iss": testIssuer, "sub": "u1", "aud": testResource, "exp": at(time.Hour), "iat": at(0)}
		for _, e := range edit {
			e(c)
		}
		return c
	}
	set := func(k string, val any) func(jwt.MapClaims) {
		return func(c jwt.MapClaims) {
			if val == nil {
				delete(c, k)
			} else {
				c[k] = val
			}
		}
	}
	noKid := rs
	noKid.kid = ""
	wrongKid := es
	wrongKid.kid = "rs1" // an ES256 token naming an RSA key
	hsAsIssuer := signer{"", jwt.SigningMethodHS256, []byte("assecret"), nil}
	tests := []struct {
		name   string
		token  string
		ok     bool
		follow bool
		conv   string
		reason string // part of the refusal
	}{
		{name: "RS256", token: rs.sign(t, base()), ok: true, follow: true},
		{name: "ES256", token: es.sign(t, base()), ok: true, follow: true},
		{name: "EdDSA", token: ed.sign(t, base()), ok: true, follow: true},
		{name: "with conversation_id", token: rs.sign(t, base(set("conversation_id", "c9"))), ok: true, conv: "c9"},
		{name: "aud array naming the resource", token: es.sign(t, base(set("aud", []string{"https://other", testResource}))), ok: true, follow: true},
		{name: "no iat, exp within the lifetime", token: rs.sign(t, base(set("iat", nil))), ok: true, follow: true},
		{name: "aud of another server", token: rs.sign(t, base(set("aud", "https://other.example/toolmark/mcp"))), reason: "aud"},
		{name: "aud array without the resource", token: rs.sign(t, base(set("aud", []string{"https://other"}))), reason: "aud"},
		{name: "no aud", token: rs.sign(t, base(set("aud", nil))), reason: "aud"},
		{name: "no sub", token: rs.sign(t, base(set("sub", nil))), reason: "sub"},
		{name: "no exp", token: rs.sign(t, base(set("exp", nil))), reason: "required"},
		{name: "no iss", token: rs.sign(t, base(set("iss", nil))), reason: "unknown iss"},
		{name: "another issuer", token: rs.sign(t, base(set("iss", "https://evil.example"))), reason: "unknown iss"},
		{name: "expired", token: rs.sign(t, base(set("exp", at(-time.Minute)))), reason: "expired"},
		{name: "exp over the lifetime from iat", token: rs.sign(t, base(set("exp", at(2*time.Hour)))), reason: "max_token_lifetime_s"},
		{name: "exp over the lifetime, no iat", token: rs.sign(t, base(set("iat", nil), set("exp", at(2*time.Hour)))), reason: "max_token_lifetime_s"},
		{name: "exp in 2100", token: rs.sign(t, base(set("exp", time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC).Unix()))), reason: "max_token_lifetime_s"},
		{name: "no kid", token: noKid.sign(t, base()), reason: "kid"},
		{name: "kid of a key of another type", token: wrongKid.sign(t, base()), reason: "unverifiable"},
		{name: "signed by another key under a known kid", token: other.sign(t, base()), reason: "signature"},
		{name: "HS256 with the issuer as iss", token: hsAsIssuer.sign(t, base()), reason: "unknown iss"},
		{name: "bad conversation_id", token: rs.sign(t, base(set("conversation_id", "a.b"))), reason: "conversation_id"},
		{name: "HS256 app token still works", token: token("secret1", nil), ok: true, conv: "c1"},
		{name: "HS256 without conversation_id", token: token("secret1", map[string]any{"conversation_id": nil}), reason: "conversation_id"},
		{name: "HS256 without aud", token: token("secret1", map[string]any{"aud": nil}), reason: "aud"},
		{name: "HS256 exp in 2100", token: token("secret1", map[string]any{"exp": time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC).Unix()}), reason: "max_token_lifetime_s"},
		{name: "HS256 over the default day from iat", token: token("secret1", map[string]any{"iat": at(0), "exp": at(25 * time.Hour)}), reason: "max_token_lifetime_s"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g, err := v.verify(context.Background(), tc.token, testResource)
			if !tc.ok {
				if err == nil {
					t.Fatalf("accepted: %+v", g.key)
				}
				if !strings.Contains(err.Error(), tc.reason) {
					t.Fatalf("refused with %q, want one naming %q", err, tc.reason)
				}
				return
			}
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			if g.follow != tc.follow || g.key.Conversation != tc.conv || g.key.User != "u1" || g.claims == nil {
				t.Fatalf("grant %+v follow %v", g.key, g.follow)
			}
		})
	}
	if n := srv.fetches.Load(); n != 1 {
		t.Fatalf("%d JWKS fetches, want 1 (cached; unknown kids only refetch once a minute)", n)
	}
}

// TestJWKSRotation: after the first load, a token naming a new kid triggers one refetch and
// verifies; another unknown kid within the minute triggers none and is refused; after the
// minute it is fetched again. A fetch failure never accepts a token, and a set past its max
// age is not used once a reload failed.
func TestJWKSRotation(t *testing.T) {
	rs, es, ed := newSigners(t)
	srv := newJWKSServer(t, jwksDoc(t, rs))
	clock := &fakeClock{t: time.Now()}
	v := newVerifierWith(asApps(srv.URL, ""), verifierOptions{now: clock.now})
	claims := func() jwt.MapClaims {
		return jwt.MapClaims{"iss": testIssuer, "sub": "u1", "aud": testResource, "exp": clock.now().Add(time.Hour).Unix()}
	}
	verify := func(tok string) error {
		_, err := v.verify(context.Background(), tok, testResource)
		return err
	}
	fetches := func(want int32) {
		t.Helper()
		if n := srv.fetches.Load(); n != want {
			t.Fatalf("%d JWKS fetches, want %d", n, want)
		}
	}
	if err := verify(rs.sign(t, claims())); err != nil {
		t.Fatal(err)
	}
	fetches(1)
	// The authorization server rotates: es1 is added after the first load.
	srv.set(jwksDoc(t, rs, es), http.StatusOK)
	if err := verify(es.sign(t, claims())); err != nil {
		t.Fatalf("rotated key: %v", err)
	}
	fetches(2)
	srv.set(jwksDoc(t, rs, es, ed), http.StatusOK)
	if err := verify(ed.sign(t, claims())); err == nil || !strings.Contains(err.Error(), "kid") {
		t.Fatalf("a second unknown kid within the minute: %v", err)
	}
	fetches(2)
	if err := verify(rs.sign(t, claims())); err != nil { // known kids need no fetch
		t.Fatal(err)
	}
	fetches(2)
	clock.add(jwksMinRefetch + time.Second)
	if err := verify(ed.sign(t, claims())); err != nil {
		t.Fatalf("after the minute: %v", err)
	}
	fetches(3)

	// The server fails: an unknown kid is refused, and past the max age every token is.
	srv.set([]byte("oops"), http.StatusInternalServerError)
	clock.add(jwksMinRefetch + time.Second)
	ghost := rs
	ghost.kid = "rs2"
	if err := verify(ghost.sign(t, claims())); err == nil {
		t.Fatal("a fetch failure accepted an unknown kid")
	}
	fetches(4)
	clock.add(jwksMaxAge)
	if err := verify(rs.sign(t, claims())); err == nil || !strings.Contains(err.Error(), "jwks unavailable") {
		t.Fatalf("a stale set used after a failed fetch: %v", err)
	}
	fetches(5)
	if err := verify(rs.sign(t, claims())); err == nil {
		t.Fatal("accepted with no set")
	}
	fetches(5) // a failure also waits its minute
}

// TestJWKSDown: a JWKS that cannot be loaded accepts nothing, and is retried once a minute.
func TestJWKSDown(t *testing.T) {
	rs, _, _ := newSigners(t)
	srv := newJWKSServer(t, []byte("nope"))
	srv.set([]byte("nope"), http.StatusBadGateway)
	clock := &fakeClock{t: time.Now()}
	v := newVerifierWith(asApps(srv.URL, ""), verifierOptions{now: clock.now})
	c := jwt.MapClaims{"iss": testIssuer, "sub": "u1", "aud": testResource, "exp": clock.now().Add(time.Hour).Unix()}
	for range 3 {
		if _, err := v.verify(context.Background(), rs.sign(t, c), testResource); err == nil {
			t.Fatal("accepted without a key set")
		}
	}
	if n := srv.fetches.Load(); n != 1 {
		t.Fatalf("%d fetches of a failing JWKS within a minute", n)
	}
	srv.set(jwksDoc(t, rs), http.StatusOK)
	clock.add(jwksMinRefetch + time.Second)
	if _, err := v.verify(context.Background(), rs.sign(t, c), testResource); err != nil {
		t.Fatal(err)
	}
}

// TestJWKSFile: jwks_file is read like a URL (and reread on an unknown kid).
func TestJWKSFile(t *testing.T) {
	rs, es, _ := newSigners(t)
	path := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(path, jwksDoc(t, rs), 0o600); err != nil {
		t.Fatal(err)
	}
	clock := &fakeClock{t: time.Now()}
	v := newVerifierWith(asApps("", path), verifierOptions{now: clock.now})
	c := jwt.MapClaims{"iss": testIssuer, "sub": "u1", "aud": testResource, "exp": clock.now().Add(time.Hour).Unix()}
	if _, err := v.verify(context.Background(), rs.sign(t, c), testResource); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, jwksDoc(t, es), 0o600); err != nil {
		t.Fatal(err)
	}
	clock.add(jwksMinRefetch + time.Second)
	if _, err := v.verify(context.Background(), es.sign(t, c), testResource); err != nil {
		t.Fatalf("rotated file: %v", err)
	}
}

// TestParseJWKS: unusable keys are skipped, not fatal.
func TestParseJWKS(t *testing.T) {
	rs, es, ed := newSigners(t)
	small, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	good := string(jwksDoc(t, rs, es, ed))
	key := func(k jose.JSONWebKey) string { b, _ := json.Marshal(k); return string(b) }
	tests := []struct {
		name string
		doc  string
		kids []string
		err  bool
	}{
		{"three algorithms", good, []string{"rs1", "es1", "ed1"}, false},
		{"not JSON", "{", nil, true},
		{"no keys member", `{}`, nil, true},
		{"empty set", `{"keys":[]}`, nil, false},
		{"skips junk, a small RSA key, P-384, enc use, private, no kid, alg mismatch", `{"keys":[1,"x",{"kty":"nope","kid":"n"},` +
			key(jose.JSONWebKey{Key: &small.PublicKey, KeyID: "small"}) + "," +
			key(jose.JSONWebKey{Key: &p384.PublicKey, KeyID: "p384"}) + "," +
			key(jose.JSONWebKey{Key: rs.pub, KeyID: "enc", Use: "enc"}) + "," +
			key(jose.JSONWebKey{Key: rs.priv, KeyID: "priv"}) + "," +
			key(jose.JSONWebKey{Key: rs.pub}) + "," +
			key(jose.JSONWebKey{Key: rs.pub, KeyID: "mismatch", Algorithm: "ES256"}) + "," +
			key(jose.JSONWebKey{Key: es.pub, KeyID: "ok"}) + `]}`, []string{"ok"}, false},
		{"a duplicate kid verifies nothing", `{"keys":[` + key(jose.JSONWebKey{Key: rs.pub, KeyID: "d"}) + "," +
			key(jose.JSONWebKey{Key: es.pub, KeyID: "d"}) + "," + key(jose.JSONWebKey{Key: ed.pub, KeyID: "d"}) + "," +
			key(jose.JSONWebKey{Key: ed.pub, KeyID: "e"}) + `]}`, []string{"e"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			keys, err := parseJWKS([]byte(tc.doc))
			if (err != nil) != tc.err {
				t.Fatalf("err %v", err)
			}
			if len(keys) != len(tc.kids) {
				t.Fatalf("keys %v, want %v", keys, tc.kids)
			}
			for _, k := range tc.kids {
				if _, ok := keys[k]; !ok {
					t.Fatalf("no %s in %v", k, keys)
				}
			}
		})
	}
}
