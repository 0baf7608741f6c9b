package mcp

import (
	"encoding/json"
	"errors"
	"strings"

	"github.com/reverbgo/reverbgo/bridge"
)

// AccessClaims are the token claims that narrow a grant to some tools: `scope` (space
// separated, OAuth's; toolmark:read = only readOnly tools, toolmark:write = all, other scopes
// ignored) and `toolmark_tools` (tool-name globs, an array or a space-separated string).
// Absent claims restrict nothing, so tokens issued before scopes existed keep every tool.
type AccessClaims struct {
	Scope         *string   `json:"scope,omitempty"`
	ToolmarkTools toolGlobs `json:"toolmark_tools,omitempty"`
}

// toolGlobs is toolmark_tools: nil when absent.
type toolGlobs []string

func (t *toolGlobs) UnmarshalJSON(b []byte) error {
	var list []string
	if err := json.Unmarshal(b, &list); err == nil {
		if list == nil { // null
			return nil
		}
		*t = list
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return errors.New("toolmark_tools must be an array of strings or a space-separated string")
	}
	*t = append(toolGlobs{}, strings.Fields(s)...)
	return nil
}

// access is the bridge.Access the claims grant; an error makes the token invalid (401).
func (c *AccessClaims) access() (bridge.Access, error) {
	scope := ""
	if c.Scope != nil {
		scope = *c.Scope
	}
	a, err := bridge.ParseScope(scope, c.Scope != nil, c.ToolmarkTools)
	if err != nil {
		return bridge.Access{}, errors.New("toolmark_tools: " + err.Error())
	}
	return a, nil
}

// subject is the token's sub, for the audit line.
func (g *grant) subject() string { return g.key.User }
