package bridge

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/reverbgo/reverbgo/apisign"
	"github.com/reverbgo/reverbgo/config"
)

// appHandler is an app endpoint after signature verification.
type appHandler func(c echo.Context, app *config.App, body []byte) error

// signed authenticates an app request with the same middleware as the Pusher HTTP API
// (apisign): unknown app → 404, bad signature → 401 before the body is read, body over
// Limits.MaxBody → 413, body_md5 mismatch → 401; then toolmark disabled → 403 (only after
// the signature, so unauthenticated callers learn nothing about the app's config).
func (b *Bridge) signed(prefix string, h appHandler) echo.HandlerFunc {
	mw := apisign.Middleware(apisign.Config{
		Prefix: prefix,
		Param:  "app",
		Lookup: func(id string) (any, apisign.Credentials, bool) {
			app := b.apps.AppByID(id)
			if app == nil {
				return nil, apisign.Credentials{}, false
			}
			return app, apisign.Credentials{Key: app.Key, Secret: app.Secret}, true
		},
		MaxBody: b.lim.MaxBody,
		Now:     b.now,
	})
	return mw(func(c echo.Context) error {
		app := apisign.App(c).(*config.App)
		if !app.Toolmark.Enabled {
			return jsonError(c, http.StatusForbidden, "Toolmark is disabled for this app")
		}
		return h(c, app, apisign.Body(c))
	})
}

// callRequest is a decoded POST /toolmark/calls or /toolmark/describe body.
type callRequest struct {
	UserID         string
	ConversationID string
	Tool           string
	Input          json.RawMessage // JSON null when absent
	Rev            *int64
	ToolUseID      string
	Timeout        time.Duration // 0 = the app's default
	Access         Access        // scopes and tools; the zero value allows every tool
	DryRun         bool          // dry_run (calls only)
	Surface        string        // SurfaceAPI or SurfaceMCP ("" = SurfaceAPI)
	Subject        string        // the caller's token subject, for the audit line
}

// decodeCallRequest validates an agent's request. Unknown keys are ignored (forward
// compatibility of the app's client); explicit nulls count as absent for optional keys.
// maxTimeout bounds timeout_ms. Every error is a *ProtocolError (422).
func decodeCallRequest(body []byte, callKind string, maxTimeout time.Duration) (*callRequest, error) {
	if req, ok := fastDecodeCallRequest(body, callKind, maxTimeout); ok {
		return req, nil
	}
	return slowDecodeCallRequest(body, callKind, maxTimeout)
}

// slowDecodeCallRequest is the reference decoder: every error text comes from here.
func slowDecodeCallRequest(body []byte, callKind string, maxTimeout time.Duration) (*callRequest, error) {
	o, err := parseObject(body)
	if err != nil {
		return nil, err
	}
	req := &callRequest{Input: json.RawMessage("null")}
	if req.UserID, req.ConversationID, err = convIDs(o); err != nil {
		return nil, err
	}
	raw, ok := o["tool"]
	if !ok {
		return nil, protoErr("tool is required")
	}
	if req.Tool, err = asString(raw, "tool"); err != nil || !ValidToolName(req.Tool) {
		return nil, protoErr("tool must match ^[A-Za-z0-9_.-]{1,128}$")
	}
	if req.Access, err = decodeAccess(o); err != nil {
		return nil, err
	}
	if callKind == KindDescribe {
		return req, nil
	}
	if raw, ok := o["dry_run"]; ok && kind(raw) != 'z' {
		if req.DryRun, err = asBool(raw, "dry_run"); err != nil {
			return nil, err
		}
	}
	if raw, ok := o["input"]; ok {
		req.Input = raw
	}
	if raw, ok := o["rev"]; ok && kind(raw) != 'z' {
		rev, err := asRev(raw, "rev")
		if err != nil {
			return nil, err
		}
		req.Rev = &rev
	}
	if raw, ok := o["tool_use_id"]; ok && kind(raw) != 'z' {
		if req.ToolUseID, err = asString(raw, "tool_use_id"); err != nil {
			return nil, err
		}
		if len(req.ToolUseID) > 256 || !utf8.ValidString(req.ToolUseID) {
			return nil, protoErr("tool_use_id must be at most 256 bytes")
		}
	}
	if raw, ok := o["timeout_ms"]; ok && kind(raw) != 'z' {
		ms, err := asRev(raw, "timeout_ms")
		maxMS := maxTimeout.Milliseconds()
		if err != nil || ms < 1 || ms > maxMS {
			return nil, protoErr("timeout_ms must be an integer between 1 and %d", maxMS)
		}
		req.Timeout = time.Duration(ms) * time.Millisecond
	}
	return req, nil
}

// decodeAccess reads the optional scopes and tools (arrays of strings; absent or null = no
// restriction).
func decodeAccess(o obj) (Access, error) {
	var lists [2][]string
	for i, name := range [...]string{"scopes", "tools"} {
		raw, ok := o[name]
		if !ok || kind(raw) == 'z' {
			continue
		}
		lists[i] = []string{}
		err := eachItem(raw, name, func(item json.RawMessage) error {
			if len(lists[i]) >= MaxToolPatterns {
				return protoErr("%s may hold at most %d entries", name, MaxToolPatterns)
			}
			s, err := asString(item, name+"[]")
			lists[i] = append(lists[i], s)
			return err
		})
		if err != nil {
			return Access{}, err
		}
	}
	return NewAccess(lists[0], lists[1], true)
}

// convIDs reads and validates user_id and conversation_id, which end up in a channel name.
func convIDs(o obj) (user, conv string, err error) {
	for _, f := range []struct {
		name string
		dst  *string
	}{{"user_id", &user}, {"conversation_id", &conv}} {
		raw, ok := o[f.name]
		if !ok {
			return "", "", protoErr("%s is required", f.name)
		}
		s, err := asString(raw, f.name)
		if err != nil || !ValidChannelPart(s) {
			return "", "", protoErr("%s must be a string of 1-128 characters from [-a-zA-Z0-9_=@,;]", f.name)
		}
		*f.dst = s
	}
	return user, conv, nil
}

func (b *Bridge) handleCall(c echo.Context, app *config.App, body []byte) error {
	return b.handleInvoke(c, app, body, KindCall)
}

func (b *Bridge) handleDescribe(c echo.Context, app *config.App, body []byte) error {
	return b.handleInvoke(c, app, body, KindDescribe)
}

// callResponse is the agent's answer, exactly these keys. appendCallResponse writes it without
// reflection; TestCallResponseBytes holds the two to the same bytes.
type callResponse struct {
	ID     string          `json:"id"`
	Result json.RawMessage `json:"result"`
	Hints  Hints           `json:"hints"`
}

func errorResult(msg string) json.RawMessage {
	return mustJSON(map[string]string{"status": StatusError, "message": msg})
}

var timeoutResult = json.RawMessage(`{"status":"timeout"}`)

// handleInvoke is the signed API's side of the tool-runtime pipeline: decode and validate the
// request, then invoke (rate-limit, execute, audit and metrics) and write the answer.
func (b *Bridge) handleInvoke(c echo.Context, app *config.App, body []byte, kind string) error {
	def, max := appTimeouts(app)
	req, err := decodeCallRequest(body, kind, max)
	if err != nil {
		return jsonError(c, http.StatusUnprocessableEntity, err.Error())
	}
	if req.Timeout == 0 {
		req.Timeout = def
	}
	req.Surface = SurfaceAPI
	out, err := b.invoke(c.Request().Context(), app, req, kind)
	switch {
	case errors.Is(err, ErrRateLimited), errors.Is(err, ErrTooManyInFlight):
		return jsonError(c, http.StatusTooManyRequests, err.Error())
	case err != nil:
		return jsonError(c, http.StatusServiceUnavailable, ErrStore.Error())
	}
	return writeRaw(c, http.StatusOK, appendCallResponse(make([]byte, 0, 96+len(out.Result)), out.ID, out.Result, out.Hints))
}

// execute binds, broadcasts (on channel, the conversation's) and waits for a call or describe
// of a tool the pipeline resolved in manifest m. Errors are store failures; everything the
// agent should see as a tool outcome is returned as a result.
func (b *Bridge) execute(ctx context.Context, app *config.App, req *callRequest, kind string,
	m *Manifest, channel string, au *callAudit) (json.RawMessage, error) {
	key, timeout := au.key, req.Timeout
	// Valid by construction, so appended without re-validation: the id is a server UUID, the
	// clientId was checked when the manifest arrived, the tool and input by decodeCallRequest
	// (whose depth bound leaves room for the envelope).
	var data []byte
	if kind == KindDescribe {
		data = appendEvent(make([]byte, 0, 160), TypeDescribe, m.ClientID, au.id, nil, req.Tool, nil)
	} else {
		data = appendEvent(make([]byte, 0, 192+len(req.Input)), TypeCall, m.ClientID, au.id, req.Rev, req.Tool, req.Input)
	}
	if app.MaxMessageSize > 0 && len(data) > app.MaxMessageSize {
		au.reason = "too_large"
		return errorResult(fmt.Sprintf("The call is %d bytes, over the app's max_message_size of %d bytes",
			len(data), app.MaxMessageSize)), nil
	}
	bind := Binding{ID: au.id, Key: key, ClientID: m.ClientID, Kind: kind, Tool: req.Tool,
		ToolUseID: req.ToolUseID, Deadline: b.now().Add(timeout)}
	// MUST 2: bound before broadcast, so a result can never arrive for an unbound id.
	if err := b.store.Bind(ctx, bind, timeout+b.lim.LateGrace); err != nil {
		return nil, err
	}
	// Watch before publishing, so that even an instant answer wakes this waiter.
	wake, release := b.store.Watch(au.id)
	defer release()
	if err := b.pub.Publish(app.ID, channel, EventName, data); err != nil {
		b.log.Error("toolmark publish failed", slog.String("app", app.ID), slog.String("call_id", au.id),
			slog.String("error", err.Error()))
		res, timedOut, cerr := b.store.ClaimTimeout(context.WithoutCancel(ctx), au.id)
		if cerr != nil {
			return nil, cerr
		}
		if timedOut {
			au.reason = "publish_failed"
			return errorResult("Could not broadcast the call"), nil
		}
		return res, nil
	}
	timer := getTimer(timeout)
	defer putTimer(timer)
	select {
	case <-wake:
	case <-timer.C:
		au.reason = "deadline"
	case <-ctx.Done():
		au.reason = "client_gone"
	case <-b.closing:
		au.reason = "shutdown"
	}
	// The single-use claim decides the race with the page: either we claim the timeout or we
	// get the result that won (MUST 3).
	res, timedOut, err := b.store.ClaimTimeout(context.WithoutCancel(ctx), au.id)
	if err != nil {
		return nil, err
	}
	if !timedOut {
		au.reason = ""
		return res, nil
	}
	// MUST 4: the page learns the call is over.
	cancel := appendEvent(nil, TypeCancel, m.ClientID, au.id, nil, "", nil)
	if err := b.pub.Publish(app.ID, channel, EventName, cancel); err != nil {
		b.log.Warn("toolmark cancel publish failed", slog.String("app", app.ID),
			slog.String("call_id", au.id), slog.String("error", err.Error()))
	}
	return timeoutResult, nil
}

// resultStatus reads the status of a result for audit and metrics. Every stored result is
// canonical (json.Marshal of its validated members, so keys sorted, no escapes in keys) or a
// server constant, and "status" sorts after every other ToolResult key except needs_confirmation's
// "summary": so the status is the suffix `"status":"<s>"}` (a `:"` cannot occur inside a JSON
// string). Only needs_confirmation and anything unexpected pay for a parse.
func resultStatus(result json.RawMessage) string {
	if s, ok := statusSuffix(result); ok {
		return s
	}
	var s struct {
		Status string `json:"status"`
	}
	if json.Unmarshal(result, &s) != nil {
		return "unknown"
	}
	return s.Status
}

var knownStatuses = [...]string{StatusOK, StatusError, StatusTimeout, StatusRefused, StatusInvalid, StatusCancelled}

func statusSuffix(result []byte) (string, bool) {
	const tail = `"}`
	if !bytes.HasSuffix(result, []byte(tail)) {
		return "", false
	}
	head := result[:len(result)-len(tail)]
	for _, st := range knownStatuses {
		if n := len(head) - len(st); n >= 10 && string(head[n:]) == st && string(head[n-10:n]) == `"status":"` {
			return st, true
		}
	}
	return "", false
}

// handleManifest is GET /apps/{id}/toolmark/manifest?user_id=&conversation_id=.
func (b *Bridge) handleManifest(c echo.Context, app *config.App, _ []byte) error {
	user, conv := c.QueryParam("user_id"), c.QueryParam("conversation_id")
	if !ValidChannelPart(user) || !ValidChannelPart(conv) {
		return jsonError(c, http.StatusUnprocessableEntity,
			"user_id and conversation_id must be strings of 1-128 characters from [-a-zA-Z0-9_=@,;]")
	}
	m, err := b.store.GetManifest(c.Request().Context(), ConvKey{App: app.ID, User: user, Conversation: conv})
	if err != nil {
		return jsonError(c, http.StatusServiceUnavailable, "Bridge store unavailable")
	}
	if m == nil {
		return jsonError(c, http.StatusNotFound, "No manifest")
	}
	if m.Tools == nil {
		m.Tools = []Tool{}
	}
	return writeRaw(c, http.StatusOK, mustJSON(m))
}

// handleMessages is POST /apps/{id}/toolmark/messages: a page message the app forwarded from
// behind its own session and CSRF checks. It gets the page endpoint's processing and status,
// minus the socket check; its rate-limit bucket is per app/user/conversation.
func (b *Bridge) handleMessages(c echo.Context, app *config.App, body []byte) error {
	start := b.now()
	key := ConvKey{App: app.ID}
	var pm *PageMessage
	out := func() pageOutcome {
		// One more level than a page message: the wrapper object.
		if err := CheckDepth(body, MaxDepth+1); err != nil {
			return reject(http.StatusUnprocessableEntity, err.Error())
		}
		if !utf8.Valid(body) || !json.Valid(body) {
			return reject(http.StatusUnprocessableEntity, "body must be a JSON object")
		}
		o, err := asObject(body, "body")
		if err != nil {
			return reject(http.StatusUnprocessableEntity, err.Error())
		}
		if key.User, key.Conversation, err = convIDs(o); err != nil {
			return reject(http.StatusUnprocessableEntity, err.Error())
		}
		msg, ok := o["message"]
		if !ok {
			return reject(http.StatusUnprocessableEntity, "message is required")
		}
		var out pageOutcome
		pm, out = b.processPage(c.Request().Context(), key, msg, "conv\x00"+key.App+"\x00"+key.User+"\x00"+key.Conversation)
		return out
	}()
	b.auditPage(key, pm, out, start)
	return writePage(c, out)
}

// pageSubscribed reports whether a page can receive the call: when Sockets can tell, some
// socket must be subscribed to the conversation's channel; otherwise a stored manifest is
// taken as a connected page.
func (b *Bridge) pageSubscribed(appID string, key ConvKey) bool {
	return b.channelSubscribed(appID, Channel(key.User, key.Conversation))
}

// channelSubscribed is pageSubscribed for the conversation's channel name.
func (b *Bridge) channelSubscribed(appID, channel string) bool {
	occ, ok := b.sockets.(Occupancy)
	if !ok {
		return true
	}
	return occ.Subscribed(appID, channel)
}

// timers are the call waits' deadline timers, reused: each wait would otherwise allocate a
// timer and its channel. Since Go 1.23 a stopped timer's channel holds no stale tick (this
// module's go version selects those semantics), so Stop then Reset is safe.
var timers sync.Pool

func getTimer(d time.Duration) *time.Timer {
	if t, ok := timers.Get().(*time.Timer); ok {
		t.Reset(d)
		return t
	}
	return time.NewTimer(d)
}

func putTimer(t *time.Timer) {
	t.Stop()
	timers.Put(t)
}
