package ws

import (
	"bytes"
	"crypto/sha1"
	"encoding/base64"
)

// maxUpgradeHead bounds the request head the fast path reads itself; a longer one (legal
// up to net/http's 1 MB) is handed to net/http with the bytes read so far.
const maxUpgradeHead = 8 << 10

// headResult is what parseUpgradeHead made of the bytes received so far.
type headResult uint8

const (
	headIncomplete headResult = iota // no end of head yet and nothing disqualifying
	headUpgrade                      // a complete WebSocket upgrade the fast path handles
	headOther                        // anything else: net/http must see the bytes
)

// upgradeHead is a parsed GET {prefix}{name} upgrade; the slices point into the buffer
// given to parseUpgradeHead.
type upgradeHead struct {
	Name   []byte // the path's last segment, after prefix
	Query  []byte // raw query without '?', nil if none
	Origin []byte // nil if no Origin header
	Key    []byte // Sec-WebSocket-Key, trimmed
	// Deflate: a Sec-WebSocket-Extensions line offers permessage-deflate acceptably.
	Deflate bool
}

// parseUpgradeHead recognises the one request the fast path serves: a GET of
// {prefix}{name} where name is one segment of unreserved characters. It is deliberately
// narrower than net/http: whatever it is not certain net/http, echo and gorilla would
// answer with a 101 (odd characters, duplicated or folded headers, a body, bytes after the
// head, bare LF line ends, HTTP/1.0, percent-escapes in the path) is headOther, so that
// those answer it exactly as before.
func parseUpgradeHead(b []byte, prefix string) (upgradeHead, headResult) {
	var h upgradeHead
	if hasBareLF(b) {
		return h, headOther // net/http accepts bare LF; we would wait for CRLFCRLF forever
	}
	end := bytes.Index(b, []byte("\r\n\r\n"))
	if end < 0 {
		if len(b) >= maxUpgradeHead || (len(b) >= 4 && string(b[:4]) != "GET ") {
			return h, headOther // API requests, /up: no need to wait for their whole head
		}
		return h, headIncomplete
	}
	if end+4 != len(b) || end+4 > maxUpgradeHead {
		return h, headOther // pipelined bytes: gorilla refuses them, let it
	}
	lines := b[:end+2] // every line, each ending in CRLF
	eol := bytes.Index(lines, []byte("\r\n"))
	if !parseRequestLine(&h, lines[:eol], prefix) {
		return h, headOther
	}
	var hosts, upgrades, conns, versions, keys, origins int
	for rest := lines[eol+2:]; len(rest) > 0; {
		eol = bytes.Index(rest, []byte("\r\n"))
		line := rest[:eol]
		rest = rest[eol+2:]
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 {
			return h, headOther // also catches obs-fold continuation lines
		}
		name, value := line[:colon], trimOWS(line[colon+1:])
		for _, c := range name {
			if !isTokenByte(c) {
				return h, headOther
			}
		}
		for _, c := range value {
			if (c < ' ' && c != '\t') || c == 0x7f {
				return h, headOther
			}
		}
		switch {
		case asciiEqualFold(name, "host"):
			hosts++
			for _, c := range value {
				if !isHostByte(c) {
					return h, headOther
				}
			}
		case asciiEqualFold(name, "upgrade"):
			upgrades++
			if !tokenListContains(value, "websocket") {
				return h, headOther
			}
		case asciiEqualFold(name, "connection"):
			conns++
			if !tokenListContains(value, "upgrade") {
				return h, headOther
			}
		case asciiEqualFold(name, "sec-websocket-version"):
			versions++
			if !tokenListContains(value, "13") {
				return h, headOther
			}
		case asciiEqualFold(name, "sec-websocket-key"):
			keys++
			var raw [18]byte
			if len(value) != 24 {
				return h, headOther
			}
			if n, err := base64.StdEncoding.Decode(raw[:], value); err != nil || n != 16 {
				return h, headOther
			}
			h.Key = value
		case asciiEqualFold(name, "sec-websocket-extensions"):
			h.Deflate = h.Deflate || acceptDeflateOffer(value)
		case asciiEqualFold(name, "origin"):
			origins++
			h.Origin = value
		case asciiEqualFold(name, "content-length"), asciiEqualFold(name, "transfer-encoding"),
			asciiEqualFold(name, "expect"):
			return h, headOther
		}
	}
	if hosts != 1 || upgrades != 1 || conns != 1 || versions != 1 || keys != 1 || origins > 1 {
		return h, headOther
	}
	return h, headUpgrade
}

// parseRequestLine accepts exactly "GET {prefix}{name}[?query] HTTP/1.1" with a name of
// unreserved characters (so net/http's router and the handler see the same bytes).
func parseRequestLine(h *upgradeHead, line []byte, prefix string) bool {
	const method, proto = "GET ", " HTTP/1.1"
	if len(line) < len(method)+len(proto) || !bytes.HasPrefix(line, []byte(method)) || !bytes.HasSuffix(line, []byte(proto)) {
		return false
	}
	target := line[len(method) : len(line)-len(proto)]
	if !bytes.HasPrefix(target, []byte(prefix)) {
		return false
	}
	rest := target[len(prefix):]
	key := rest
	if q := bytes.IndexByte(rest, '?'); q >= 0 {
		key, h.Query = rest[:q], rest[q+1:]
		for _, c := range h.Query {
			if c <= ' ' || c >= 0x7f || c == '#' {
				return false
			}
		}
	}
	if len(key) == 0 {
		return false
	}
	for _, c := range key {
		if !isUnreserved(c) {
			return false
		}
	}
	h.Name = key
	return true
}

// tokenListContains ports gorilla's TokenListContainsValue for one header line, so the
// fast path accepts exactly the Connection, Upgrade and version values gorilla accepts.
func tokenListContains(s []byte, value string) bool {
	for {
		s = skipOWS(s)
		i := 0
		for i < len(s) && isTokenByte(s[i]) {
			i++
		}
		t := s[:i]
		if len(t) == 0 {
			return false
		}
		s = skipOWS(s[i:])
		if len(s) > 0 && s[0] != ',' {
			return false
		}
		if asciiEqualFold(t, value) {
			return true
		}
		if len(s) == 0 {
			return false
		}
		s = s[1:]
	}
}

// appendAcceptKey appends Sec-WebSocket-Accept for key (RFC 6455 §4.2.2) without
// allocating.
func appendAcceptKey(dst, key []byte) []byte {
	const guid = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
	var in [24 + len(guid)]byte
	n := copy(in[:], key)
	n += copy(in[n:], guid)
	sum := sha1.Sum(in[:n])
	return base64.StdEncoding.AppendEncode(dst, sum[:])
}

func hasBareLF(b []byte) bool {
	for i, c := range b {
		if c == '\n' && (i == 0 || b[i-1] != '\r') {
			return true
		}
	}
	return false
}

func trimOWS(b []byte) []byte {
	b = skipOWS(b)
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

func skipOWS(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	return b
}

// asciiEqualFold compares b with lower-case ASCII s, ignoring b's case.
func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}

// isTokenByte reports an RFC 7230 tchar.
func isTokenByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	switch c {
	case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~':
		return true
	}
	return false
}

// isUnreserved reports an RFC 3986 unreserved character.
func isUnreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~'
}

// isHostByte is a conservative subset of what net/http accepts in Host (names, IPv4,
// bracketed IPv6, port); anything else goes to net/http to judge.
func isHostByte(c byte) bool {
	return isUnreserved(c) || c == ':' || c == '[' || c == ']'
}
