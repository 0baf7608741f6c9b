// Package bridge embeds the Toolmark bridge (protocol v1) in reverbgo: it broadcasts the
// server-to-page messages (call, describe, cancel) on private-toolmark.{user}.{conversation},
// accepts the page's answers (manifest, changed, result, confirmed) over HTTP, and holds the
// agent's HTTP request until the page answers or the deadline passes. Every MUST of protocol
// §12.2 is enforced here so that apps need no state machine of their own.
package bridge

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Protocol constants shared with @toolmark/core; they are part of the wire contract.
const (
	// ProtocolVersion is the only protocol accepted and emitted.
	ProtocolVersion = 1
	// ChannelPrefix starts every bridge channel: private-toolmark.{userId}.{conversationId}.
	ChannelPrefix = "private-toolmark."
	// EventName is the Pusher event every server-to-page message is sent as.
	EventName = "toolmark.message"
	// MaxDepth bounds JSON nesting of every message, checked on raw bytes before parsing so a
	// deeply nested body cannot cost stack or CPU.
	MaxDepth = 64
	// MaxTools bounds a manifest so one page cannot make the server store an unbounded list.
	MaxTools = 200
	// MaxTextLen bounds tool descriptions and titles (in characters).
	MaxTextLen = 1024
)

// Message types.
const (
	TypeManifest  = "manifest"
	TypeChanged   = "changed"
	TypeResult    = "result"
	TypeConfirmed = "confirmed"
	TypeCall      = "call"
	TypeDescribe  = "describe"
	TypeCancel    = "cancel"
)

// Call kinds recorded in a binding: a describe may not be answered with needs_confirmation.
const (
	KindCall     = "call"
	KindDescribe = "describe"
)

// ToolResult statuses; StatusTimeout is produced by the server only.
const (
	StatusOK                = "ok"
	StatusInvalid           = "invalid"
	StatusRefused           = "refused"
	StatusNeedsConfirmation = "needs_confirmation"
	StatusCancelled         = "cancelled"
	StatusError             = "error"
	StatusTimeout           = "timeout"
)

// The id and tool-name patterns are checked byte by byte: they run several times per call.
//
//	id (clientId, call id, confirmId; MUST 7):  ^[A-Za-z0-9_-]{1,128}$
//	tool name (manifest name, agent's tool):    ^[A-Za-z0-9_.-]{1,128}$
//	llmName (what LLM tool APIs accept):        ^[a-zA-Z0-9_-]{1,64}$
func matchPattern(s string, maxLen int, dot bool) bool {
	if s == "" || len(s) > maxLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-':
		case c == '.' && dot:
		default:
			return false
		}
	}
	return true
}

// ValidID reports whether s may be used as a clientId, call id or confirmId. It guards every
// page-supplied id before any lookup (MUST 7), so hostile ids can never reach a store key.
func ValidID(s string) bool { return matchPattern(s, 128, false) }

// ValidToolName reports whether s is a valid tool name.
func ValidToolName(s string) bool { return matchPattern(s, 128, true) }

// validLLMName reports whether s is a valid llmName.
func validLLMName(s string) bool { return matchPattern(s, 64, false) }

// ValidChannelPart reports whether s may be a user or conversation id: non-empty, at most 128
// bytes, made of the characters Pusher allows in channel names minus '.', because '.' separates
// the user from the conversation in the channel name.
func ValidChannelPart(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("-_=@,;", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// Channel is the private channel a page listens on for one user and conversation.
func Channel(userID, conversationID string) string {
	return ChannelPrefix + userID + "." + conversationID
}

// ParseChannel splits a bridge channel name; ok is false for any other channel.
func ParseChannel(channel string) (userID, conversationID string, ok bool) {
	rest, found := strings.CutPrefix(channel, ChannelPrefix)
	if !found {
		return "", "", false
	}
	userID, conversationID, found = strings.Cut(rest, ".")
	if !found || !ValidChannelPart(userID) || !ValidChannelPart(conversationID) {
		return "", "", false
	}
	return userID, conversationID, true
}

// Hints are the four known tool hints. Pointers keep "absent" distinct from false, and unknown
// hints are dropped at decode time so a page cannot store arbitrary data through them.
type Hints struct {
	ReadOnly         *bool `json:"readOnly,omitempty"`
	Consequential    *bool `json:"consequential,omitempty"`
	Destructive      *bool `json:"destructive,omitempty"`
	UntrustedContent *bool `json:"untrustedContent,omitempty"`
}

// Tool is one manifest entry with only the known fields kept.
type Tool struct {
	Name        string  `json:"name"`
	LLMName     string  `json:"llmName"`
	Description string  `json:"description"`
	Hints       Hints   `json:"hints"`
	Title       *string `json:"title,omitempty"`
	Mode        string  `json:"mode,omitempty"`
}

// Manifest is the page's current tool summary for one user and conversation.
type Manifest struct {
	ClientID string `json:"clientId"`
	Rev      int64  `json:"rev"`
	Tools    []Tool `json:"tools"`
}

// Tool returns the entry named name, or nil.
func (m *Manifest) Tool(name string) *Tool {
	if m == nil {
		return nil
	}
	for i := range m.Tools {
		if m.Tools[i].Name == name {
			return &m.Tools[i]
		}
	}
	return nil
}

// PageMessage is a decoded, validated page-to-server message. Only the fields of its Type are set.
type PageMessage struct {
	Type     string
	ClientID string
	// Rev of a manifest or changed.
	Rev int64
	// Tools of a manifest.
	Tools []Tool
	// ID of the call a result answers.
	ID string
	// ConfirmID of a confirmed.
	ConfirmID string
	// Result of a result or confirmed: canonical JSON (known keys only, compacted), safe to
	// hand to the agent as is.
	Result json.RawMessage
	// Status of Result.
	Status string
	// ResultConfirmID is the confirmId of a needs_confirmation Result.
	ResultConfirmID string
}

// ProtocolError is a malformed message; the HTTP layer answers it with 422.
type ProtocolError struct{ Reason string }

func (e *ProtocolError) Error() string { return e.Reason }

func protoErr(format string, args ...any) error {
	if len(args) == 0 {
		return &ProtocolError{Reason: format}
	}
	return &ProtocolError{Reason: fmt.Sprintf(format, args...)}
}
