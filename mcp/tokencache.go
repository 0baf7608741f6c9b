package mcp

import (
	"crypto/sha256"
	"sync"
	"time"

	"github.com/reverbgo/reverbgo/config"
)

// maxCachedTokens bounds the verified-token cache; a full cache is emptied (only tokens whose
// signature verified are ever added, so filling it takes that many valid tokens).
const maxCachedTokens = 4096

// tokenCache remembers the grants of verified HS256 tokens (app-secret tokens), so that the
// requests of a session, which all carry the same token, are not parsed and HMAC-checked
// again: one request of an MCP tools/call otherwise spends ~45 allocations on golang-jwt.
// Entries are keyed by the SHA-256 of the token (the token itself is never compared), and a
// hit is only honoured for the same resource, while the token is within its exp/nbf/iat (with
// Leeway) on the verifier's clock, and while the issuer still resolves to the same app with
// the same secret. Tokens of an authorization server (JWKS) are not cached: their key set
// may be rotated or go stale, and each such request verifies as before.
type tokenCache struct {
	mu sync.Mutex
	m  map[[sha256.Size]byte]*cachedGrant
	// buf holds the token while it is hashed (under mu), so hashing allocates nothing.
	buf []byte
}

type cachedGrant struct {
	g        *grant
	resource string
	secret   string // the app's secret the signature was checked with
}

func (c *tokenCache) key(token string) [sha256.Size]byte {
	c.buf = append(c.buf[:0], token...)
	return sha256.Sum256(c.buf)
}

// get returns the cached grant of token for resource at now, or nil.
func (c *tokenCache) get(token, resource string, now time.Time, apps Apps) *grant {
	c.mu.Lock()
	e := c.m[c.key(token)]
	c.mu.Unlock()
	if e == nil || e.resource != resource || !within(e.g.claims, now) {
		return nil
	}
	if app := apps.AppByKey(e.g.claims.Issuer); app != e.g.app || app.Secret != e.secret {
		return nil
	}
	return e.g
}

// put caches g, the grant of the verified HS256 token, for resource.
func (c *tokenCache) put(token, resource string, g *grant, app *config.App) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxCachedTokens {
		c.m = make(map[[sha256.Size]byte]*cachedGrant)
	}
	c.m[c.key(token)] = &cachedGrant{g: g, resource: resource, secret: app.Secret}
}

// within reports whether now is inside the validity window golang-jwt checked: before
// exp + Leeway, not before nbf - Leeway nor iat - Leeway.
func within(c *Claims, now time.Time) bool {
	if c.ExpiresAt == nil || !now.Before(c.ExpiresAt.Add(Leeway)) {
		return false
	}
	if c.NotBefore != nil && now.Before(c.NotBefore.Add(-Leeway)) {
		return false
	}
	return c.IssuedAt == nil || !now.Before(c.IssuedAt.Add(-Leeway))
}
