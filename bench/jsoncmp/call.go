package jsoncmp

import (
	"bytes"
	"encoding/json"
	"time"

	"github.com/reverbgo/reverbgo/bridge"
	"github.com/valyala/fastjson"
)

// MaxCallTimeout bounds timeout_ms in the call-request benchmarks (the config's default).
const MaxCallTimeout = 10 * time.Minute

// CallDecoder decodes an agent's POST /toolmark/calls body as the bridge does. Like the page
// decoders, each library variant is a fast path that declines anything unusual (an error, a
// number that is not a plain integer, ...) to the reference decoder.
type CallDecoder interface {
	Decode(b []byte) (*bridge.CallRequest, error)
}

// OursCall is reverbgo's code: bridge/fastjson.go's fast path, then the reference.
type OursCall struct{}

func (OursCall) Decode(b []byte) (*bridge.CallRequest, error) {
	return bridge.DecodeCallRequest(b, bridge.KindCall, MaxCallTimeout)
}

// RefCall is the reference decoder alone.
type RefCall struct{}

func (RefCall) Decode(b []byte) (*bridge.CallRequest, error) {
	return bridge.ReferenceDecodeCallRequest(b, bridge.KindCall, MaxCallTimeout)
}

// plainInt reads a plain non-negative integer of at most 15 digits (what the fast paths take;
// 1.0, 1e2 and the like go to the reference, which accepts them as JavaScript would).
func plainInt(v []byte) (int64, bool) {
	if len(v) == 0 || len(v) > 15 {
		return 0, false
	}
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// finish applies the rules shared by the library fast paths to the decoded members; raw
// numbers are nil when absent or null.
func finish(req *bridge.CallRequest, rev, timeout []byte) bool {
	if !bridge.ValidChannelPart(req.UserID) || !bridge.ValidChannelPart(req.ConversationID) ||
		!bridge.ValidToolName(req.Tool) || len(req.ToolUseID) > 256 {
		return false
	}
	if rev != nil {
		n, ok := plainInt(rev)
		if !ok || n > 1<<53-1 {
			return false
		}
		req.Rev = &n
	}
	if timeout != nil {
		ms, ok := plainInt(timeout)
		if !ok || ms < 1 || ms > MaxCallTimeout.Milliseconds() {
			return false
		}
		req.Timeout = time.Duration(ms) * time.Millisecond
	}
	return true
}

// SonicCall decodes with sonic into a struct: keys case-sensitive as the reference's member
// map, unknown keys ignored as the reference does, the last duplicate wins as in that map.
type SonicCall struct{}

type sonicCallBody struct {
	UserID         *string         `json:"user_id"`
	ConversationID *string         `json:"conversation_id"`
	Tool           *string         `json:"tool"`
	Input          json.RawMessage `json:"input"`
	Rev            json.RawMessage `json:"rev"`
	ToolUseID      *string         `json:"tool_use_id"`
	TimeoutMS      json.RawMessage `json:"timeout_ms"`
}

var sonicCallCfg = sonicConfig(false)

func (SonicCall) Decode(b []byte) (*bridge.CallRequest, error) {
	if r, ok := sonicCallFast(b); ok {
		return r, nil
	}
	return RefCall{}.Decode(b)
}

func sonicCallFast(b []byte) (*bridge.CallRequest, bool) {
	if !sonicGuard(b) {
		return nil, false
	}
	var c sonicCallBody
	if sonicCallCfg.Unmarshal(b, &c) != nil || c.UserID == nil || c.ConversationID == nil || c.Tool == nil {
		return nil, false
	}
	req := &bridge.CallRequest{UserID: *c.UserID, ConversationID: *c.ConversationID, Tool: *c.Tool, Input: c.Input}
	if req.Input == nil {
		req.Input = json.RawMessage("null")
	}
	if c.ToolUseID != nil {
		req.ToolUseID = *c.ToolUseID
	}
	if !finish(req, nullToNil(c.Rev), nullToNil(c.TimeoutMS)) {
		return nil, false
	}
	return req, true
}

func nullToNil(raw json.RawMessage) []byte {
	if raw == nil || string(raw) == "null" {
		return nil
	}
	return raw
}

// FastjsonCall decodes with fastjson (parser reused). As for page messages, a body with any
// escape declines to the reference: fastjson re-serializes input without the escapes it had.
type FastjsonCall struct {
	p   fastjson.Parser
	buf []byte
}

func (d *FastjsonCall) Decode(b []byte) (*bridge.CallRequest, error) {
	if r, ok := d.fast(b); ok {
		return r, nil
	}
	return RefCall{}.Decode(b)
}

func (d *FastjsonCall) fast(b []byte) (*bridge.CallRequest, bool) {
	if bytes.IndexByte(b, '\\') >= 0 || !guard(b) || !json.Valid(b) {
		return nil, false
	}
	v, err := d.p.ParseBytes(b)
	if err != nil {
		return nil, false
	}
	o, err := v.Object()
	if err != nil {
		return nil, false
	}
	req := &bridge.CallRequest{Input: json.RawMessage("null")}
	var rev, timeout []byte
	var seen uint8
	ok := true
	str := func(v *fastjson.Value, dst *string) {
		ok = ok && v.Type() == fastjson.TypeString
		*dst = string(v.GetStringBytes())
	}
	num := func(v *fastjson.Value, dst *[]byte) {
		switch v.Type() {
		case fastjson.TypeNull:
			*dst = nil
		case fastjson.TypeNumber:
			*dst = v.MarshalTo(nil) // fastjson keeps a number's text as sent
		default:
			ok = false
		}
	}
	o.Visit(func(k []byte, v *fastjson.Value) {
		switch string(k) { // the last duplicate wins, as in the reference's member map
		case "user_id":
			seen |= 1
			str(v, &req.UserID)
		case "conversation_id":
			seen |= 2
			str(v, &req.ConversationID)
		case "tool":
			seen |= 4
			str(v, &req.Tool)
		case "input":
			d.buf = v.MarshalTo(d.buf[:0])
			req.Input = append(json.RawMessage(nil), d.buf...)
		case "rev":
			num(v, &rev)
		case "tool_use_id":
			if v.Type() == fastjson.TypeNull {
				req.ToolUseID = ""
			} else {
				str(v, &req.ToolUseID)
			}
		case "timeout_ms":
			num(v, &timeout)
		}
	})
	if !ok || seen != 7 || !finish(req, rev, timeout) {
		return nil, false
	}
	return req, true
}
