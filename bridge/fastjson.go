package bridge

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"
)

// This file is the hot path of every call: a single-pass decoder for the two bodies each call
// costs (the agent's request and the page's ok result) and an appender for the messages the
// server builds. The reference decoders in validate.go parse a body four or five times
// (depth, UTF-8, syntax, a map of members, then each member); here one scan does all of it.
//
// The fast decoders only ever accept: on anything unusual (an error, an escape in a key or id,
// a duplicate key, a non-ok status, a number that is not a plain integer) they report false and
// the caller runs the reference decoder, which produces the exact same result or error. So
// behaviour and error texts are those of validate.go by construction, and the differential
// fuzz targets (fuzz_test.go) check that whatever the fast path accepts equals the reference.

// scanner walks one JSON document, validating syntax, UTF-8 and nesting depth as it goes.
type scanner struct {
	b     []byte
	i     int
	depth int
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// lit consumes c (after whitespace).
func (s *scanner) lit(c byte) bool {
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// str consumes a string and returns its raw content; escaped reports a backslash in it.
func (s *scanner) str() (content []byte, escaped, ok bool) {
	s.ws()
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return nil, false, false
	}
	s.i++
	start, ascii := s.i, true
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			content = s.b[start:s.i]
			s.i++
			if !ascii && !utf8.Valid(content) {
				return nil, false, false
			}
			return content, escaped, true
		case c == '\\':
			escaped = true
			if s.i+1 >= len(s.b) {
				return nil, false, false
			}
			switch s.b[s.i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.i += 2
			case 'u':
				if s.i+6 > len(s.b) {
					return nil, false, false
				}
				for _, h := range s.b[s.i+2 : s.i+6] {
					if !isHex(h) {
						return nil, false, false
					}
				}
				s.i += 6
			default:
				return nil, false, false
			}
		case c < 0x20:
			return nil, false, false
		default:
			if c >= utf8.RuneSelf {
				ascii = false
			}
			s.i++
		}
	}
	return nil, false, false
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// value consumes any value and returns its exact bytes.
func (s *scanner) value() ([]byte, bool) {
	s.ws()
	if s.i >= len(s.b) {
		return nil, false
	}
	start := s.i
	switch c := s.b[s.i]; {
	case c == '{' || c == '[':
		if s.depth++; s.depth > MaxDepth {
			return nil, false
		}
		s.i++
		closing := byte('}')
		if c == '[' {
			closing = ']'
		}
		if !s.lit(closing) {
			for {
				if c == '{' {
					if _, _, ok := s.str(); !ok || !s.lit(':') {
						return nil, false
					}
				}
				if _, ok := s.value(); !ok {
					return nil, false
				}
				if s.lit(',') {
					continue
				}
				if !s.lit(closing) {
					return nil, false
				}
				break
			}
		}
		s.depth--
	case c == '"':
		if _, _, ok := s.str(); !ok {
			return nil, false
		}
	case c == 't':
		return s.word("true", start)
	case c == 'f':
		return s.word("false", start)
	case c == 'n':
		return s.word("null", start)
	default:
		if !s.number() {
			return nil, false
		}
	}
	return s.b[start:s.i], true
}

func (s *scanner) word(w string, start int) ([]byte, bool) {
	if !bytes.HasPrefix(s.b[s.i:], []byte(w)) {
		return nil, false
	}
	s.i += len(w)
	return s.b[start:s.i], true
}

// number consumes -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *scanner) number() bool {
	b, i := s.b, s.i
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	default:
		return false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) || !isDigit(b[i]) {
			return false
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || !isDigit(b[i]) {
			return false
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	s.i = i
	return true
}

// members calls f for each member of the object at the scanner, with an unescaped key; it
// fails on an escaped key (it might spell a known one) and on f returning false. The key is
// the scanned bytes, not a string: converting it would allocate once per member, as it
// escapes through f (callers switch on string(key), which does not allocate).
func (s *scanner) members(f func(key, val []byte) bool) bool {
	if !s.lit('{') {
		return false
	}
	if s.depth++; s.depth > MaxDepth {
		return false
	}
	if !s.lit('}') {
		for {
			k, esc, ok := s.str()
			if !ok || esc || !s.lit(':') {
				return false
			}
			v, ok := s.value()
			if !ok || !f(k, v) {
				return false
			}
			if s.lit(',') {
				continue
			}
			if !s.lit('}') {
				return false
			}
			break
		}
	}
	s.depth--
	return true
}

// end reports whether only whitespace is left.
func (s *scanner) end() bool {
	s.ws()
	return s.i == len(s.b)
}

// plainString returns the content of a JSON string value without escapes.
func plainString(v []byte) (string, bool) {
	if len(v) < 2 || v[0] != '"' || bytes.IndexByte(v, '\\') >= 0 {
		return "", false
	}
	return string(v[1 : len(v)-1]), true
}

// plainUint parses a JSON number that is a plain non-negative integer of at most 15 digits.
func plainUint(v []byte) (int64, bool) {
	if len(v) == 0 || len(v) > 15 {
		return 0, false
	}
	for _, c := range v {
		if !isDigit(c) {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	return n, err == nil
}

// fastDecodeResult decodes the hot page message: a result with status ok.
func fastDecodeResult(b []byte) (*PageMessage, bool) {
	s := scanner{b: b}
	var seen uint8
	var clientID, id string
	var result []byte
	ok := s.members(func(k, v []byte) bool {
		var bit uint8
		var good bool
		switch string(k) {
		case "protocol":
			bit, good = 1, string(v) == "1"
		case "type":
			bit, good = 2, string(v) == `"result"`
		case "clientId":
			bit = 4
			clientID, good = plainString(v)
			good = good && ValidID(clientID)
		case "id":
			bit = 8
			id, good = plainString(v)
			good = good && ValidID(id)
		case "result":
			bit, good, result = 16, true, v
		}
		if !good || seen&bit != 0 {
			return false
		}
		seen |= bit
		return true
	})
	if !ok || seen != 31 || !s.end() {
		return nil, false
	}
	// The result object was validated by the scan above; read its members.
	r := scanner{b: result, depth: 1}
	var status, data []byte
	if !r.members(func(k, v []byte) bool {
		switch {
		case string(k) == "status" && status == nil:
			status = v
		case string(k) == "data" && data == nil:
			data = v
		default:
			return false
		}
		return true
	}) || string(status) != `"ok"` {
		return nil, false
	}
	// What json.Marshal of the member map produces: sorted keys, compacted, HTML-escaped.
	canon := make([]byte, 0, len(data)+26)
	if data != nil {
		canon = append(canon, `{"data":`...)
		canon = appendCanon(canon, data)
		canon = append(canon, `,"status":"ok"}`...)
	} else {
		canon = append(canon, `{"status":"ok"}`...)
	}
	return &PageMessage{Type: TypeResult, ClientID: clientID, ID: id, Result: canon, Status: StatusOK}, true
}

// fastDecodeCallRequest decodes an agent's request body; unknown keys are ignored as in
// decodeCallRequest, whose result it must equal.
func fastDecodeCallRequest(b []byte, callKind string, maxTimeout time.Duration) (*callRequest, bool) {
	s := scanner{b: b}
	req := &callRequest{} // Input defaults to null below, only when absent (it costs an allocation)
	var seen uint8
	ok := s.members(func(k, v []byte) bool {
		var bit uint8
		good := true
		switch string(k) {
		case "user_id":
			bit = 1
			req.UserID, good = plainString(v)
			good = good && ValidChannelPart(req.UserID)
		case "conversation_id":
			bit = 2
			req.ConversationID, good = plainString(v)
			good = good && ValidChannelPart(req.ConversationID)
		case "tool":
			bit = 4
			req.Tool, good = plainString(v)
			good = good && ValidToolName(req.Tool)
		case "scopes", "tools", "dry_run":
			return false // rare: the reference decoder
		case "input", "rev", "tool_use_id", "timeout_ms":
			if callKind == KindDescribe {
				return true
			}
			switch string(k) {
			case "input":
				bit, req.Input = 8, v
			case "rev":
				bit = 16
				if string(v) != "null" {
					rev, isInt := plainUint(v)
					good = isInt && rev <= maxSafeInt
					req.Rev = &rev
				}
			case "tool_use_id":
				bit = 32
				if string(v) != "null" {
					req.ToolUseID, good = plainString(v)
					good = good && len(req.ToolUseID) <= 256
				}
			case "timeout_ms":
				bit = 64
				if string(v) != "null" {
					ms, isInt := plainUint(v)
					good = isInt && ms >= 1 && ms <= maxTimeout.Milliseconds()
					req.Timeout = time.Duration(ms) * time.Millisecond
				}
			}
		}
		if !good || seen&bit != 0 {
			return false
		}
		seen |= bit
		return true
	})
	if !ok || seen&7 != 7 || !s.end() {
		return nil, false
	}
	if req.Input == nil {
		req.Input = json.RawMessage("null")
	}
	return req, true
}

// appendCanon appends a valid JSON value as json.Marshal(json.RawMessage(v)) would: compacted
// and with <, >, &, U+2028 and U+2029 escaped. Values that need neither are copied as is.
func appendCanon(dst, v []byte) []byte {
	if !needsCanon(v) {
		return append(dst, v...)
	}
	out, err := json.Marshal(json.RawMessage(v))
	if err != nil { // unreachable for validated input; keep the bytes rather than lose them
		return append(dst, v...)
	}
	return append(dst, out...)
}

// needsCanon reports whitespace outside strings or a character json.Marshal escapes.
func needsCanon(v []byte) bool {
	inStr, esc := false, false
	for i, c := range v {
		switch {
		case c == '<' || c == '>' || c == '&':
			return true
		case c == 0xE2 && i+2 < len(v) && v[i+1] == 0x80 && (v[i+2] == 0xA8 || v[i+2] == 0xA9):
			return true
		case inStr:
			switch {
			case esc:
				esc = false
			case c == '\\':
				esc = true
			case c == '"':
				inStr = false
			}
		case c == '"':
			inStr = true
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			return true
		}
	}
	return false
}

// appendToPage appends a server-to-page message as json.Marshal(toPage) did, from parts that are
// valid by construction (the callers check or own them): ids and the tool name need no
// escaping, input is valid JSON of acceptable depth or empty for describe/cancel.
func appendToPage(dst []byte, typ, clientID, id string, rev *int64, tool string, input []byte) []byte {
	dst = append(dst, `{"protocol":1,"type":"`...)
	dst = append(dst, typ...)
	dst = append(dst, `","clientId":"`...)
	dst = append(dst, clientID...)
	dst = append(dst, `","id":"`...)
	dst = append(dst, id...)
	dst = append(dst, '"')
	if rev != nil {
		dst = append(dst, `,"rev":`...)
		dst = strconv.AppendInt(dst, *rev, 10)
	}
	if tool != "" {
		dst = append(dst, `,"tool":"`...)
		dst = append(dst, tool...)
		dst = append(dst, '"')
	}
	if typ == TypeCall {
		dst = append(dst, `,"input":`...)
		if len(bytes.TrimSpace(input)) == 0 {
			dst = append(dst, "null"...)
		} else {
			dst = appendCanon(dst, input)
		}
	}
	return append(dst, '}')
}

// appendEvent appends the Pusher payload {"message": m} around a server-to-page message.
func appendEvent(dst []byte, typ, clientID, id string, rev *int64, tool string, input []byte) []byte {
	dst = append(dst, `{"message":`...)
	dst = appendToPage(dst, typ, clientID, id, rev, tool, input)
	return append(dst, '}')
}

// appendCallResponse appends the agent's answer exactly as json.Marshal(callResponse) did;
// result is canonical already (decoded results are re-encoded, server ones are constants).
func appendCallResponse(dst []byte, id string, result []byte, h Hints) []byte {
	dst = append(dst, `{"id":"`...)
	dst = append(dst, id...)
	dst = append(dst, `","result":`...)
	if len(result) == 0 {
		dst = append(dst, "null"...)
	} else {
		dst = appendCanon(dst, result)
	}
	dst = append(dst, `,"hints":{`...)
	first := true
	for _, hint := range [...]struct {
		name string
		v    *bool
	}{{"readOnly", h.ReadOnly}, {"consequential", h.Consequential}, {"destructive", h.Destructive},
		{"untrustedContent", h.UntrustedContent}} {
		if hint.v == nil {
			continue
		}
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = append(dst, '"')
		dst = append(dst, hint.name...)
		dst = append(dst, `":`...)
		dst = strconv.AppendBool(dst, *hint.v)
	}
	return append(dst, "}}"...)
}

// ScanMembers calls f for each top-level member of b, a JSON object, with its key (raw,
// unescaped) and its exact value bytes, in order, in one pass that validates syntax, UTF-8
// and depth (MaxDepth). It reports false, having stopped, when b is not one valid object,
// when a key has an escape (it might spell any name) or when f returns false: callers then
// decode b with encoding/json, so ScanMembers only ever has to accept what that accepts.
func ScanMembers(b []byte, f func(key, val []byte) bool) bool {
	s := scanner{b: b}
	return s.members(f) && s.end()
}
