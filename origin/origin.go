// Package origin is the one matcher of a browser's Origin header against an app's
// allowed_origins, shared by every surface (the WebSocket upgrade, the Toolmark page
// endpoint's CORS, and any later one), so that a pattern means the same thing everywhere.
//
// Patterns (case-insensitive, anchored: a pattern matches a whole origin or nothing):
//
//   - every origin
//     app.example.com             that host, any scheme and port (Reverb's host-only form)
//     app.example.com:8080        that host and port, any scheme
//     *.example.com               any subdomain of example.com (not example.com itself)
//     https://app.example.com     that scheme and host, on the scheme's default port
//     https://app.example.com:8443, https://*.example.com, https://*.example.com:8443
//
// A '*' is only allowed as the whole pattern or as the first label of the host, so matching
// is a few string comparisons: linear in the input, with no backtracking for a hostile Origin
// to exploit, and no allocation. An invalid pattern (see Validate) never matches.
package origin

import (
	"errors"
	"fmt"
	"strings"
)

// Allowed reports whether origin matches any of patterns. An empty origin (a server-side
// client, not a browser) and an empty pattern list (no restriction) are allowed.
func Allowed(patterns []string, origin string) bool {
	if origin == "" || len(patterns) == 0 {
		return true
	}
	o, ok := parseOrigin(origin)
	for _, p := range patterns {
		if p == "*" {
			return true
		}
		if !ok {
			continue
		}
		if pp, err := parsePattern(p); err == nil && pp.match(o) {
			return true
		}
	}
	return false
}

// Validate explains why pattern is not one of the documented forms (nil when it is).
func Validate(pattern string) error {
	if pattern == "*" {
		return nil
	}
	_, err := parsePattern(pattern)
	return err
}

// pattern is a parsed allowed_origins entry; its strings are slices of the pattern.
type pattern struct {
	scheme   string // "" = any
	host     string // without the "*." of a wildcard
	wildcard bool   // host is "*." + host
	port     string // "" = see match
}

// site is a parsed Origin header; its strings are slices of the header.
type site struct {
	scheme, host, port string
}

var errEmpty = errors.New("empty origin pattern")

func parsePattern(p string) (pattern, error) {
	if p == "" {
		return pattern{}, errEmpty
	}
	var out pattern
	rest := p
	if i := strings.Index(rest, "://"); i >= 0 {
		out.scheme, rest = rest[:i], rest[i+3:]
		if !validScheme(out.scheme) {
			return pattern{}, fmt.Errorf("origin pattern %q: invalid scheme", p)
		}
	}
	rest = strings.TrimSuffix(rest, "/") // "https://app.example.com/" as copied from a browser
	host, port, err := splitHostPort(rest)
	if err != nil {
		return pattern{}, fmt.Errorf("origin pattern %q: %v", p, err)
	}
	if strings.HasPrefix(host, "*.") {
		out.wildcard, host = true, host[2:]
	}
	if host == "" || strings.ContainsAny(host, "*/?#@ ") {
		return pattern{}, fmt.Errorf("origin pattern %q: use *, host, *.domain, scheme://host or scheme://*.domain, each with an optional :port", p)
	}
	out.host, out.port = host, port
	return out, nil
}

func parseOrigin(s string) (site, bool) {
	var o site
	rest := s
	if i := strings.Index(rest, "://"); i >= 0 {
		o.scheme, rest = rest[:i], rest[i+3:]
		if !validScheme(o.scheme) {
			return site{}, false
		}
	}
	host, port, err := splitHostPort(strings.TrimSuffix(rest, "/"))
	if err != nil || host == "" || strings.ContainsAny(host, "*/?#@ ") {
		return site{}, false
	}
	o.host, o.port = host, port
	return o, true
}

// splitHostPort splits "host", "host:port", "[v6]" or "[v6]:port"; a port is 1-5 digits.
func splitHostPort(s string) (host, port string, err error) {
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return "", "", errors.New("unclosed [")
		}
		host, s = s[:end+1], s[end+1:]
		if s == "" {
			return host, "", nil
		}
		if s[0] != ':' {
			return "", "", errors.New("junk after ]")
		}
		port = s[1:]
	} else if i := strings.LastIndexByte(s, ':'); i >= 0 {
		host, port = s[:i], s[i+1:]
		if strings.IndexByte(host, ':') >= 0 {
			return "", "", errors.New("bare IPv6 address: write it in brackets")
		}
	} else {
		return s, "", nil
	}
	if len(port) == 0 || len(port) > 5 {
		return "", "", errors.New("invalid port")
	}
	for i := 0; i < len(port); i++ {
		if port[i] < '0' || port[i] > '9' {
			return "", "", errors.New("invalid port")
		}
	}
	return host, port, nil
}

func validScheme(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i] | 0x20
		if !(c >= 'a' && c <= 'z') && !(i > 0 && (s[i] >= '0' && s[i] <= '9' || s[i] == '+' || s[i] == '-' || s[i] == '.')) {
			return false
		}
	}
	return true
}

// defaultPort is the port a browser leaves out of the Origin for scheme ("" when unknown).
func defaultPort(scheme string) string {
	switch {
	case strings.EqualFold(scheme, "https"), strings.EqualFold(scheme, "wss"):
		return "443"
	case strings.EqualFold(scheme, "http"), strings.EqualFold(scheme, "ws"):
		return "80"
	}
	return ""
}

func (p pattern) match(o site) bool {
	if p.scheme != "" && !strings.EqualFold(p.scheme, o.scheme) {
		return false
	}
	if p.wildcard {
		// One or more labels, then "." + host: a.example.com, a.b.example.com, not example.com.
		n := len(o.host) - len(p.host)
		if n < 2 || o.host[n-1] != '.' || !strings.EqualFold(o.host[n:], p.host) {
			return false
		}
	} else if !strings.EqualFold(p.host, o.host) {
		return false
	}
	port := o.port
	if port == "" {
		port = defaultPort(o.scheme)
	}
	switch {
	case p.port != "":
		return p.port == port
	case p.scheme != "":
		// A URL form names one origin: its scheme's default port only.
		return port == defaultPort(p.scheme)
	}
	return true // a bare host (Reverb's form) allows every port
}
