package pusher

import "encoding/json"

// Fast paths for the two decodes every connection does (pusher:subscribe and its data).
// encoding/json's reflection was a tenth of the server's CPU per connection. They accept
// only the common shape: an object whose members are the known lowercase keys, with string
// values (any JSON value for "data"); a string with escapes or non-ASCII bytes is decoded by
// encoding/json on its own (plainString). Anything else (other keys, which encoding/json
// would match case-insensitively or ignore, non-string values, escaped keys) returns false
// and the caller decodes with encoding/json, so the result is always what encoding/json
// would produce.

// fastClientMessage decodes b into m if b has the common shape.
func fastClientMessage(b []byte, m *ClientMessage) bool {
	if !json.Valid(b) {
		return false
	}
	return scanObject(b, func(key, val []byte) bool {
		switch string(key) {
		case "event":
			s, ok := plainString(val)
			m.Event = s
			return ok
		case "channel":
			s, ok := plainString(val)
			m.Channel = s
			return ok
		case "data":
			m.Data = append(json.RawMessage(nil), val...)
			return true
		}
		return false
	})
}

// fastSubscribe decodes the object d into s if it has the common shape.
func fastSubscribe(d []byte, s *SubscribeData) bool {
	if !json.Valid(d) {
		return false
	}
	return scanObject(d, func(key, val []byte) bool {
		var ok bool
		switch string(key) {
		case "channel":
			s.Channel, ok = plainString(val)
		case "auth":
			s.Auth, ok = plainString(val)
		case "channel_data":
			s.ChannelData, ok = plainString(val)
		}
		return ok
	})
}

// scanObject calls member for each key (without quotes) and raw value of the valid JSON
// object b; it returns false if b is not an object, a key has an escape, or member does.
func scanObject(b []byte, member func(key, val []byte) bool) bool {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return true
	}
	for i < len(b) && b[i] == '"' {
		end := stringEnd(b, i)
		key := b[i+1 : end-1]
		for _, c := range key {
			if c == '\\' {
				return false
			}
		}
		i = skipSpace(b, end)
		i = skipSpace(b, i+1) // the colon
		start := i
		i = valueEnd(b, i)
		if !member(key, b[start:i]) {
			return false
		}
		i = skipSpace(b, i)
		if i >= len(b) || b[i] != ',' {
			break
		}
		i = skipSpace(b, i+1)
	}
	return true
}

// plainString returns the JSON string v: printable ASCII without escapes is sliced out at
// once; anything else (escapes, as in a presence channel_data, or non-ASCII) is decoded by
// encoding/json for this one value, so the result is always encoding/json's (U+FFFD for
// invalid UTF-8, surrogate pairs, lone surrogates) while the object around it stays on the
// fast path. A presence subscribe went whole to encoding/json before: 4.3 µs, as slow as the
// reference (bench/jsoncmp, docs/benchmarks.md).
func plainString(v []byte) (string, bool) {
	if len(v) < 2 || v[0] != '"' {
		return "", false
	}
	for _, c := range v[1 : len(v)-1] {
		if c < 0x20 || c >= 0x7f || c == '\\' {
			var s string
			if json.Unmarshal(v, &s) != nil {
				return "", false
			}
			return s, true
		}
	}
	return string(v[1 : len(v)-1]), true
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// stringEnd returns the index after the closing quote of the string starting at b[i].
func stringEnd(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return len(b)
}

// valueEnd returns the index after the valid JSON value starting at b[i].
func valueEnd(b []byte, i int) int {
	depth := 0
	for i < len(b) {
		switch c := b[i]; c {
		case '"':
			i = stringEnd(b, i)
			if depth == 0 {
				return i
			}
			continue
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				return i + 1
			}
			if depth < 0 {
				return i
			}
		case ',':
			if depth == 0 {
				return i
			}
		case ' ', '\t', '\n', '\r':
			if depth == 0 {
				return i
			}
		}
		i++
	}
	return i
}
