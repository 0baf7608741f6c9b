package mcp

import (
	"encoding/json"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"

	"github.com/reverbgo/reverbgo/bridge"
)

// The endpoint as an OAuth protected resource (RFC 9728, MCP authorization 2025-11-25): its
// identifier is {public_url}{path}/toolmark/mcp, which tokens carry in aud, and its metadata
// document is served at /.well-known/oauth-protected-resource{path}/toolmark/mcp.
const (
	endpointPath   = "/toolmark/mcp"
	wellKnownPath  = "/.well-known/oauth-protected-resource"
	scopeRead      = "toolmark:read"
	scopeWrite     = "toolmark:write"
	metadataMaxAge = "max-age=300"
)

// MetadataPath is the route of the metadata document for a server.path prefix.
func MetadataPath(prefix string) string { return wellKnownPath + prefix + endpointPath }

// ProtectedResourceMetadata is the RFC 9728 document.
type ProtectedResourceMetadata struct {
	Resource               string   `json:"resource"`
	AuthorizationServers   []string `json:"authorization_servers"`
	BearerMethodsSupported []string `json:"bearer_methods_supported"`
	ScopesSupported        []string `json:"scopes_supported"`
}

// origin is the scheme and host this request reached the server at: server.public_url when
// set, else https for TLS or for X-Forwarded-Proto: https from a trusted proxy, http otherwise,
// and the Host header, but only a Host listed in server.public_hosts. The caller chooses
// Host, and the resource built from it is the aud a token must name: from an unchecked Host a
// token issued by the same issuer for another deployment (or a sibling resource) would be
// accepted by sending that deployment's Host. A refusal is a *hostError (its HTTP status).
func (s *Server) origin(r *http.Request) (string, *hostError) {
	if s.opts.PublicURL != "" {
		return s.opts.PublicURL, nil
	}
	if !validHost(r.Host) {
		return "", &hostError{http.StatusBadRequest, "Invalid Host header"}
	}
	host := strings.ToLower(r.Host)
	if !slices.Contains(s.opts.PublicHosts, host) {
		// RFC 9110 §15.5.20: this server is not configured to answer for that authority.
		return "", &hostError{http.StatusMisdirectedRequest, "Host not served: not in server.public_hosts (and server.public_url is not set)"}
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	} else if p := r.Header.Get("X-Forwarded-Proto"); p != "" && s.trustedPeer(r.RemoteAddr) {
		if strings.EqualFold(strings.TrimSpace(strings.Split(p, ",")[0]), "https") {
			scheme = "https"
		}
	}
	return scheme + "://" + host, nil
}

// hostError is why a request's resource could not be named: a malformed Host (400) or one
// this server does not answer for (421).
type hostError struct {
	code   int
	reason string
}

// resource is the token audience of this endpoint for r; metadataURL the document's URL.
func (s *Server) resource(r *http.Request) (resource, metadataURL string, herr *hostError) {
	o, herr := s.origin(r)
	if herr != nil {
		return "", "", herr
	}
	return o + s.opts.Path + endpointPath, o + MetadataPath(s.opts.Path), nil
}

// trustedPeer: the TCP peer is one of server.trusted_proxies (default loopback).
func (s *Server) trustedPeer(remote string) bool {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	a = a.Unmap()
	if len(s.opts.TrustedProxies) == 0 {
		return a.IsLoopback()
	}
	for _, p := range s.opts.TrustedProxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// validHost accepts host, host:port, [v6] and [v6]:port made of letters, digits and . - : [ ].
func validHost(h string) bool {
	if h == "" || len(h) > 255 {
		return false
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte(".-:[]", c) >= 0) {
			return false
		}
	}
	return true
}

// authorizationServers lists, once each in config order, the authorization servers of every
// app serving MCP. The resource is one URL for all apps, so its document names them all.
func (s *Server) authorizationServers() []string {
	out := []string{}
	lister, ok := s.opts.Apps.(bridge.AppLister)
	if !ok {
		return out
	}
	seen := map[string]bool{}
	for _, app := range lister.AllApps() {
		if app == nil || !app.Toolmark.Enabled || !app.Toolmark.MCP.Enabled {
			continue
		}
		for _, as := range app.Toolmark.MCP.AuthorizationServers {
			if !seen[as] {
				seen[as] = true
				out = append(out, as)
			}
		}
	}
	return out
}

// ServeMetadata answers GET (and HEAD) of the protected resource metadata document. The
// document is public, so any origin may read it.
func (s *Server) ServeMetadata(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Access-Control-Allow-Origin", "*")
	switch r.Method {
	case http.MethodGet, http.MethodHead:
	case http.MethodOptions:
		h.Set("Access-Control-Allow-Methods", "GET, OPTIONS")
		h.Set("Access-Control-Allow-Headers", "Mcp-Protocol-Version")
		w.WriteHeader(http.StatusNoContent)
		return
	default:
		h.Set("Allow", "GET, HEAD, OPTIONS")
		writeError(w, http.StatusMethodNotAllowed, "Method not allowed")
		return
	}
	resource, _, herr := s.resource(r)
	if herr != nil {
		writeError(w, herr.code, herr.reason)
		return
	}
	b, _ := json.Marshal(ProtectedResourceMetadata{
		Resource:               resource,
		AuthorizationServers:   s.authorizationServers(),
		BearerMethodsSupported: []string{"header"},
		ScopesSupported:        []string{scopeRead, scopeWrite},
	})
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", metadataMaxAge)
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		_, _ = w.Write(b)
	}
}

// challenge is the WWW-Authenticate of a 401: the metadata URL, and error="invalid_token"
// when a token was sent (RFC 6750 §3.1: none when the request had no credentials).
func challenge(metadataURL string, tokenSent bool) string {
	c := `Bearer resource_metadata="` + metadataURL + `"`
	if tokenSent {
		c += `, error="invalid_token"`
	}
	return c
}
