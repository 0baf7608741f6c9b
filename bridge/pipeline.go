package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"time"

	"github.com/reverbgo/reverbgo/config"
)

// describeFirstTimeout bounds the describe that toolmark.validate: describe_first sends before
// a tool's first call of a manifest (the MCP tools/list bound).
const describeFirstTimeout = 5 * time.Second

// invoke is the one tool-call pipeline every surface goes through (handleInvoke and Invoke
// enter here with a decoded, bounded request):
//
//	resolve    the conversation's manifest and the tool in it: no page → error result,
//	           a name not in the manifest → refused unknown_tool
//	authorize  req.Access (scopes, tool globs) → refused forbidden
//	validate   the input against the tool's input schema, when known → invalid
//	rate limit the conversation's call bucket → ErrRateLimited
//	(dry run)  stops here with an ok result describing the call; nothing reaches the page
//	in flight  the conversation's bound → ErrTooManyInFlight
//	execute    bind, broadcast, wait, single-use claim, cancel on timeout; a mutation's
//	           confirmation is the page's needs_confirmation, bound here (MUST 5)
//	audit      one line and the metrics, on every path
//
// Authorize runs before validate, so that a caller learns nothing of a tool it may not call
// (not even its schema through the issues) and describe_first never describes it to the page.
func (b *Bridge) invoke(ctx context.Context, app *config.App, req *callRequest, kind string) (Outcome, error) {
	if req.Surface == "" {
		req.Surface = SurfaceAPI
	}
	key := ConvKey{App: app.ID, User: req.UserID, Conversation: req.ConversationID}
	au := &callAudit{key: key, id: newCallID(), tool: req.Tool, kind: kind, surface: req.Surface,
		subject: req.Subject, dryRun: req.DryRun, start: b.now()}
	if kind == KindCall {
		au.input = req.Input
	}
	b.observeStart(au)
	done := func(result []byte, hints Hints, status, reason string) (Outcome, error) {
		au.status, au.reason = status, reason
		b.auditCall(au)
		return Outcome{ID: au.id, Result: result, Hints: hints, Status: resultStatus(result)}, nil
	}

	// Resolve.
	m, err := b.store.GetManifest(ctx, key)
	if err != nil {
		return b.callStoreFailed(au, err)
	}
	channel := Channel(key.User, key.Conversation)
	if m == nil || !b.channelSubscribed(app.ID, channel) {
		return done(errorResult("No page is connected"), Hints{}, StatusError, "no_page")
	}
	tool := m.Tool(req.Tool)
	if tool == nil {
		return done(refusedResult("unknown_tool", "Unknown tool: "+req.Tool, &m.Rev), Hints{}, StatusRefused, "unknown_tool")
	}
	au.inManifest = true
	// Authorize.
	if d := req.Access.Check(tool); d != Allowed {
		return done(refusedResult("forbidden", d.Message(req.Tool), nil), tool.Hints, StatusRefused, "forbidden")
	}
	// Validate.
	if kind == KindCall {
		if s := b.inputSchema(ctx, app, req, m, key); s != nil && len(req.Input) <= maxValidated(app) {
			if issues := s.validate(req.Input); issues != nil {
				return done(invalidResult(issues), tool.Hints, StatusInvalid, "schema")
			}
		}
	}
	// Rate limit.
	if !b.callRate.Take(key) {
		au.status = "rate_limited"
		b.auditCall(au)
		return Outcome{ID: au.id, Status: au.status}, ErrRateLimited
	}
	if req.DryRun {
		au.status = "dry_run"
		b.auditCall(au)
		return Outcome{ID: au.id, Result: dryRunResult(tool), Hints: tool.Hints, Status: StatusOK}, nil
	}
	if !b.flight.acquire(key) {
		b.callRate.Refund(key)
		au.status = "too_many_in_flight"
		b.auditCall(au)
		return Outcome{ID: au.id, Status: au.status}, ErrTooManyInFlight
	}
	defer b.flight.release(key)
	// Execute.
	b.met.flight(app.ID, 1)
	defer b.met.flight(app.ID, -1)
	result, err := b.execute(ctx, app, req, kind, m, channel, au)
	if err != nil {
		return b.callStoreFailed(au, err)
	}
	au.status = resultStatus(result)
	if kind == KindDescribe && au.reason == "" {
		b.learnSchema(key, m, req.Tool, result, validateMode(app) != ValidateOff)
	}
	b.auditCall(au)
	return Outcome{ID: au.id, Result: result, Hints: tool.Hints, Status: au.status}, nil
}

func (b *Bridge) callStoreFailed(au *callAudit, err error) (Outcome, error) {
	b.log.Error("toolmark store failed", slog.String("call_id", au.id), slog.String("error", err.Error()))
	au.status = "store_error"
	b.auditCall(au)
	return Outcome{ID: au.id, Status: au.status}, errors.Join(ErrStore, err)
}

// validateMode is the app's toolmark.validate ("" = the default, known).
func validateMode(app *config.App) string {
	if app.Toolmark.Validate == "" {
		return ValidateKnown
	}
	return app.Toolmark.Validate
}

// maxValidated: an input over the app's max_message_size is not validated (its call fails
// the size check anyway), which bounds what one validation can cost.
func maxValidated(app *config.App) int {
	if app.MaxMessageSize > 0 {
		return app.MaxMessageSize
	}
	return 1 << 20
}

// inputSchema returns the compiled input schema of the call's tool in manifest m, or nil when
// it is unknown or not validated. With describe_first an unknown schema is described first
// (not for a dry run, which validates only against a schema already known)
// (through this pipeline: the same caller, rate limit and audit); a describe that fails
// leaves the call unvalidated, and the page validates it as before.
func (b *Bridge) inputSchema(ctx context.Context, app *config.App, req *callRequest, m *Manifest, key ConvKey) *inputSchema {
	mode := validateMode(app)
	if mode == ValidateOff {
		return nil
	}
	s, ok := b.schemas.get(key, m.ClientID, m.Rev, req.Tool)
	if ok || mode != ValidateDescribeFirst || req.DryRun {
		return s // a dry run never reaches the page, not even to describe
	}
	d := &callRequest{UserID: req.UserID, ConversationID: req.ConversationID, Tool: req.Tool,
		Input: nullInput, Timeout: min(req.Timeout, describeFirstTimeout), Access: req.Access,
		Surface: req.Surface, Subject: req.Subject}
	if _, err := b.invoke(ctx, app, d, KindDescribe); err != nil {
		return nil
	}
	s, _ = b.schemas.get(key, m.ClientID, m.Rev, req.Tool)
	return s
}

// learnSchema records what a describe the page answered says of the tool's input, for
// validation and for MCP's tools/list (DescribedSchemas): the raw inputSchema of an ok result
// and, when validating, its compiled schema, or "no schema" for an ok without one or a page's
// refusal or error (so describe_first does not describe it again for this manifest). With
// validation off nothing is compiled (compiling costs what validation would). The cache entry
// is the manifest the describe was sent to.
func (b *Bridge) learnSchema(key ConvKey, m *Manifest, tool string, result []byte, validating bool) {
	switch resultStatus(result) {
	case StatusTimeout, StatusCancelled:
		return
	}
	raw, ok := describedInputSchema(result)
	d := &described{raw: raw, ok: ok}
	if validating {
		d.schema = &inputSchema{}
		if ok {
			d.schema = compileSchema(raw)
		}
	}
	b.schemas.put(key, m.ClientID, m.Rev, tool, d, len(raw)+len(tool))
}

// DescribedSchemas returns, by full tool name, the raw data.inputSchema of every tool of k's
// manifest (clientID, rev) that an ok describe answered on this node, by any surface (nil: the
// describe had none). It is the node's one describe cache; MCP lists from it.
func (b *Bridge) DescribedSchemas(k ConvKey, clientID string, rev int64) map[string]json.RawMessage {
	return b.schemas.described(k, clientID, rev)
}

var nullInput = []byte("null")

func refusedResult(code, message string, rev *int64) []byte {
	r := map[string]any{"status": StatusRefused, "code": code, "message": message}
	if rev != nil {
		r["rev"] = *rev
	}
	return mustJSON(r)
}

func invalidResult(issues []Issue) []byte {
	return mustJSON(map[string]any{"status": StatusInvalid, "issues": issues})
}

// dryRunResult is a dry run's answer: {"status":"ok","data":{"dryRun":true,"tool":NAME,
// "hints":HINTS,"wouldConfirm":BOOL}} (keys sorted, as every stored result). wouldConfirm is
// what the hints predict: a consequential or destructive tool is expected to answer
// needs_confirmation; the page has the last word.
func dryRunResult(t *Tool) []byte {
	return mustJSON(map[string]any{"status": StatusOK, "data": map[string]any{
		"dryRun": true, "tool": t.Name, "hints": t.Hints,
		"wouldConfirm": isTrue(t.Hints.Consequential) || isTrue(t.Hints.Destructive),
	}})
}
