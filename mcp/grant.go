package mcp

import (
	"errors"
	"strings"

	"github.com/reverbgo/reverbgo/bridge"
)

// accessOf is what a token's claims allow: `scope` (space separated, OAuth's; toolmark:read =
// only readOnly tools, toolmark:write = all, other scopes ignored) and `toolmark_tools`
// (tool-name globs, an array or a string; each entry may hold several separated by spaces).
// An absent or empty claim restricts nothing, so tokens issued before scopes existed keep
// every tool. An error (a glob that is not ^[A-Za-z0-9_.*-]{1,128}$, too many) makes the token
// invalid (401).
func accessOf(c *Claims) (bridge.Access, error) {
	var tools []string
	if c.ToolmarkTools != nil {
		tools = []string{}
		for _, entry := range c.ToolmarkTools {
			tools = append(tools, strings.Fields(entry)...)
		}
	}
	a, err := bridge.ParseScope(c.Scope, c.Scope != "", tools)
	if err != nil {
		return bridge.Access{}, errors.New("toolmark_tools: " + err.Error())
	}
	return a, nil
}

// denyAll is what a grant with claims but no parsed access allows (never reached: verify
// sets it or refuses the token; this keeps access fail-closed if that were lost).
var denyAll, _ = bridge.NewAccess([]string{}, []string{}, false)

// access is what the grant's token allows (the zero Access, everything, without claims).
func (g *grant) access() bridge.Access {
	if g.claims == nil {
		return bridge.Access{}
	}
	if !g.accOK {
		return denyAll
	}
	return g.acc
}

// subject is the token's sub, for the audit line.
func (g *grant) subject() string { return g.key.User }

// implicitListing is a listing mapped from a manifest whose Tools slice was tools[:n].
type implicitListing struct {
	tools *bridge.Tool
	n     int
	l     *listing
}

// implicitListing is mapManifest(m, nil, access) for the grant, reused while m is the same
// manifest: the same clientId and rev and the same stored Tools slice (the memory store
// shares it until a new manifest replaces it; a store that copies it is mapped every time).
func (g *grant) implicitListing(m *bridge.Manifest) *listing {
	var first *bridge.Tool
	if len(m.Tools) > 0 {
		first = &m.Tools[0]
	}
	if g.implicit == nil {
		access := g.access()
		return mapManifest(m, nil, &access)
	}
	if c := g.implicit.Load(); c != nil && c.tools == first && c.n == len(m.Tools) &&
		c.l.clientID == m.ClientID && c.l.rev == m.Rev {
		return c.l
	}
	access := g.access()
	l := mapManifest(m, nil, &access)
	g.implicit.Store(&implicitListing{tools: first, n: len(m.Tools), l: l})
	return l
}
