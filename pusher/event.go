package pusher

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"

	"github.com/reverbgo/reverbgo/ws"
)

// AppendEvent appends the JSON of one server event {"event","channel","data","user_id"} to dst.
// data is the already-encoded JSON string content (Pusher sends data as a JSON string);
// empty channel and userID are dropped, never sent as null.
func AppendEvent(dst []byte, event, channel, data, userID string, dataPresent bool) []byte {
	dst = append(dst, `{"event":`...)
	dst = appendJSONString(dst, event)
	if channel != "" {
		dst = append(dst, `,"channel":`...)
		dst = appendJSONString(dst, channel)
	}
	if dataPresent {
		dst = append(dst, `,"data":`...)
		dst = appendJSONString(dst, data)
	}
	if userID != "" {
		dst = append(dst, `,"user_id":`...)
		dst = appendJSONString(dst, userID)
	}
	return append(dst, '}')
}

// Frame is one complete server-to-client WebSocket frame (ws.AppendFrame): a broadcast is
// framed once and the same bytes are queued on every subscriber.
type Frame []byte

// TextFrame frames payload as one text message.
func TextFrame(payload []byte) Frame { return ws.TextFrame(payload) }

// EventFrame encodes and frames one event with a data string.
func EventFrame(event, channel, data string) Frame {
	buf := make([]byte, ws.TextHeaderRoom, ws.TextHeaderRoom+len(event)+len(channel)+len(data)+48)
	return ws.TextFrameInPlace(AppendEvent(buf, event, channel, data, "", true))
}

// eventFrameNoData frames an event that carries no data (pusher:pong, pusher:cache_miss).
func eventFrameNoData(event, channel string) Frame {
	buf := make([]byte, ws.TextHeaderRoom, ws.TextHeaderRoom+len(event)+len(channel)+32)
	return ws.TextFrameInPlace(AppendEvent(buf, event, channel, "", "", false))
}

// errorFrame builds pusher:error with a code (0 = none) and message.
func errorFrame(code int, message string) Frame {
	b := []byte(`{"message":`)
	b = appendJSONString(b, message)
	if code != 0 {
		b = append(b, `,"code":`...)
		b = strconv.AppendInt(b, int64(code), 10)
	}
	b = append(b, '}')
	return EventFrame("pusher:error", "", string(b))
}

// mustJSON marshals values the server builds itself (maps of strings and raw JSON).
func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic("pusher: encoding server value: " + err.Error())
	}
	return string(b)
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string, escaping like encoding/json (minus HTML
// escaping, which Pusher clients do not need) and replacing invalid UTF-8.
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
