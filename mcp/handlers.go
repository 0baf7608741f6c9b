package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"sync"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/reverbgo/reverbgo/bridge"
)

// listTools answers tools/list: one MCP tool per mappable entry of the conversation's current
// manifest, with input schemas from describes to the page (the bridge records every describe
// answered on this node per clientId and rev, by any surface, and only tools it has no ok
// describe of are described; the describes of one list run concurrently, each bounded by
// DescribeTimeout). No page or no
// manifest: an empty list.
func (s *Server) listTools(ctx context.Context, g *grant, se *session) (*sdk.ListToolsResult, error) {
	g, _ = s.resolve(g) // a following grant without a known page lists nothing
	m, err := s.currentManifest(ctx, g)
	if err != nil {
		s.log.Error("toolmark mcp: store failed", slog.String("error", err.Error()))
		return nil, errors.New("bridge store unavailable")
	}
	if m == nil {
		s.mu.Lock()
		se.listed = &listing{byName: map[string]*listedTool{}}
		s.mu.Unlock()
		return &sdk.ListToolsResult{Cacheable: privateList, Tools: []*sdk.Tool{}}, nil
	}
	schemas := map[string]json.RawMessage{}
	for name, raw := range s.br.DescribedSchemas(g.key, m.ClientID, m.Rev) {
		schemas[name] = listedSchema(raw)
	}
	// This list's describes are listed even if the bridge did not keep them (a newer manifest
	// was stored meanwhile, or its cache is full).
	fresh := s.describeAll(ctx, g, m, schemas)
	for name, sch := range fresh {
		schemas[name] = sch
	}
	access := g.access()
	l := mapManifest(m, schemas, &access)
	s.mu.Lock()
	se.listed = l
	if se.knownClient != l.clientID || se.knownRev < l.rev {
		se.knownClient, se.knownRev = l.clientID, l.rev
	}
	s.mu.Unlock()
	tools := l.tools
	if tools == nil {
		tools = []*sdk.Tool{}
	}
	return &sdk.ListToolsResult{Cacheable: privateList, Tools: tools}, nil
}

// privateList: a tool list is one user's page, never to be shared by an intermediary cache;
// TTL 0 because the page may change it at any time (list_changed says when).
var privateList = sdk.Cacheable{TTLMs: 0, CacheScope: "private"}

// describeAll describes, concurrently, every mappable tool of m without a known schema and
// returns the schemas of the describes that succeeded (failed ones map to {"type":"object"}
// and are described again by the next list).
func (s *Server) describeAll(ctx context.Context, g *grant, m *bridge.Manifest, cached map[string]json.RawMessage) map[string]json.RawMessage {
	access := g.access()
	todo := mapManifest(m, nil, &access)
	var mu sync.Mutex
	var wg sync.WaitGroup
	out := map[string]json.RawMessage{}
	timeout := s.opts.DescribeTimeout
	if _, max := bridge.AppTimeouts(g.app); max < timeout {
		timeout = max
	}
	ctx, cancel := context.WithTimeout(ctx, timeout+timeout/2)
	defer cancel()
	for _, lt := range todo.byName {
		if _, ok := cached[lt.name]; ok {
			continue
		}
		wg.Add(1)
		go func(name string) {
			defer wg.Done()
			res, err := s.br.Invoke(ctx, g.app, bridge.Invocation{Key: g.key, Kind: bridge.KindDescribe, Tool: name,
				Timeout: timeout, Surface: bridge.SurfaceMCP, Subject: g.subject(), Access: access})
			if err != nil {
				return
			}
			if schema, ok := describedSchema(res.Result); ok {
				mu.Lock()
				out[name] = schema
				mu.Unlock()
			}
		}(lt.name)
	}
	wg.Wait()
	return out
}

// callTool answers tools/call: the name resolves against the session's last listing (or the
// current manifest if it never listed) and the page gets a bridge call of the entry's full
// name with the listing's rev.
func (s *Server) callTool(ctx context.Context, g *grant, se *session, p *sdk.CallToolParamsRaw, h http.Header) (*sdk.CallToolResult, error) {
	g, _ = s.resolve(g)
	m, err := s.currentManifest(ctx, g)
	if err != nil {
		s.log.Error("toolmark mcp: store failed", slog.String("error", err.Error()))
		return errorToolResult(bridge.ErrStore.Error()), nil
	}
	if m == nil {
		s.br.AuditRefusal(g.key, auditName(p.Name), bridge.KindCall, bridge.SurfaceMCP, g.subject(), bridge.StatusError, "no_page", p.Arguments)
		return errorToolResult("No page is connected"), nil
	}
	s.mu.Lock()
	l := se.listed
	s.mu.Unlock()
	if l == nil || (g.follow && l.clientID != m.ClientID) {
		// Never listed, or the page was replaced since (a reload, or a following session's
		// user moved to another page): resolve against the current manifest.
		l = g.implicitListing(m)
	}
	lt := l.byName[p.Name]
	if lt == nil {
		s.br.AuditRefusal(g.key, auditName(p.Name), bridge.KindCall, bridge.SurfaceMCP, g.subject(), bridge.StatusRefused, "unknown_tool", p.Arguments)
		return unknownToolResult(p.Name), nil
	}
	input := p.Arguments
	if len(input) == 0 || string(input) == "null" {
		input = json.RawMessage(`{}`)
	}
	rev := l.rev
	out, err := s.br.Invoke(ctx, g.app, bridge.Invocation{Key: g.key, Kind: bridge.KindCall, Tool: lt.name,
		Input: input, Rev: &rev, ToolUseID: toolUseID(se.id, h), Surface: bridge.SurfaceMCP,
		Subject: g.subject(), Access: g.access(), DryRun: dryRun(p.Meta)})
	if err != nil {
		var pe *bridge.ProtocolError
		switch {
		case errors.As(err, &pe):
			return errorToolResult("Invalid arguments: " + pe.Reason), nil
		case errors.Is(err, bridge.ErrStore):
			return errorToolResult(bridge.ErrStore.Error()), nil
		}
		return errorToolResult(err.Error()), nil // rate limits
	}
	return toolResult(out.Result, out.Status, lt.untrusted), nil
}

// auditName is the tool name an audit line may carry: a client-chosen name that is not a valid
// tool name is not logged as is.
func auditName(name string) string {
	if bridge.ValidToolName(name) {
		return name
	}
	return "invalid"
}
