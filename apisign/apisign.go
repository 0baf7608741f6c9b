// Package apisign is the one request-signing middleware of every signed API of the server:
// the Pusher HTTP API (pusher/) and the Toolmark bridge's app API (bridge/). Both speak the
// Pusher signature scheme (auth/ holds the pure verification); this package is where the
// order of the checks, the body bound and the path handling live, so the two surfaces cannot
// drift apart again.
//
// Order, cheapest and least revealing first:
//
//  1. the app id of the route resolves to an app (404 "Unknown app");
//  2. the query signature holds: auth_key, timestamp window, HMAC in constant time
//     (401) — before one byte of the body is read, so an unauthenticated caller cannot make
//     the server buffer anything;
//  3. the body is read through http.MaxBytesReader with the route's limit (413 when over);
//  4. body_md5 matches the body (401, as Pusher and the protocol decision say).
//
// Every refusal is {"error": "<reason>"} with a real HTTP status.
package apisign

import (
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/reverbgo/reverbgo/auth"
	"github.com/reverbgo/reverbgo/internal/httpbody"
)

// signedContext is the context the middleware hands on: the request's, with the resolved
// app and the verified body. echo's own store (c.Set) would cost a map and a boxed slice per
// request; this wrapper is one allocation.
type signedContext struct {
	echo.Context
	app  any
	body []byte
}

// signedOf finds the middleware's context under c.
func signedOf(c echo.Context) *signedContext {
	sc, _ := c.(*signedContext)
	return sc
}

// Credentials are what verification needs of an app.
type Credentials struct {
	Key    string
	Secret string
}

// Config describes one signed route set.
type Config struct {
	// Prefix is the path prefix the routes are mounted under ("" or "/reverb"). SDKs sign
	// the path without it, so it is stripped before verifying.
	Prefix string
	// Param names the route parameter that holds the app id ("app_id", "app").
	Param string
	// Lookup resolves an app id. app is left in the context for the handler (App(c));
	// ok=false answers 404.
	Lookup func(id string) (app any, cred Credentials, ok bool)
	// MaxBody bounds the body in bytes; one byte more answers 413. It must be > 0.
	MaxBody int64
	// Now is the clock of the timestamp window (time.Now when nil).
	Now func() time.Time
}

// Middleware returns the echo middleware that authenticates every request of a route set
// configured by cfg. The handler reads the app with App(c) and the body with Body(c).
func Middleware(cfg Config) echo.MiddlewareFunc {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.MaxBody <= 0 {
		panic("apisign: MaxBody must be > 0")
	}
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			r := c.Request()
			app, cred, ok := cfg.Lookup(c.Param(cfg.Param))
			if !ok {
				return refuseUnread(c, http.StatusNotFound, "Unknown app")
			}
			path, ok := SignedPath(r, cfg.Prefix)
			if !ok {
				return refuseUnread(c, http.StatusUnauthorized, "Invalid signature")
			}
			// The query as r.URL.Query() parses it, without building its url.Values.
			md5, hasMD5, err := auth.VerifyRawQuery(r.Method, path, r.URL.RawQuery, cred.Key, cred.Secret, cfg.Now())
			if err != nil {
				return refuseUnread(c, http.StatusUnauthorized, err.Error())
			}
			body, status, msg := readBody(c, cfg.MaxBody)
			if status != 0 {
				return refuse(c, status, msg)
			}
			if err := auth.VerifyBodyMD5(md5, hasMD5, body); err != nil {
				return refuse(c, http.StatusUnauthorized, err.Error())
			}
			return next(&signedContext{Context: c, app: app, body: body})
		}
	}
}

// SignedPath is the path an SDK signed: the request path as it came on the wire (escaped
// form, so a client that percent-encodes a channel name and signs what it sent is matched
// byte for byte) without the configured prefix. ok is false when the path does not start
// with the prefix, which only a request routed by mistake can do.
func SignedPath(r *http.Request, prefix string) (string, bool) {
	p := r.URL.EscapedPath()
	if prefix == "" {
		return p, true
	}
	if !strings.HasPrefix(p, prefix) {
		return "", false
	}
	return p[len(prefix):], true
}

// readBody reads the authenticated body (httpbody.Read): 413 over the limit, 400 when it
// cannot be read.
func readBody(c echo.Context, limit int64) ([]byte, int, string) {
	body, err := httpbody.Read(c.Response().Writer, c.Request(), limit)
	switch {
	case errors.Is(err, httpbody.ErrTooLarge):
		return nil, http.StatusRequestEntityTooLarge, "Request body is too large"
	case err != nil:
		return nil, http.StatusBadRequest, "Could not read the request body"
	}
	return body, 0, ""
}

// refuseUnread refuses a request whose body was not read. When a body is announced or
// chunked, the connection ends with the answer: net/http would otherwise read up to 256 KiB
// of it after the handler, at the client's pace, to reuse the connection for a caller that
// has not authenticated. A read deadline in the past makes that read fail at once.
func refuseUnread(c echo.Context, status int, msg string) error {
	if r := c.Request(); r.ContentLength != 0 {
		c.Response().Header().Set("Connection", "close")
		_ = http.NewResponseController(c.Response().Writer).SetReadDeadline(time.Unix(1, 0))
	}
	return refuse(c, status, msg)
}

func refuse(c echo.Context, status int, msg string) error {
	return c.JSON(status, map[string]string{"error": msg})
}

// App is the app the middleware resolved for this request (what Config.Lookup returned).
// The handler must get the context the middleware passed on (nil otherwise).
func App(c echo.Context) any {
	if sc := signedOf(c); sc != nil {
		return sc.app
	}
	return nil
}

// Body is the verified request body (nil when empty), from the middleware's context.
func Body(c echo.Context) []byte {
	if sc := signedOf(c); sc != nil {
		return sc.body
	}
	return nil
}
