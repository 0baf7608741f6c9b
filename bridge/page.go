package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"
)

// pageOutcome is the HTTP answer to one page message.
type pageOutcome struct {
	code   int
	reason string
}

var accepted = pageOutcome{code: http.StatusNoContent}

// reject builds a rejection; the reason is capped because it may quote page-chosen keys or types.
func reject(code int, reason string) pageOutcome {
	return pageOutcome{code: code, reason: truncate(reason, 200)}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// handlePage is POST {prefix}/toolmark/bridge/{conversation}: the page's own POST, authorized
// by the socket's subscription. The app and user come from the subscription, never from the
// body, so a page can only speak for the conversation its socket was authorized for.
func (b *Bridge) handlePage(c echo.Context) error {
	start := b.now()
	conv := c.Param("conversation")
	socketID := c.Request().Header.Get("X-Socket-ID")
	key := ConvKey{Conversation: conv}
	out := b.pageGate(c, socketID, &key)
	var pm *PageMessage
	if out.code == 0 {
		body, err := b.readBody(c)
		switch {
		case errors.Is(err, errBodyTooLarge):
			out = reject(http.StatusRequestEntityTooLarge, "Body over the size limit")
		case err != nil:
			out = reject(http.StatusBadRequest, "Cannot read body")
		default:
			pm, out = b.processPage(c.Request().Context(), key, body, "socket\x00"+socketID)
		}
	}
	b.auditPage(key, pm, out, start)
	return writePage(c, out)
}

// pageGate resolves the socket to its app and user (filling key) or returns the rejection.
// Order: a missing, malformed or unknown socket is 401; a socket not subscribed to this
// conversation's channel is 403; then a missing or wrong page token is 401.
func (b *Bridge) pageGate(c echo.Context, socketID string, key *ConvKey) pageOutcome {
	if socketID == "" {
		return reject(http.StatusUnauthorized, "Missing X-Socket-ID")
	}
	if !validSocketID(socketID) {
		return reject(http.StatusUnauthorized, "Malformed X-Socket-ID")
	}
	appID, user, tokenHash, n, ok := socketConversation(b.sockets, socketID, key.Conversation)
	if !ok {
		return reject(http.StatusUnauthorized, "Unknown socket")
	}
	key.App = appID
	app := b.apps.AppByID(appID)
	if app == nil {
		return reject(http.StatusForbidden, "Unknown app")
	}
	origin := c.Request().Header.Get("Origin")
	if !originAllowed(app, origin) {
		// The preflight may have been allowed for another app; the socket's app decides.
		return reject(http.StatusForbidden, "Origin not allowed")
	}
	setCORS(c, origin)
	if n != 1 {
		// Zero: not subscribed. More than one: two users' channels for one conversation on a
		// single socket is ambiguous, so it speaks for neither.
		return reject(http.StatusForbidden, "Socket is not subscribed to this conversation")
	}
	key.User = user
	if !app.Toolmark.Enabled {
		// Before the token: a disabled app's subscriptions get none.
		return reject(http.StatusForbidden, "Toolmark is disabled for this app")
	}
	if !pageTokenOK(app, c.Request().Header.Get(PageTokenHeader), tokenHash) {
		return reject(http.StatusUnauthorized, "Missing or wrong "+PageTokenHeader)
	}
	return pageOutcome{}
}

func writePage(c echo.Context, out pageOutcome) error {
	if out.code == http.StatusNoContent {
		return c.NoContent(out.code)
	}
	return jsonError(c, out.code, out.reason)
}

// processPage runs the checks shared by the page endpoint and the app's /messages endpoint.
//
// Rate limiting (per socket, or per conversation for /messages) is charged by what a message
// does, not by its count. A result or confirmed that answers an open binding of this
// conversation and clientId is never refused: pages do not retry, so a 429 there would leave the
// agent waiting out its deadline, and such answers are already bounded by the call limits (one
// per call, MaxInFlight and CallRate). Everything else is charged: manifest and changed take a
// token before they run; a result or confirmed runs first and is charged only when it turns out
// not to answer anything (404 unknown id, 409 duplicate, 410 late), and when the bucket is empty
// it is answered 429 instead. That is exact because those outcomes change nothing in the store,
// so a flood of bogus results is limited like any other flood and a refused message consumed
// nothing. Unauthorized or malformed messages (401/403/413/422) and store failures (503) consume
// no token, so a corrected retry is accepted, but they still need one to be available.
func (b *Bridge) processPage(ctx context.Context, key ConvKey, body []byte, rateKey string) (*PageMessage, pageOutcome) {
	pm, err := DecodePageMessage(body)
	if err != nil {
		return nil, reject(http.StatusUnprocessableEntity, err.Error())
	}
	if pm.Type == TypeResult || pm.Type == TypeConfirmed {
		return pm, b.chargeAnswer(rateKey, b.apply(ctx, key, pm))
	}
	if !b.pageRate.Take(rateKey) {
		return pm, tooManyMessages
	}
	out := b.apply(ctx, key, pm)
	if refunded(out.code) {
		b.pageRate.Refund(rateKey)
	}
	return pm, out
}

var tooManyMessages = reject(http.StatusTooManyRequests, "Too many messages")

// refunded reports the outcomes that give their rate-limit token back (see processPage).
func refunded(code int) bool {
	switch code {
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusRequestEntityTooLarge,
		http.StatusUnprocessableEntity, http.StatusServiceUnavailable:
		return true
	}
	return false
}

// chargeAnswer charges a result or confirmed after it ran (see processPage): accepted answers
// and store failures are free, everything else needs a token and is 429 without one.
func (b *Bridge) chargeAnswer(rateKey string, out pageOutcome) pageOutcome {
	if out.code == http.StatusNoContent || out.code == http.StatusServiceUnavailable {
		return out
	}
	if !b.pageRate.Take(rateKey) {
		return tooManyMessages
	}
	if refunded(out.code) {
		b.pageRate.Refund(rateKey)
	}
	return out
}

// storeFailed answers 503: the message may be retried once the store is back. The refund in
// processPage keeps such a retry from being rate-limited.
func (b *Bridge) storeFailed(err error) pageOutcome {
	if err != nil {
		b.log.Error("toolmark store failed", slog.String("error", err.Error()))
	}
	return reject(http.StatusServiceUnavailable, "Bridge store unavailable")
}

// apply executes one valid page message against the store.
func (b *Bridge) apply(ctx context.Context, key ConvKey, pm *PageMessage) pageOutcome {
	switch pm.Type {
	case TypeManifest:
		// A lower rev from the same clientId is accepted and ignored: POSTs may arrive out of
		// order and the page must not see a failure for a stale-but-valid message.
		m := Manifest{ClientID: pm.ClientID, Rev: pm.Rev, Tools: pm.Tools}
		if _, err := b.store.PutManifest(ctx, key, m, b.lim.ManifestTTL); err != nil {
			return b.storeFailed(err)
		}
		b.met.manifest(key.App, pm.Tools, b.now())
		return accepted
	case TypeChanged:
		current, err := b.store.ChangeRev(ctx, key, pm.ClientID, pm.Rev, b.lim.ManifestTTL)
		if err != nil {
			return b.storeFailed(err)
		}
		if !current {
			return reject(http.StatusForbidden, "clientId is not the current one")
		}
		return accepted
	case TypeResult:
		return b.applyResult(ctx, key, pm)
	case TypeConfirmed:
		return b.applyConfirmed(ctx, key, pm)
	}
	return reject(http.StatusUnprocessableEntity, "unknown message type")
}

func (b *Bridge) applyResult(ctx context.Context, key ConvKey, pm *PageMessage) pageOutcome {
	bind, err := b.store.GetBinding(ctx, pm.ID)
	if err != nil {
		return b.storeFailed(err)
	}
	if bind == nil {
		return reject(http.StatusNotFound, "Unknown or expired call id")
	}
	if !bind.Matches(key, pm.ClientID) {
		return reject(http.StatusForbidden, "Result does not match the call's binding")
	}
	var confirm *ConfirmBinding
	if pm.Status == StatusNeedsConfirmation {
		if bind.Kind != KindCall {
			return reject(http.StatusUnprocessableEntity, "needs_confirmation cannot answer a describe")
		}
		confirm = &ConfirmBinding{ConfirmID: pm.ResultConfirmID, Key: key, ClientID: pm.ClientID,
			CallID: bind.ID, ToolUseID: bind.ToolUseID}
	}
	outcome, err := b.store.ClaimResult(ctx, pm.ID, pm.Result, b.now(), confirm, b.lim.ConfirmTTL)
	if err != nil {
		return b.storeFailed(err)
	}
	switch outcome {
	case Claimed:
		return accepted
	case ClaimNotFound:
		return reject(http.StatusNotFound, "Unknown or expired call id")
	case ClaimDuplicate:
		return reject(http.StatusConflict, "Call already answered")
	case ClaimTimedOut:
		return reject(http.StatusConflict, "Call already timed out")
	case ClaimLate:
		return reject(http.StatusGone, "Call deadline passed")
	case ClaimConfirmTaken:
		return reject(http.StatusConflict, "confirmId already bound")
	}
	return b.storeFailed(nil)
}

func (b *Bridge) applyConfirmed(ctx context.Context, key ConvKey, pm *PageMessage) pageOutcome {
	cb, err := b.store.GetConfirm(ctx, key.App, pm.ConfirmID)
	if err != nil {
		return b.storeFailed(err)
	}
	if cb == nil {
		return reject(http.StatusNotFound, "Unknown or expired confirmId")
	}
	if cb.Key != key || cb.ClientID != pm.ClientID {
		return reject(http.StatusForbidden, "Confirmation does not match its binding")
	}
	ok, err := b.store.ClaimConfirm(ctx, key.App, pm.ConfirmID)
	if err != nil {
		return b.storeFailed(err)
	}
	if !ok {
		return reject(http.StatusConflict, "Confirmation already received")
	}
	if b.hooks != nil {
		var toolUseID any // null when the agent sent no tool_use_id
		if cb.ToolUseID != "" {
			toolUseID = cb.ToolUseID
		}
		b.hooks.Emit(key.App, map[string]any{
			"name":            "toolmark_confirmed",
			"user_id":         key.User,
			"conversation_id": key.Conversation,
			"call_id":         cb.CallID,
			"tool_use_id":     toolUseID,
			"confirm_id":      cb.ConfirmID,
			"result":          json.RawMessage(append([]byte(nil), pm.Result...)),
		})
	}
	return accepted
}

// auditPage writes the one structured line per page message: never the result values.
func (b *Bridge) auditPage(key ConvKey, pm *PageMessage, out pageOutcome, start time.Time) {
	typ, id, clientID, status := "", "", "", ""
	if pm != nil {
		typ, clientID, status = pm.Type, pm.ClientID, pm.Status
		id = pm.ID
		if pm.ConfirmID != "" {
			id = pm.ConfirmID
		}
	}
	level := slog.LevelInfo
	if out.code >= 500 {
		level = slog.LevelError
	}
	b.met.page(key.App, typ, out.code)
	attrs := []slog.Attr{
		slog.String("app", key.App), slog.String("user", key.User),
		slog.String("conversation", key.Conversation), slog.String("type", typ),
		slog.String("call_id", id), slog.String("client_id", clientID),
		slog.String("result_status", status), slog.Int("status", out.code),
		slog.Int64("latency_ms", b.now().Sub(start).Milliseconds()),
	}
	if out.reason != "" {
		attrs = append(attrs, slog.String("reason", out.reason))
	}
	b.log.LogAttrs(context.Background(), level, "toolmark page message", attrs...)
}
