package mcp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/golang-jwt/jwt/v5"
	sdkauth "github.com/modelcontextprotocol/go-sdk/auth"

	"github.com/reverbgo/reverbgo/bridge"
	"github.com/reverbgo/reverbgo/config"
)

// Leeway is the clock skew allowed on exp, nbf and iat (an iat more than Leeway in the future
// is refused).
const Leeway = 30 * time.Second

// maxTokenLen bounds the bearer token before it is parsed: a JWT with three small claims is a
// few hundred bytes, so anything this long is not one of ours.
const maxTokenLen = 8 << 10

// Apps resolves a token's issuer (an app key) to its app.
type Apps interface {
	AppByKey(key string) *config.App
}

// Claims are a token's claims. HS256 tokens (signed with the app's secret): iss = the app's
// key, sub = the user id, conversation_id, aud = the resource, exp (required), nbf and iat
// (optional). Tokens of the app's authorization server (RS256, ES256, EdDSA from its JWKS): iss
// = toolmark.mcp.issuer, aud, sub and exp required, conversation_id optional. Scope
// (space-separated) and ToolmarkTools (names or globs, a string or an array) limit what the
// token may call; the scope layer reads them from the verified grant (ClaimsFrom).
type Claims struct {
	jwt.RegisteredClaims
	ConversationID string           `json:"conversation_id"`
	Scope          string           `json:"scope,omitempty"`
	ToolmarkTools  jwt.ClaimStrings `json:"toolmark_tools,omitempty"`
}

// authError is a refused request: the HTTP status, a short reason for the body, and for a 401
// whether a token was sent (WWW-Authenticate then carries error="invalid_token").
type authError struct {
	code   int
	reason string
	token  bool
}

func (e *authError) Error() string { return e.reason }

// grant is what a verified token allows: one app's conversation of one user, until exp. A
// token without conversation_id (authorization-server tokens only) follows the user's most
// recently used page: key.Conversation is then "" and follow is true.
type grant struct {
	app    *config.App
	key    bridge.ConvKey
	exp    time.Time
	follow bool
	claims *Claims
	acc    bridge.Access // what claims allow (accessOf), computed once by verify
	accOK  bool          // acc was set
	// implicit is the mapping of the manifest last resolved without a listing (callTool of a
	// session that never listed, or a stateless request), reused while that manifest is current.
	// Shared by the copies resolve makes (the manifest check tells their pages apart); nil =
	// no cache.
	implicit *atomic.Pointer[implicitListing]
	// info is what the SDK's bearer middleware gets for this grant (it only reads it), made
	// once per verified token instead of per request.
	info *sdkauth.TokenInfo
}

// tokenInfo is g's TokenInfo for the SDK: the session owner, exp and the grant itself.
func (g *grant) tokenInfo() *sdkauth.TokenInfo {
	if g.info != nil {
		return g.info
	}
	return &sdkauth.TokenInfo{UserID: g.owner(), Expiration: g.exp, Extra: map[string]any{grantExtra: g}}
}

// owner is the session owner the SDK compares on every request of a session (its "user id"):
// a session id used with a token for another app, user or conversation gets 403.
func (g *grant) owner() string {
	o := g.key.App + "\x00" + g.key.User + "\x00" + g.key.Conversation
	if g.follow {
		o += "\x00follow"
	}
	return o
}

type claimsKey struct{}

// withClaims returns ctx carrying the verified claims of the request's token.
func withClaims(ctx context.Context, c *Claims) context.Context {
	return context.WithValue(ctx, claimsKey{}, c)
}

// ClaimsFrom returns the verified token claims of an MCP request's context (the tools/list and
// tools/call handlers' ctx), or nil.
func ClaimsFrom(ctx context.Context) *Claims {
	c, _ := ctx.Value(claimsKey{}).(*Claims)
	return c
}

var (
	errUnknownIssuer = errors.New("unknown iss")
	errAudience      = errors.New("aud does not name this resource")
	errLifetime      = errors.New("exp is beyond toolmark.mcp.max_token_lifetime_s")
)

// asymmetric are the algorithms of authorization-server tokens, HS256 that of app-secret
// tokens. Never none, HS384, RS512...: golang-jwt refuses any other alg, and ties each to its
// key type, so an HS256 token cannot be checked against a public key or the reverse.
var allowedAlgs = []string{"HS256", "RS256", "ES256", "EdDSA"}

// verifier checks bearer tokens. Parsing and signature checks are golang-jwt's; the HMAC
// comparison there is constant-time.
type verifier struct {
	apps   Apps
	now    func() time.Time
	parser *jwt.Parser
	// byIssuer: the apps with an authorization server, by toolmark.mcp.issuer, and their keys.
	byIssuer map[string]*issuerApp
	cache    tokenCache // verified HS256 tokens
}

type issuerApp struct {
	app  *config.App
	keys *keySource
}

// verifierOptions are the verifier's dependencies beyond the apps.
type verifierOptions struct {
	now    func() time.Time
	client *http.Client // fetches JWKS URLs
	log    *slog.Logger
}

func newVerifier(apps Apps, now func() time.Time) *verifier {
	return newVerifierWith(apps, verifierOptions{now: now})
}

func newVerifierWith(apps Apps, o verifierOptions) *verifier {
	if o.now == nil {
		o.now = time.Now
	}
	if o.client == nil {
		o.client = &http.Client{Timeout: jwksFetchTimout}
	}
	if o.log == nil {
		o.log = slog.Default()
	}
	v := &verifier{apps: apps, now: o.now, byIssuer: map[string]*issuerApp{}, parser: jwt.NewParser(
		jwt.WithValidMethods(allowedAlgs),
		jwt.WithLeeway(Leeway),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithTimeFunc(o.now),
		// Canonical base64url only: one token has one spelling.
		jwt.WithStrictDecoding(),
	)}
	if lister, ok := apps.(bridge.AppLister); ok {
		for _, app := range lister.AllApps() {
			if app == nil {
				continue
			}
			m := app.Toolmark.MCP
			if m.Issuer == "" || (m.JWKSURL == "" && m.JWKSFile == "") {
				continue
			}
			ks := newKeySource(m.JWKSURL, m.JWKSFile, o.client, o.now)
			appID := app.ID
			ks.onErr = func(err error) {
				o.log.Warn("toolmark mcp: jwks not loaded", slog.String("app", appID), slog.String("error", err.Error()))
			}
			v.byIssuer[m.Issuer] = &issuerApp{app: app, keys: ks}
		}
	}
	return v
}

// authenticate checks the request's Authorization header against resource (the aud the token
// must carry). 401 for a missing or bad token (the caller adds WWW-Authenticate), 403 when
// the app has toolmark or its MCP endpoint off — only after the signature, so an
// unauthenticated caller learns nothing about the config.
func (v *verifier) authenticate(r *http.Request, resource string) (*grant, *authError) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return nil, &authError{code: http.StatusUnauthorized, reason: "Missing bearer token"}
	}
	scheme, token, ok := strings.Cut(h, " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return nil, &authError{code: http.StatusUnauthorized, reason: "Authorization must be Bearer <token>", token: true}
	}
	g, err := v.verify(r.Context(), token, resource)
	if err != nil {
		return nil, &authError{code: http.StatusUnauthorized, reason: "Invalid token: " + err.Error(), token: true}
	}
	if !g.app.Toolmark.Enabled {
		return nil, &authError{code: http.StatusForbidden, reason: "Toolmark is disabled for this app"}
	}
	if !g.app.Toolmark.MCP.Enabled {
		return nil, &authError{code: http.StatusForbidden, reason: "MCP is disabled for this app"}
	}
	return g, nil
}

// verify parses and validates one token for resource; an HS256 token verified before is
// taken from the cache (tokenCache has the conditions).
func (v *verifier) verify(ctx context.Context, token, resource string) (*grant, error) {
	if len(token) > maxTokenLen {
		return nil, errors.New("token too long")
	}
	if g := v.cache.get(token, resource, v.now(), v.apps); g != nil {
		return g, nil
	}
	g, hs, err := v.verifyToken(ctx, token, resource)
	if err == nil && hs {
		v.cache.put(token, resource, g, g.app)
	}
	return g, err
}

// verifyToken parses and validates one token for resource; hs reports an HS256 token.
func (v *verifier) verifyToken(ctx context.Context, token, resource string) (_ *grant, hs bool, _ error) {
	var c Claims
	var app *config.App
	_, err := v.parser.ParseWithClaims(token, &c, func(t *jwt.Token) (any, error) {
		// The claims are decoded (not yet trusted) when the key is looked up: the issuer picks
		// which secret or key set must have signed them.
		if hs = t.Method.Alg() == jwt.SigningMethodHS256.Alg(); hs {
			if app = v.apps.AppByKey(c.Issuer); app == nil || app.Secret == "" {
				return nil, errUnknownIssuer
			}
			return []byte(app.Secret), nil
		}
		ia := v.byIssuer[c.Issuer]
		if ia == nil {
			return nil, errUnknownIssuer
		}
		app = ia.app
		kid, _ := t.Header["kid"].(string)
		return ia.keys.lookup(ctx, kid, t.Method.Alg())
	})
	if err != nil {
		return nil, hs, simplify(err)
	}
	if !slices.Contains(c.Audience, resource) {
		return nil, hs, errAudience
	}
	// exp is required by the parser; the lifetime is counted from iat, or from now.
	from := v.now()
	if c.IssuedAt != nil {
		from = c.IssuedAt.Time
	}
	if c.ExpiresAt.Sub(from) > time.Duration(maxLifetimeS(app))*time.Second {
		return nil, hs, errLifetime
	}
	// sub and conversation_id end up in a channel name and a store key.
	if !bridge.ValidChannelPart(c.Subject) {
		return nil, hs, errors.New("sub must be a string of 1-128 characters from [-a-zA-Z0-9_=@,;]")
	}
	g := &grant{app: app, key: bridge.ConvKey{App: app.ID, User: c.Subject, Conversation: c.ConversationID},
		exp: c.ExpiresAt.Time, claims: &c, implicit: new(atomic.Pointer[implicitListing])}
	switch {
	case c.ConversationID == "" && !hs:
		g.follow = true // an authorization server knows the user, not the conversation
	case !bridge.ValidChannelPart(c.ConversationID):
		return nil, hs, errors.New("conversation_id must be a string of 1-128 characters from [-a-zA-Z0-9_=@,;]")
	}
	acc, err := accessOf(&c)
	if err != nil {
		return nil, hs, err
	}
	g.acc, g.accOK = acc, true
	g.info = g.tokenInfo()
	return g, hs, nil
}

func maxLifetimeS(app *config.App) int {
	if n := app.Toolmark.MCP.MaxTokenLifetimeS; n > 0 {
		return n
	}
	return config.DefaultMaxTokenLifetimeS
}

// simplify turns golang-jwt's error chain into one short reason that names no secret.
func simplify(err error) error {
	for _, known := range []error{errUnknownIssuer, errUnknownKid, errNoKid, errJWKSFetch, jwt.ErrTokenMalformed,
		jwt.ErrTokenSignatureInvalid, jwt.ErrTokenUnverifiable, jwt.ErrTokenRequiredClaimMissing, jwt.ErrTokenExpired,
		jwt.ErrTokenNotValidYet, jwt.ErrTokenUsedBeforeIssued} {
		if errors.Is(err, known) {
			return known
		}
	}
	return fmt.Errorf("token is invalid")
}
