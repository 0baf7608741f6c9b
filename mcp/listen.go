package mcp

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Protocol 2026-07-28 (SEP-2575) has no sessions: every request stands alone, and a client that
// wants notifications opens a subscriptions/listen request, a long SSE response on which the
// server sends them. This node registers each listen of a grant like a legacy session with an
// open GET stream, so onChange reaches both kinds alike; the SDK still answers the listen
// itself (acknowledgement, and the response when the client cancels).

// metaSubscriptionID is the _meta key that ties a notification to its listen request.
const metaSubscriptionID = "io.modelcontextprotocol/subscriptionId"

// serveStateless answers tools/list, tools/call and subscriptions/listen of a stateless
// request; the rest is the SDK's.
func (s *Server) serveStateless(ctx context.Context, g *grant, ss *sdk.ServerSession, method string, req sdk.Request,
	h http.Header, next sdk.MethodHandler) (sdk.Result, error) {
	switch method {
	case "tools/list":
		return s.listTools(ctx, g, &session{key: g.key, ss: ss})
	case "tools/call":
		call, ok := req.(*sdk.CallToolRequest)
		if !ok || call.Params == nil {
			return next(ctx, method, req)
		}
		return s.callTool(ctx, g, &session{id: "-", key: g.key, ss: ss}, call.Params, h)
	case "subscriptions/listen":
		id := h.Get(requestIDHeader)
		if !json.Valid([]byte(id)) {
			return next(ctx, method, req)
		}
		s.makeRoom(g.key)
		se := &session{id: "listen:" + rand.Text(), key: g.key, ss: ss, lastUsed: time.Now(), streams: 1,
			listenID: json.RawMessage(id)}
		if m, err := s.currentManifest(ctx, g); err == nil && m != nil {
			se.knownClient, se.knownRev = m.ClientID, m.Rev // only later changes are news
		}
		s.addListener(se)
		defer s.removeListener(se)
		return next(ctx, method, req)
	}
	return next(ctx, method, req)
}

// addListener registers a listen like a session: in the node's bound (MaxNodeSessions), and
// closed by Close so that a graceful shutdown does not wait for its stream.
func (s *Server) addListener(se *session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sessions[se.id] = se
	set := s.byConv[se.key]
	if set == nil {
		set = map[*session]struct{}{}
		s.byConv[se.key] = set
	}
	set[se] = struct{}{}
}

func (s *Server) removeListener(se *session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.sessions, se.id)
	if set := s.byConv[se.key]; set != nil {
		delete(set, se)
		if len(set) == 0 {
			delete(s.byConv, se.key)
		}
	}
}
