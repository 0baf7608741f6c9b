package mcp

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"encoding/json"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// FuzzDescribedSchema: a page's describe answer is untrusted. Whatever it is, the mapping never
// panics, and a schema it keeps is a JSON object of type "object" (what MCP clients require).
func FuzzDescribedSchema(f *testing.F) {
	for _, seed := range []string{
		`{"status":"ok","data":{"inputSchema":{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]}}}`,
		`{"status":"ok","data":{"inputSchema":{"properties":{"a":true}}}}`,
		`{"status":"ok","data":{"inputSchema":[]}}`,
		`{"status":"error","message":"x"}`,
		`{"status":"ok","data":{"inputSchema":{"type":"object","required":null}}}`,
		`nope`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		schema, ok := describedSchema(b)
		if !ok {
			return
		}
		var m map[string]any
		if err := json.Unmarshal(schema, &m); err != nil || m["type"] != "object" {
			t.Fatalf("kept schema %s from %q", schema, b)
		}
	})
}

// FuzzToolsCallID: the HTTP layer peeks at every POST body; it never panics and only reports an
// id for a tools/call request.
func FuzzToolsCallID(f *testing.F) {
	for _, seed := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}`,
		`{"jsonrpc":"2.0","id":"x","method":"tools/call"}`,
		`[{"id":1,"method":"tools/call"}]`,
		`{"id":{},"method":"tools/call"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		id, ok := toolsCallID(b)
		if ok {
			var m struct {
				Method string `json:"method"`
			}
			if json.Unmarshal(b, &m) != nil || m.Method != "tools/call" {
				t.Fatalf("id %q for %q", id, b)
			}
			_ = toolUseID("s", map[string][]string{requestIDHeader: {id}})
		}
	})
}

// FuzzParseJWKS: a JWK Set comes from a configured URL, but a compromised or broken server
// must not crash the verifier: every key kept has a kid and one of the three algorithms, with
// the key type that algorithm verifies.
func FuzzParseJWKS(f *testing.F) {
	rs, es, ed := newSigners(f)
	f.Add(jwksDoc(f, rs, es, ed))
	for _, seed := range []string{`{"keys":[]}`, `{"keys":[{"kty":"EC","crv":"P-256","x":"AA","y":"AA","kid":"a"}]}`,
		`{"keys":[{"kty":"RSA","n":"AQAB","e":"AQAB","kid":"r"}]}`, `{"keys":[{"kty":"OKP","crv":"Ed25519","x":"","kid":"e"}]}`,
		`{"keys":null}`, `[]`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		keys, err := parseJWKS(b)
		if err != nil {
			return
		}
		for kid, k := range keys {
			if kid == "" {
				t.Fatal("a key without kid")
			}
			switch k.key.(type) {
			case *rsa.PublicKey:
				if k.alg != "RS256" {
					t.Fatalf("RSA key for %s", k.alg)
				}
			case *ecdsa.PublicKey:
				if k.alg != "ES256" {
					t.Fatalf("EC key for %s", k.alg)
				}
			case ed25519.PublicKey:
				if k.alg != "EdDSA" {
					t.Fatalf("Ed25519 key for %s", k.alg)
				}
			default:
				t.Fatalf("key type %T", k.key)
			}
		}
	})
}

// FuzzVerify: a bearer token is untrusted input. Whatever it is, verify never panics and never
// accepts a token that was not signed by the app's secret or its authorization server's key
// (the fuzzer cannot forge one: any acceptance is of a seed's exact bytes or a bug).
func FuzzVerify(f *testing.F) {
	rs, es, _ := newSigners(f)
	keys, err := parseJWKS(jwksDoc(f, rs, es))
	if err != nil {
		f.Fatal(err)
	}
	now := time.Now()
	apps := asApps("", "")
	v := newVerifierWith(apps, verifierOptions{now: func() time.Time { return now }})
	// A preloaded set, never refetched: no I/O in the fuzz loop.
	ks := v.byIssuer[testIssuer]
	if ks == nil {
		ks = &issuerApp{app: apps.AppByKey("askey"), keys: newKeySource("", "", nil, func() time.Time { return now })}
		v.byIssuer[testIssuer] = ks
	}
	ks.keys.keys, ks.keys.fetched, ks.keys.tried = keys, now, now
	valid := map[string]bool{}
	for _, tok := range []string{
		rs.sign(f, jwt.MapClaims{"iss": testIssuer, "sub": "u1", "aud": testResource, "exp": now.Add(time.Hour).Unix()}),
		es.sign(f, jwt.MapClaims{"iss": testIssuer, "sub": "u1", "aud": []string{testResource}, "exp": now.Add(time.Hour).Unix(), "conversation_id": "c"}),
		token("secret1", nil),
	} {
		valid[tok] = true
		f.Add(tok)
	}
	f.Add("e30.e30.")
	f.Add("eyJhbGciOiJub25lIn0.e30.")
	f.Fuzz(func(t *testing.T, tok string) {
		g, err := v.verify(context.Background(), tok, testResource)
		if err == nil && !valid[tok] {
			// A different encoding of a seed's header or claims with the seed's signature
			// cannot verify; anything accepted here must be a seed.
			t.Fatalf("accepted %q as %+v", tok, g.key)
		}
	})
}
