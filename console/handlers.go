package console

import (
	"embed"
	"encoding/json"
	"github.com/reverbgo/reverbgo/httpguard"
	"html/template"
	"io"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/reverbgo/reverbgo/pusher"
)

//go:embed assets
var assets embed.FS

var (
	loginPage = template.Must(template.ParseFS(assets, "assets/login.html"))
	indexPage = template.Must(template.ParseFS(assets, "assets/index.html"))
)

// Content-Security-Policy: everything from the binary itself, nothing inline, no framing.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; " +
	"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

func securityHeaders(ctx echo.Context) {
	h := ctx.Response().Header()
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin") // not no-referrer: Chromium then sends "Origin: null" on the login POST
	h.Set("Cache-Control", "no-store")
}

// handleIndex serves the console to a logged-in browser and the login form to anyone else.
func (c *Console) handleIndex(ctx echo.Context) error {
	securityHeaders(ctx)
	if _, _, ok := c.currentSession(ctx); !ok {
		return c.renderLogin(ctx, http.StatusOK, "")
	}
	ctx.Response().Header().Set(echo.HeaderContentType, echo.MIMETextHTMLCharsetUTF8)
	ctx.Response().WriteHeader(http.StatusOK)
	return indexPage.Execute(ctx.Response(), map[string]string{"Base": c.base})
}

func (c *Console) renderLogin(ctx echo.Context, status int, msg string) error {
	ctx.Response().Header().Set(echo.HeaderContentType, echo.MIMETextHTMLCharsetUTF8)
	ctx.Response().WriteHeader(status)
	return loginPage.Execute(ctx.Response(), map[string]string{"Error": msg, "Action": c.base + "/login", "Base": c.base})
}

// handleLogin checks the token: a session cookie and a redirect to the console when right,
// the form again with an error (401) when wrong.
func (c *Console) handleLogin(ctx echo.Context) error {
	securityHeaders(ctx)
	r := ctx.Request()
	if !sameOrigin(r) {
		return c.renderLogin(ctx, http.StatusForbidden, "Cross-site login refused.")
	}
	client := httpguard.Key(c.opts.Clients.Addr(r))
	if !c.logins.allow(client, c.now()) {
		return c.renderLogin(ctx, http.StatusTooManyRequests, "Too many attempts, wait a second.")
	}
	r.Body = http.MaxBytesReader(ctx.Response(), r.Body, maxLoginBody)
	token := ctx.FormValue("token")
	if token == "" || !c.tokenOK(token) {
		c.logins.fail(client, c.now())
		c.log.Warn("console login refused", "remote", client.String())
		return c.renderLogin(ctx, http.StatusUnauthorized, "Wrong token.")
	}
	id, _ := c.sessions.create()
	c.setSessionCookie(ctx, id, int(sessionTTL/time.Second))
	c.log.Info("console login", "remote", ctx.RealIP())
	return ctx.Redirect(http.StatusSeeOther, c.base)
}

func (c *Console) handleLogout(ctx echo.Context) error {
	ref := ctx.Get(ctxSession).(sessionRef)
	c.sessions.remove(ref.id)
	c.setSessionCookie(ctx, "", -1)
	return ctx.NoContent(http.StatusNoContent)
}

var assetTypes = map[string]string{
	".css": "text/css; charset=utf-8",
	".js":  "text/javascript; charset=utf-8",
}

// handleAsset serves the console's CSS and JS (no data in them, so no session needed).
func (c *Console) handleAsset(ctx echo.Context) error {
	name := ctx.Param("file")
	typ, ok := assetTypes[path.Ext(name)]
	if !ok || strings.ContainsAny(name, "/\\") {
		return echo.ErrNotFound
	}
	b, err := assets.ReadFile("assets/" + name)
	if err != nil {
		return echo.ErrNotFound
	}
	securityHeaders(ctx)
	return ctx.Blob(http.StatusOK, typ, b)
}

// handleSession tells the page who it is: the CSRF value it must send, the apps, the node.
func (c *Console) handleSession(ctx echo.Context) error {
	noStore(ctx)
	ref := ctx.Get(ctxSession).(sessionRef)
	return ctx.JSON(http.StatusOK, map[string]any{
		"csrf":      ref.sess.csrf,
		"apps":      c.order,
		"node":      c.opts.Node,
		"clustered": c.opts.Server.Clustered(),
		"toolmark":  c.opts.Bridge != nil,
	})
}

// handleTrigger publishes a test event through the server's own publish path, validated as
// the HTTP API validates POST /events.
func (c *Console) handleTrigger(ctx echo.Context) error {
	var req struct {
		App     string `json:"app"`
		Channel string `json:"channel"`
		Event   string `json:"event"`
		Data    string `json:"data"`
	}
	body, err := io.ReadAll(io.LimitReader(ctx.Request().Body, 1<<20+1))
	if err != nil || len(body) > 1<<20 {
		return ctx.JSON(http.StatusRequestEntityTooLarge, map[string]string{"error": "Body is too large"})
	}
	if json.Unmarshal(body, &req) != nil {
		return ctx.JSON(http.StatusBadRequest, map[string]string{"error": "Body must be {app, channel, event, data}"})
	}
	if c.apps[req.App] == nil {
		return ctx.JSON(http.StatusNotFound, map[string]string{"error": "Unknown app"})
	}
	data, _ := json.Marshal(req.Data) // the data string, as the SDKs send it
	if err := c.opts.Server.Trigger(ctx.Request().Context(), req.App, req.Channel, req.Event, data); err != nil {
		status := http.StatusBadRequest
		if te, ok := pusher.AsTriggerError(err); ok {
			status = te.Status
		}
		return ctx.JSON(status, map[string]string{"error": err.Error()})
	}
	c.log.Info("console triggered an event", "app", req.App, "channel", req.Channel, "event", req.Event)
	return ctx.JSON(http.StatusOK, map[string]bool{"ok": true})
}
