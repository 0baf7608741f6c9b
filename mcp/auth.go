package mcp

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

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

// Claims are the token's claims: iss = the app's key, sub = the user id, conversation_id,
// exp (required), nbf and iat (optional).
type Claims struct {
	jwt.RegisteredClaims
	ConversationID string           `json:"conversation_id"`
	Scope          string           `json:"scope,omitempty"`
	ToolmarkTools  jwt.ClaimStrings `json:"toolmark_tools,omitempty"`
}

// authError is a refused request: the HTTP status and a short reason for the body.
type authError struct {
	code   int
	reason string
}

func (e *authError) Error() string { return e.reason }

// grant is what a verified token allows: one app's conversation of one user, until exp.
type grant struct {
	app *config.App
	key bridge.ConvKey
	exp time.Time
	// claims are the verified token's; grant.go reads scope and toolmark_tools from them.
	claims *Claims
}

// owner is the session owner the SDK compares on every request of a session (its "user id"):
// a session id used with a token for another app, user or conversation gets 403.
func (g *grant) owner() string {
	return g.key.App + "\x00" + g.key.User + "\x00" + g.key.Conversation
}

var errUnknownIssuer = errors.New("unknown iss")

// verifier checks bearer tokens. Parsing and signature checks are golang-jwt's; the HMAC
// comparison there is constant-time.
type verifier struct {
	apps   Apps
	parser *jwt.Parser
}

func newVerifier(apps Apps, now func() time.Time) *verifier {
	return &verifier{apps: apps, parser: jwt.NewParser(
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}), // never none, RS*, ES*, HS384...
		jwt.WithLeeway(Leeway),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithTimeFunc(now),
	)}
}

// authenticate checks the request's Authorization header. 401 for a missing or bad token
// (the caller adds WWW-Authenticate), 403 when the app has toolmark or its MCP endpoint off —
// only after the signature, so an unauthenticated caller learns nothing about the config.
func (v *verifier) authenticate(r *http.Request) (*grant, *authError) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return nil, &authError{http.StatusUnauthorized, "Missing bearer token"}
	}
	scheme, token, ok := strings.Cut(h, " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return nil, &authError{http.StatusUnauthorized, "Authorization must be Bearer <token>"}
	}
	g, err := v.verify(token)
	if err != nil {
		return nil, &authError{http.StatusUnauthorized, "Invalid token: " + err.Error()}
	}
	if !g.app.Toolmark.Enabled {
		return nil, &authError{http.StatusForbidden, "Toolmark is disabled for this app"}
	}
	if !g.app.Toolmark.MCP.Enabled {
		return nil, &authError{http.StatusForbidden, "MCP is disabled for this app"}
	}
	return g, nil
}

// verify parses and validates one token.
func (v *verifier) verify(token string) (*grant, error) {
	if len(token) > maxTokenLen {
		return nil, errors.New("token too long")
	}
	var c Claims
	var app *config.App
	_, err := v.parser.ParseWithClaims(token, &c, func(*jwt.Token) (any, error) {
		// The claims are decoded (not yet trusted) when the key is looked up: the issuer picks
		// which secret must have signed them.
		if app = v.apps.AppByKey(c.Issuer); app == nil || app.Secret == "" {
			return nil, errUnknownIssuer
		}
		return []byte(app.Secret), nil
	})
	if err != nil {
		return nil, simplify(err)
	}
	// sub and conversation_id end up in a channel name and a store key.
	if !bridge.ValidChannelPart(c.Subject) {
		return nil, errors.New("sub must be a string of 1-128 characters from [-a-zA-Z0-9_=@,;]")
	}
	if !bridge.ValidChannelPart(c.ConversationID) {
		return nil, errors.New("conversation_id must be a string of 1-128 characters from [-a-zA-Z0-9_=@,;]")
	}
	if _, err := accessOf(&c); err != nil {
		return nil, err
	}
	return &grant{app: app, key: bridge.ConvKey{App: app.ID, User: c.Subject, Conversation: c.ConversationID},
		exp: c.ExpiresAt.Time, claims: &c}, nil
}

// simplify turns golang-jwt's error chain into one short reason that names no secret.
func simplify(err error) error {
	for _, known := range []error{errUnknownIssuer, jwt.ErrTokenMalformed, jwt.ErrTokenSignatureInvalid,
		jwt.ErrTokenUnverifiable, jwt.ErrTokenRequiredClaimMissing, jwt.ErrTokenExpired,
		jwt.ErrTokenNotValidYet, jwt.ErrTokenUsedBeforeIssued} {
		if errors.Is(err, known) {
			return known
		}
	}
	return fmt.Errorf("token is invalid")
}
