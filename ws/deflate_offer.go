package ws

import (
	"bytes"

	"github.com/gorilla/websocket"
)

// acceptDeflateOffer reports whether one Sec-WebSocket-Extensions header value offers
// permessage-deflate in a form this server accepts (RFC 7692 §5, §7.1): the first offer
// whose parameters are all known, not repeated and valid, and without
// server_max_window_bits: the server always answers with ExtensionResponse, and accepting
// that parameter would mean echoing it (§7.1.2.1), so such an offer is declined (browsers
// never send it; a client that does usually offers a plain fallback after it). The answer
// asks for no context takeover either way, which is legal for every offer (§7.1.1), and
// omits client_max_window_bits, so the client compresses with whatever window it likes (the
// inflater reads any window up to 32 KiB). A value that does not parse ends the search:
// nothing is accepted from it.
func acceptDeflateOffer(v []byte) bool {
	for len(v) > 0 {
		var name []byte
		if name, v = nextToken(skipOWS(v)); len(name) == 0 {
			return false
		}
		ok, rest, good := deflateParams(asciiEqualFold(name, "permessage-deflate"), v)
		if !good {
			return false
		}
		if ok {
			return true
		}
		v = skipOWS(rest)
		if len(v) == 0 {
			return false
		}
		if v[0] != ',' {
			return false
		}
		v = v[1:]
	}
	return false
}

// deflateParams reads the ";"-separated parameters after an extension name up to the
// next "," or the end. ok says whether they make an acceptable permessage-deflate offer
// (only when isDeflate); good is false when the syntax is broken.
func deflateParams(isDeflate bool, v []byte) (ok bool, rest []byte, good bool) {
	ok = isDeflate
	var seen uint8
	for {
		v = skipOWS(v)
		if len(v) == 0 || v[0] == ',' {
			return ok, v, true
		}
		if v[0] != ';' {
			return false, v, false
		}
		var name, value []byte
		hasValue := false
		if name, v = nextToken(skipOWS(v[1:])); len(name) == 0 {
			return false, v, false
		}
		if v = skipOWS(v); len(v) > 0 && v[0] == '=' {
			hasValue = true
			var good bool
			if value, v, good = tokenOrQuoted(skipOWS(v[1:])); !good {
				return false, v, false
			}
		}
		if !isDeflate {
			continue
		}
		bit, valid := deflateParam(name, value, hasValue)
		if !valid || seen&bit != 0 {
			ok = false // a parameter this server does not accept: decline this offer
		}
		seen |= bit
	}
}

// deflateParam judges one permessage-deflate parameter: its bit (to find repeats) and
// whether this server accepts it.
func deflateParam(name, value []byte, hasValue bool) (bit uint8, ok bool) {
	switch {
	case asciiEqualFold(name, "server_no_context_takeover"):
		return 1, !hasValue
	case asciiEqualFold(name, "client_no_context_takeover"):
		return 2, !hasValue
	case asciiEqualFold(name, "server_max_window_bits"):
		return 4, false // declined: see acceptDeflateOffer
	case asciiEqualFold(name, "client_max_window_bits"):
		return 8, !hasValue || windowBits(value) != 0
	}
	return 16, false
}

// windowBits parses a window size 8..15 without leading zeros (RFC 7692 §7.1.2.1), 0 if
// it is not one.
func windowBits(v []byte) int {
	switch {
	case len(v) == 1 && v[0] >= '8' && v[0] <= '9':
		return int(v[0] - '0')
	case len(v) == 2 && v[0] == '1' && v[1] >= '0' && v[1] <= '5':
		return 10 + int(v[1]-'0')
	}
	return 0
}

// nextToken splits a leading RFC 7230 token off v.
func nextToken(v []byte) (tok, rest []byte) {
	i := 0
	for i < len(v) && isTokenByte(v[i]) {
		i++
	}
	return v[:i], v[i:]
}

// tokenOrQuoted reads a parameter value: a token or a quoted-string (its content without
// escapes, which RFC 7692 values never need: an escaped one is refused).
func tokenOrQuoted(v []byte) (val, rest []byte, ok bool) {
	if len(v) > 0 && v[0] == '"' {
		end := bytes.IndexByte(v[1:], '"')
		if end < 0 || bytes.IndexByte(v[1:1+end], '\\') >= 0 {
			return nil, v, false
		}
		return v[1 : 1+end], v[end+2:], true
	}
	tok, rest := nextToken(v)
	return tok, rest, len(tok) > 0
}

// offersDeflate reports whether any of the header's lines makes an acceptable offer.
func offersDeflate(values []string) bool {
	for _, v := range values {
		if acceptDeflateOffer([]byte(v)) {
			return true
		}
	}
	return false
}

// initDeflate sets up compression for a new Server (nil Deflater when off) and the
// upgrader the portable path uses for an accepted offer. gorilla's own negotiation
// answers exactly ExtensionResponse; the server picks that upgrader only for a request
// acceptDeflateOffer accepts, and checks its 101 (negotiatedIn) before compressing.
func (s *Server) initDeflate(opts Compression) {
	s.deflater = NewDeflater(opts)
	if s.deflater != nil {
		s.upgraderDeflate = s.upgrader
		s.upgraderDeflate.EnableCompression = true
	}
}

// upgraderFor picks the upgrader for a request: the compressing one when the server
// compresses and the request offers permessage-deflate acceptably.
func (s *Server) upgraderFor(values []string) *websocket.Upgrader {
	if s.deflater != nil && offersDeflate(values) {
		return &s.upgraderDeflate
	}
	return &s.upgrader
}

// negotiatedIn reports whether a 101 response written by gorilla accepted
// permessage-deflate.
func negotiatedIn(resp []byte) bool {
	end := bytes.Index(resp, []byte("\r\n\r\n"))
	if end < 0 {
		return false
	}
	return bytes.Contains(resp[:end+2], []byte("\r\n"+extensionLine))
}

// useDeflate marks a connection whose handshake accepted permessage-deflate: its reader
// inflates RSV1 messages and its Deflater compresses what is sent to it alone.
func (c *Conn) useDeflate() {
	c.deflater = c.srv.deflater
	c.rd.deflate = true
}

// Deflater is the compressor of a connection that negotiated permessage-deflate, nil for
// one that did not: a broadcast compresses its frame once with it (Deflater.Frame) for
// every such subscriber and queues the result with WritePreframed.
func (c *Conn) Deflater() *Deflater { return c.deflater }

// WriteCompressible queues a frame meant for this connection alone (not a broadcast's
// shared frame): compressed when the connection negotiated permessage-deflate and the
// payload is at least MinBytes, else as it is (WritePreframed).
func (c *Conn) WriteCompressible(frame []byte) bool {
	return c.WritePreframed(c.deflater.Compress(frame))
}

// compressAll compresses a barrier's frames in place for a connection that negotiated
// permessage-deflate (they are meant for it alone).
func (c *Conn) compressAll(frames [][]byte) {
	if c.deflater == nil {
		return
	}
	for i, f := range frames {
		frames[i] = c.deflater.Compress(f)
	}
}
