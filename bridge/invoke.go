package bridge

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"time"
	"unicode/utf8"

	"github.com/reverbgo/reverbgo/config"
)

// Surfaces name who asked for a call, in the audit line's `surface` field and the metrics'
// `surface` label.
const (
	// SurfaceAPI is the signed app API (POST /apps/{id}/toolmark/calls and /describe).
	SurfaceAPI = "api"
	// SurfaceMCP is the MCP endpoint ({path}/toolmark/mcp).
	SurfaceMCP = "mcp"
)

// Errors of Invoke that are not tool outcomes. The signed API answers them 429 and 503; other
// surfaces map them to their own error shapes.
var (
	// ErrRateLimited: the conversation's call bucket is empty (CallRate/CallBurst).
	ErrRateLimited = errors.New("Too many calls")
	// ErrTooManyInFlight: MaxInFlight calls of the conversation are already waiting on this node.
	ErrTooManyInFlight = errors.New("Too many calls in flight")
	// ErrStore: the bridge store failed; the call was not (or not surely) broadcast.
	ErrStore = errors.New("Bridge store unavailable")
)

// Invocation is one call or describe, already authorized by its surface (a signed request, an
// MCP bearer token). Invoke validates it again, because every surface's input is untrusted.
type Invocation struct {
	Key  ConvKey
	Kind string // KindCall or KindDescribe
	Tool string
	// Input is the call's input; nil means JSON null. Ignored for a describe.
	Input json.RawMessage
	// Rev is the manifest rev the agent saw, sent to the page so it can refuse a stale call.
	Rev       *int64
	ToolUseID string
	// Timeout is the deadline; 0 = the app's call_timeout_ms, and it is capped at max_timeout_ms.
	Timeout time.Duration
	// Surface names the caller in audit and metrics; "" = SurfaceAPI.
	Surface string
	// Subject is the caller's token subject, for the audit line ("" when none).
	Subject string
	// Access limits the tools the caller may call or describe (scopes, tool globs); the zero
	// value allows every tool. A call outside it is refused (forbidden) before the page hears
	// of it.
	Access Access
	// DryRun stops a call after resolve, authorize, validate and the rate-limit check: the
	// page sees nothing and the result is the dry run's (dryRunResult).
	DryRun bool
}

// Outcome is what the agent gets: the call id, the ToolResult (or {"status":"timeout"}) and the
// hints of the tool in the manifest the call went to.
type Outcome struct {
	ID     string
	Result json.RawMessage
	Hints  Hints
	// Status is the result's status ("ok", "timeout", ...); a dry run's is ok (its audit line
	// says dry_run). Without a result: rate_limited, too_many_in_flight or store_error.
	Status string
}

// Invoke runs the tool-call pipeline (invoke: resolve, authorize, validate, rate limit, dry
// run, in-flight bound, execute, audit) around one call or describe, exactly as the signed
// API does. Cancelling ctx ends the wait like a deadline: the page gets
// `cancel {id}` and the result is {"status":"timeout"}.
func (b *Bridge) Invoke(ctx context.Context, app *config.App, inv Invocation) (Outcome, error) {
	if inv.Kind != KindCall && inv.Kind != KindDescribe {
		return Outcome{}, protoErr("kind must be %q or %q", KindCall, KindDescribe)
	}
	if !ValidChannelPart(inv.Key.User) || !ValidChannelPart(inv.Key.Conversation) {
		return Outcome{}, protoErr("user and conversation must be strings of 1-128 characters from [-a-zA-Z0-9_=@,;]")
	}
	if !ValidToolName(inv.Tool) {
		return Outcome{}, protoErr("tool must match ^[A-Za-z0-9_.-]{1,128}$")
	}
	if len(inv.ToolUseID) > 256 || !utf8.ValidString(inv.ToolUseID) {
		return Outcome{}, protoErr("tool_use_id must be at most 256 bytes")
	}
	req := &callRequest{UserID: inv.Key.User, ConversationID: inv.Key.Conversation, Tool: inv.Tool,
		Input: json.RawMessage("null"), Rev: inv.Rev, ToolUseID: inv.ToolUseID, Timeout: inv.Timeout,
		Surface: inv.Surface, Subject: inv.Subject, Access: inv.Access, DryRun: inv.DryRun && inv.Kind == KindCall}
	if inv.Kind == KindCall && len(inv.Input) > 0 {
		// One level is the call envelope's (the signed API's body bounds input the same way).
		if err := CheckDepth(inv.Input, MaxDepth-1); err != nil {
			return Outcome{}, err
		}
		if !utf8.Valid(inv.Input) || !json.Valid(inv.Input) {
			return Outcome{}, protoErr("input must be JSON")
		}
		req.Input = inv.Input
	}
	def, max := appTimeouts(app)
	if req.Timeout <= 0 {
		req.Timeout = def
	}
	req.Timeout = min(req.Timeout, max)
	return b.invoke(ctx, app, req, inv.Kind)
}

// newCallID returns a random (version 4) UUID in its canonical form, as uuid.NewString does,
// in one allocation (the string) instead of two.
func newCallID() string {
	var u [16]byte
	_, _ = rand.Read(u[:]) // never fails (crypto/rand since Go 1.24)
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	var s [36]byte
	hex.Encode(s[0:8], u[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], u[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], u[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], u[8:10])
	s[23] = '-'
	hex.Encode(s[24:], u[10:])
	return string(s[:])
}

// PageManifest returns the conversation's current manifest when a page can receive calls (some
// socket is subscribed to its channel, where Sockets can tell), else nil: the "No page is
// connected" condition of the calls API.
func (b *Bridge) PageManifest(ctx context.Context, key ConvKey) (*Manifest, error) {
	m, err := b.store.GetManifest(ctx, key)
	if err != nil || m == nil || !b.pageSubscribed(key.App, key) {
		return nil, err
	}
	return m, nil
}

// ValidLLMName reports whether s is a valid llmName (^[a-zA-Z0-9_-]{1,64}$), the names LLM
// tool APIs accept.
func ValidLLMName(s string) bool { return validLLMName(s) }

// AppTimeouts returns the app's default and maximum call timeout (call_timeout_ms and
// max_timeout_ms with their defaults).
func AppTimeouts(app *config.App) (def, max time.Duration) { return appTimeouts(app) }

// AuditRefusal writes the audit line and metrics of a call a surface refused before it reached
// the pipeline (an MCP tools/call of a name the session never listed, with no page connected,
// or answered 403 for its scope), so every surface's calls are counted alike. input is the
// call's arguments (only their keys are logged), subject the caller's token subject.
func (b *Bridge) AuditRefusal(key ConvKey, tool, kind, surface, subject, status, reason string, input json.RawMessage) {
	au := &callAudit{key: key, tool: tool, kind: kind, surface: surface, subject: subject, status: status,
		reason: reason, start: b.now()}
	if kind == KindCall {
		au.input = input
	}
	b.auditCall(au)
}
