package mcp

import (
	"net/http"

	"github.com/reverbgo/reverbgo/bridge"
	"github.com/reverbgo/reverbgo/origin"
)

// CORS for browser-based MCP clients. Origins are matched by the origin package against the
// apps' allowed_origins, the same matcher as the WebSocket upgrade and the page endpoint, so a
// pattern means the same on every surface. No cookie is involved (the credential is the bearer
// token), so Access-Control-Allow-Credentials is never sent.
const (
	corsAllowMethods = "GET, POST, DELETE, OPTIONS"
	// Mcp-Method and Mcp-Name are the standard headers of protocol 2026-07-28 (Mcp-Param-*
	// headers, named by tool schemas, cannot be listed ahead).
	corsAllowHeaders  = "Authorization, Content-Type, Mcp-Session-Id, Mcp-Protocol-Version, Last-Event-ID, Mcp-Method, Mcp-Name"
	corsExposeHeaders = "Mcp-Session-Id, WWW-Authenticate"
	corsMaxAge        = "7200"
)

// anyAppAllows reports whether an app with the MCP endpoint on (toolmark.enabled and
// toolmark.mcp.enabled) allows the Origin. A preflight carries no Authorization, and a 401 has
// no valid token, so their app is unknown: any serving app's allow-list admits them. Apps that
// cannot be listed (no bridge.AppLister) admit nothing.
func (s *Server) anyAppAllows(o string) bool {
	lister, ok := s.opts.Apps.(bridge.AppLister)
	if !ok || o == "" {
		return false
	}
	for _, app := range lister.AllApps() {
		if app != nil && app.Toolmark.Enabled && app.Toolmark.MCP.Enabled && origin.Allowed(app.AllowedOrigins, o) {
			return true
		}
	}
	return false
}

// preflight answers an OPTIONS request: 204 with the CORS headers for an Origin some serving
// app allows, 403 for any other (or none).
func (s *Server) preflight(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Add("Vary", "Origin")
	o := r.Header.Get("Origin")
	if !s.anyAppAllows(o) {
		writeError(w, http.StatusForbidden, "Origin not allowed")
		return
	}
	h.Set("Access-Control-Allow-Origin", o)
	h.Set("Access-Control-Allow-Methods", corsAllowMethods)
	h.Set("Access-Control-Allow-Headers", corsAllowHeaders)
	h.Set("Access-Control-Max-Age", corsMaxAge)
	w.WriteHeader(http.StatusNoContent)
}

// allowOrigin adds the CORS headers of a real response when allowed says the request's Origin
// may read it. Without an Origin (a server-side client) nothing is added.
func allowOrigin(w http.ResponseWriter, r *http.Request, allowed func(string) bool) {
	o := r.Header.Get("Origin")
	if o == "" {
		return
	}
	h := w.Header()
	h.Add("Vary", "Origin")
	if allowed(o) {
		h.Set("Access-Control-Allow-Origin", o)
		h.Set("Access-Control-Expose-Headers", corsExposeHeaders)
	}
}
