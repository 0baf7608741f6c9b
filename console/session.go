package console

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
)

// Session settings. The cookie holds only a random session id: the token never leaves the
// login request, and a stolen cookie dies with the session (logout or sessionTTL).
const (
	cookieName  = "reverbgo_console"
	csrfHeader  = "X-Console-CSRF"
	sessionTTL  = 12 * time.Hour
	maxSessions = 64
	// maxFailedLogins per second per client, and maxFailedLoginsAll for all clients
	// together: the token is long-lived, so guessing it must be slow.
	maxFailedLogins    = 5
	maxFailedLoginsAll = 50
	maxLoginBody       = 4096
)

type session struct {
	expires time.Time
	csrf    string
}

// sessions is the set of logged-in browsers, bounded: the oldest is evicted past maxSessions.
type sessions struct {
	mu  sync.Mutex
	m   map[string]session
	now func() time.Time
}

func newSessions(now func() time.Time) *sessions {
	return &sessions{m: make(map[string]session), now: now}
}

func randomID() string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("console: crypto/rand failed: " + err.Error())
	}
	return hex.EncodeToString(b[:])
}

func (s *sessions) create() (id string, sess session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	for k, v := range s.m {
		if now.After(v.expires) {
			delete(s.m, k)
		}
	}
	for len(s.m) >= maxSessions {
		oldest := ""
		for k, v := range s.m {
			if oldest == "" || v.expires.Before(s.m[oldest].expires) {
				oldest = k
			}
		}
		delete(s.m, oldest)
	}
	id = randomID()
	sess = session{expires: now.Add(sessionTTL), csrf: randomID()}
	s.m[id] = sess
	return id, sess
}

func (s *sessions) get(id string) (session, bool) {
	if len(id) != 64 {
		return session{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sess, ok := s.m[id]
	if ok && s.now().After(sess.expires) {
		delete(s.m, id)
		return session{}, false
	}
	return sess, ok
}

func (s *sessions) remove(id string) {
	s.mu.Lock()
	delete(s.m, id)
	s.mu.Unlock()
}

// loginLimiter counts failed logins per second, per client and all clients together: a
// client is refused after maxFailedLogins in the current second, and every client after
// maxFailedLoginsAll, so one client guessing cannot lock the operator out while guessing
// stays slow for many clients too. It holds at most maxFailedLoginsAll clients (reset each
// second).
type loginLimiter struct {
	mu     sync.Mutex
	second int64
	all    int
	by     map[netip.Addr]int
}

func (l *loginLimiter) rollLocked(now time.Time) {
	if s := now.Unix(); s != l.second {
		l.second, l.all = s, 0
		clear(l.by)
	}
}

func (l *loginLimiter) allow(client netip.Addr, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rollLocked(now)
	return l.all < maxFailedLoginsAll && l.by[client] < maxFailedLogins
}

func (l *loginLimiter) fail(client netip.Addr, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rollLocked(now)
	if l.by == nil {
		l.by = map[netip.Addr]int{}
	}
	l.all++
	l.by[client]++
}

// tokenOK compares in constant time (hashes first, so the length does not leak either).
func (c *Console) tokenOK(token string) bool {
	h := sha256.Sum256([]byte(token))
	return subtle.ConstantTimeCompare(h[:], c.tokenHash[:]) == 1
}

const ctxSession = "console.session"

// currentSession is the request's valid session, if any.
func (c *Console) currentSession(ctx echo.Context) (string, session, bool) {
	ck, err := ctx.Cookie(cookieName)
	if err != nil {
		return "", session{}, false
	}
	sess, ok := c.sessions.get(ck.Value)
	return ck.Value, sess, ok
}

// requireSession answers 401 to every data endpoint and stream without a session.
func (c *Console) requireSession(next echo.HandlerFunc) echo.HandlerFunc {
	return func(ctx echo.Context) error {
		id, sess, ok := c.currentSession(ctx)
		if !ok {
			noStore(ctx)
			return ctx.JSON(http.StatusUnauthorized, map[string]string{"error": "Log in to the console first"})
		}
		ctx.Set(ctxSession, sessionRef{id, sess})
		return next(ctx)
	}
}

type sessionRef struct {
	id   string
	sess session
}

// requireCSRF guards state-changing requests: the header only the console page sets (a
// cross-site form cannot set headers, and a cross-site fetch with one needs a CORS preflight
// the console never answers) and an Origin equal to the request's own.
func (c *Console) requireCSRF(next echo.HandlerFunc) echo.HandlerFunc {
	return func(ctx echo.Context) error {
		ref := ctx.Get(ctxSession).(sessionRef)
		got := ctx.Request().Header.Get(csrfHeader)
		if subtle.ConstantTimeCompare([]byte(got), []byte(ref.sess.csrf)) != 1 || !sameOrigin(ctx.Request()) {
			return ctx.JSON(http.StatusForbidden, map[string]string{"error": "Cross-site request refused"})
		}
		return next(ctx)
	}
}

// sameOrigin reports whether the request's Origin names the host (and port) it was sent to.
// Browsers send Origin on every POST, so a missing one is refused too. The scheme is not
// compared: behind a TLS-terminating proxy the browser's https Origin reaches a plain-HTTP
// listener, and a page on the same host over the other scheme is no foreign site.
func sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return false
	}
	u, err := url.Parse(o)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return false
	}
	return strings.EqualFold(u.Host, r.Host)
}

// secureRequest reports TLS here or at a proxy in front (X-Forwarded-Proto). Trusting the
// header only ever makes the cookie stricter.
func secureRequest(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}

func noStore(ctx echo.Context) {
	ctx.Response().Header().Set("Cache-Control", "no-store")
}

func (c *Console) setSessionCookie(ctx echo.Context, value string, maxAge int) {
	ctx.SetCookie(&http.Cookie{
		Name:     cookieName,
		Value:    value,
		Path:     c.base, // {path}/console: the cookie goes nowhere else on the server
		MaxAge:   maxAge,
		HttpOnly: true,
		Secure:   secureRequest(ctx.Request()),
		SameSite: http.SameSiteStrictMode,
	})
}
