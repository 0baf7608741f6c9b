package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/reverbgo/reverbgo/bridge"
)

// DryRunMetaKey in a tools/call's _meta (true) makes the call a dry run: resolve, authorize,
// validate and the rate-limit check, nothing reaches the page (bridge.Invocation.DryRun).
const DryRunMetaKey = "toolmark/dryRun"

func dryRun(m sdk.Meta) bool {
	v, _ := m[DryRunMetaKey].(bool)
	return v
}

// refuseScope answers HTTP 403 to a tools/call (one JSON-RPC request in body) of a tool the
// grant's scope or toolmark_tools deny, as MCP authorization asks for a step-up: toolmark:read
// calling a tool that is not readOnly gets `WWW-Authenticate: Bearer error="insufficient_scope",
// scope="toolmark:write"`; a tool outside toolmark_tools gets the error without a scope (no
// scope helps). It reports whether it answered. The name resolves against the page's current
// manifest (llmName to entry; denied tools are in no session's listing), with or without a
// session (a stateless request has none), and the refusal is audited like any call.
func (s *Server) refuseScope(w http.ResponseWriter, r *http.Request, g *grant, body []byte) bool {
	access := g.access()
	if access.Unrestricted() {
		return false
	}
	name, args, ok := toolsCallTarget(body)
	if !ok {
		return false
	}
	entry := s.resolveEntry(r.Context(), g, name)
	if entry == nil {
		return false // unknown or no page: tools/call answers that as a tool result
	}
	d := access.Check(entry)
	if d == bridge.Allowed {
		return false
	}
	key := g.key
	if rg, ok := s.resolve(g); ok {
		key = rg.key // a following grant: the page it follows
	}
	s.br.AuditRefusal(key, entry.Name, bridge.KindCall, bridge.SurfaceMCP, g.subject(), bridge.StatusRefused,
		"insufficient_scope", args)
	// Exactly the challenge; the reason is in the body.
	challenge := `Bearer error="insufficient_scope"`
	if d == bridge.DeniedScope {
		challenge += `, scope="` + bridge.ScopeWrite + `"`
	}
	w.Header().Set("WWW-Authenticate", challenge)
	writeError(w, http.StatusForbidden, d.Message(entry.Name))
	return true
}

// resolveEntry returns the manifest entry an MCP tool name (llmName) calls in the
// conversation's current manifest, ignoring the grant's access; nil when none.
func (s *Server) resolveEntry(ctx context.Context, g *grant, name string) *bridge.Tool {
	m, err := s.currentManifest(ctx, g) // a following grant: the user's latest page
	if err != nil || m == nil {
		return nil
	}
	lt := mapManifest(m, nil, &bridge.Access{}).byName[name]
	if lt == nil {
		return nil
	}
	return &lt.entry
}

// toolsCallTarget returns the tool name and arguments of a body that is one JSON-RPC
// tools/call request.
func toolsCallTarget(body []byte) (name string, args json.RawMessage, ok bool) {
	body = bytes.TrimLeft(body, " \t\r\n")
	if len(body) == 0 || body[0] != '{' {
		return "", nil, false
	}
	var m struct {
		Method string `json:"method"`
		Params struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		} `json:"params"`
	}
	if json.Unmarshal(body, &m) != nil || m.Method != "tools/call" || m.Params.Name == "" {
		return "", nil, false
	}
	return m.Params.Name, m.Params.Arguments, true
}
