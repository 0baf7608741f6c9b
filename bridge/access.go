package bridge

import (
	"strings"
)

// Scopes a caller may hold (the calls API's `scopes`, an MCP token's space-separated `scope`).
const (
	// ScopeRead allows only tools whose manifest hints say readOnly.
	ScopeRead = "toolmark:read"
	// ScopeWrite allows every tool.
	ScopeWrite = "toolmark:write"
)

// Bounds of an Access, so a request or token cannot make authorization expensive.
const (
	// MaxToolPatterns bounds the tool allow-list.
	MaxToolPatterns = 256
	// maxPatternLen bounds one glob (a tool name is at most 128 bytes).
	maxPatternLen = 128
)

// Access is what a caller may call: its scopes and an optional allow-list of tool-name globs.
// The zero value allows every tool (a caller that named no scopes and no tools, as before
// scopes existed).
type Access struct {
	scoped      bool // scopes were given; else every tool passes the scope check
	read, write bool
	listed      bool     // tools were given; else every name passes the allow-list
	tools       []string // globs: '*' matches any run of characters, all else is literal
}

// Denial says why Access refuses a tool.
type Denial uint8

const (
	// Allowed: the tool may be called.
	Allowed Denial = iota
	// DeniedScope: the tool is not readOnly and the caller holds only toolmark:read (or no
	// toolmark scope at all); toolmark:write would allow it (an MCP step-up).
	DeniedScope
	// DeniedTool: the tool's name matches none of the caller's allow-list; no scope helps.
	DeniedTool
)

// NewAccess builds an Access from scope strings and tool globs. scopes nil = no scope
// restriction; tools nil = no allow-list (an empty, non-nil slice allows nothing). Scopes
// other than toolmark:read and toolmark:write are ignored (a token from an authorization
// server carries others); strict reports them as an error instead (the calls API, where only
// ours make sense). Globs must match ^[A-Za-z0-9_.*-]{1,128}$, at most MaxToolPatterns.
func NewAccess(scopes, tools []string, strict bool) (Access, error) {
	var a Access
	if scopes != nil {
		a.scoped = true
		for _, s := range scopes {
			switch s {
			case ScopeRead:
				a.read = true
			case ScopeWrite:
				a.write = true
			default:
				if strict {
					return Access{}, protoErr("scopes may only contain %q and %q", ScopeRead, ScopeWrite)
				}
			}
		}
	}
	if tools != nil {
		if len(tools) > MaxToolPatterns {
			return Access{}, protoErr("tools may hold at most %d patterns", MaxToolPatterns)
		}
		for _, p := range tools {
			if !validPattern(p) {
				return Access{}, protoErr("tools patterns must match ^[A-Za-z0-9_.*-]{1,128}$")
			}
		}
		a.listed, a.tools = true, tools
	}
	return a, nil
}

// ParseScope is NewAccess for a space-separated OAuth `scope` claim ("" absent = nil).
func ParseScope(scope string, present bool, tools []string) (Access, error) {
	var scopes []string
	if present {
		scopes = strings.Fields(scope)
		if scopes == nil {
			scopes = []string{}
		}
	}
	return NewAccess(scopes, tools, false)
}

// Unrestricted reports whether a allows every tool (the zero Access).
func (a *Access) Unrestricted() bool { return !a.scoped && !a.listed }

// Check reports whether t may be called (or described) under a; a nil a allows all.
func (a *Access) Check(t *Tool) Denial {
	if a == nil {
		return Allowed
	}
	if a.listed && !a.nameListed(t.Name) {
		return DeniedTool
	}
	if a.scoped && !a.write && !(a.read && isTrue(t.Hints.ReadOnly)) {
		return DeniedScope
	}
	return Allowed
}

func (a *Access) nameListed(name string) bool {
	for _, p := range a.tools {
		if globMatch(p, name) {
			return true
		}
	}
	return false
}

// Message is the refusal's text for the agent.
func (d Denial) Message(tool string) string {
	switch d {
	case DeniedScope:
		return "Tool " + tool + " is not read-only: it needs the " + ScopeWrite + " scope"
	case DeniedTool:
		return "Tool " + tool + " is not in the caller's allowed tools"
	}
	return ""
}

func isTrue(b *bool) bool { return b != nil && *b }

func validPattern(p string) bool {
	if p == "" || len(p) > maxPatternLen {
		return false
	}
	for i := 0; i < len(p); i++ {
		if c := p[i]; c != '*' && !matchPattern(p[i:i+1], 1, true) {
			return false
		}
	}
	return true
}

// globMatch matches name against p, where '*' matches any run of characters (dots included:
// "notes.*" matches "notes.a.b"). The classic greedy algorithm with one backtrack point: at
// most len(p)*len(name) steps, both bounded at 128.
func globMatch(p, name string) bool {
	pi, ni, star, mark := 0, 0, -1, 0
	for ni < len(name) {
		switch {
		case pi < len(p) && p[pi] == '*':
			star, mark = pi, ni
			pi++
		case pi < len(p) && p[pi] == name[ni]:
			pi++
			ni++
		case star >= 0:
			pi = star + 1
			mark++
			ni = mark
		default:
			return false
		}
	}
	for pi < len(p) && p[pi] == '*' {
		pi++
	}
	return pi == len(p)
}
