package mcp

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// JWKS limits. A set is refetched when a token names a kid it lacks, at most once per
// jwksMinRefetch; a set older than jwksMaxAge is refetched before it is used again, so a key
// removed from the set stops verifying within that time.
const (
	jwksMinRefetch  = time.Minute
	jwksMaxAge      = time.Hour
	jwksFetchTimout = 5 * time.Second
	maxJWKSBytes    = 256 << 10
	maxJWKSKeys     = 64
	minRSABits      = 2048
)

var (
	errUnknownKid = errors.New("unknown kid")
	errNoKid      = errors.New("kid header required")
	errJWKSFetch  = errors.New("jwks unavailable")
)

// jwk is one usable verification key of a set: its algorithm family fixed by its type.
type jwk struct {
	key any    // *rsa.PublicKey, *ecdsa.PublicKey (P-256) or ed25519.PublicKey
	alg string // the one algorithm it verifies: RS256, ES256 or EdDSA
}

// parseJWKS decodes a JWK Set (RFC 7517) into its usable signing keys by kid. A JWKS comes
// from a configured URL or file, but is still decoded defensively: keys without a kid, with
// private parameters, of another use or type, RSA keys under 2048 bits and curves other than
// P-256 and Ed25519 are skipped, not fatal, so one odd key does not disable a whole set. The
// per-key decoding is go-jose's (JSONWebKey), which also checks that the points are on
// their curves.
func parseJWKS(b []byte) (map[string]jwk, error) {
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(b, &set); err != nil {
		return nil, fmt.Errorf("jwks: %w", err)
	}
	if set.Keys == nil {
		return nil, errors.New("jwks: no keys member")
	}
	out := map[string]jwk{}
	dup := map[string]bool{}
	for i, raw := range set.Keys {
		if i == maxJWKSKeys {
			break
		}
		var k jose.JSONWebKey
		if err := k.UnmarshalJSON(raw); err != nil || k.KeyID == "" || !k.IsPublic() || !k.Valid() {
			continue
		}
		if k.Use != "" && k.Use != "sig" {
			continue
		}
		var alg string
		switch pub := k.Key.(type) {
		case *rsa.PublicKey:
			if pub.N.BitLen() < minRSABits {
				continue
			}
			alg = "RS256"
		case *ecdsa.PublicKey:
			if pub.Curve != elliptic.P256() {
				continue
			}
			alg = "ES256"
		case ed25519.PublicKey:
			alg = "EdDSA"
		default:
			continue
		}
		if k.Algorithm != "" && k.Algorithm != alg {
			continue
		}
		if _, seen := out[k.KeyID]; seen || dup[k.KeyID] {
			delete(out, k.KeyID) // an ambiguous kid verifies nothing rather than the first key
			dup[k.KeyID] = true
			continue
		}
		out[k.KeyID] = jwk{key: k.Key, alg: alg}
	}
	return out, nil
}

// keySource is one app's JWKS, fetched from a URL or read from a file, cached, and refetched
// on an unknown kid at most once a minute. A failed fetch leaves no stale keys in use past
// jwksMaxAge and never makes an unknown kid acceptable.
type keySource struct {
	url, file string
	client    *http.Client
	now       func() time.Time
	onErr     func(error) // logs a failed load; may be nil

	fetchMu sync.Mutex // one fetch at a time; verifications of known kids do not wait for it

	mu      sync.Mutex
	keys    map[string]jwk
	fetched time.Time // when keys were loaded
	tried   time.Time // last fetch attempt
}

func newKeySource(url, file string, client *http.Client, now func() time.Time) *keySource {
	return &keySource{url: url, file: file, client: client, now: now}
}

// lookup returns the key of kid for alg. The set is loaded on first use; it is loaded again
// when kid is unknown or the set is older than jwksMaxAge, at most once per jwksMinRefetch
// (a failed load counts too, so a down server is not hammered).
func (s *keySource) lookup(ctx context.Context, kid, alg string) (any, error) {
	if kid == "" {
		return nil, errNoKid
	}
	if k, ok, fresh := s.cached(kid); ok && fresh {
		return check(k, alg)
	}
	if err := s.refresh(ctx, kid); err != nil {
		return nil, err
	}
	k, ok, _ := s.cached(kid)
	if !ok {
		return nil, errUnknownKid
	}
	return check(k, alg)
}

func check(k jwk, alg string) (any, error) {
	if k.alg != alg {
		return nil, fmt.Errorf("kid is a %s key, token is %s", k.alg, alg)
	}
	return k.key, nil
}

// cached returns kid's key, whether it is there, and whether the set is fresh.
func (s *keySource) cached(kid string) (jwk, bool, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k, ok := s.keys[kid]
	fresh := s.keys != nil && s.now().Sub(s.fetched) < jwksMaxAge
	return k, ok, fresh
}

// refresh loads the set for a lookup of kid, unless another lookup loaded one with kid
// meanwhile or the last reload (or failure) was less than jwksMinRefetch ago; then the cached
// set, if still fresh, stands. A failure drops a set past its max age: a stale set never
// verifies because its server is down.
func (s *keySource) refresh(ctx context.Context, kid string) error {
	s.fetchMu.Lock()
	defer s.fetchMu.Unlock()
	s.mu.Lock()
	now := s.now()
	_, has := s.keys[kid]
	usable := s.keys != nil && now.Sub(s.fetched) < jwksMaxAge
	recent := !s.tried.IsZero() && now.Sub(s.tried) < jwksMinRefetch
	first := s.keys == nil && s.tried.IsZero()
	switch {
	case usable && has:
		s.mu.Unlock()
		return nil // loaded while this lookup waited
	case recent:
		s.mu.Unlock()
		if usable {
			return nil
		}
		return errJWKSFetch
	}
	if !first {
		s.tried = now // the first load does not use up the minute: a rotation may follow at once
	}
	s.mu.Unlock()

	keys, err := s.load(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.tried = s.now()
		if s.onErr != nil {
			s.onErr(err)
		}
		if s.keys != nil && s.now().Sub(s.fetched) >= jwksMaxAge {
			s.keys = nil
		}
		if s.keys == nil {
			return errJWKSFetch
		}
		return nil
	}
	s.keys, s.fetched = keys, s.now()
	return nil
}

// load reads the set from the file or GETs the URL (bounded in time and size; 200 only).
func (s *keySource) load(ctx context.Context) (map[string]jwk, error) {
	if s.file != "" {
		f, err := os.Open(s.file)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		b, err := io.ReadAll(io.LimitReader(f, maxJWKSBytes+1))
		if err != nil {
			return nil, err
		}
		if len(b) > maxJWKSBytes {
			return nil, errors.New("jwks file too large")
		}
		return parseJWKS(b)
	}
	// The fetch is not the token's request's: a client that gives up must not leave the
	// set unloaded for a minute.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), jwksFetchTimout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/jwk-set+json, application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("jwks: HTTP %d", resp.StatusCode)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKSBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxJWKSBytes {
		return nil, errors.New("jwks too large")
	}
	return parseJWKS(b)
}
