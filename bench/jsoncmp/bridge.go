package jsoncmp

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"

	"github.com/bytedance/sonic"
	"github.com/reverbgo/reverbgo/bridge"
	"github.com/valyala/fastjson"
)

// PageDecoder decodes one page-to-server Toolmark message as bridge.DecodePageMessage does.
// Like bridge/fastjson.go, each library variant is a fast path for the hot message (a result
// with status ok) that declines anything else to the reference decoder, so errors and every
// other message type are the reference's by construction; parity_test.go checks that what a
// fast path accepts equals the reference.
type PageDecoder interface {
	Decode(b []byte) (*bridge.PageMessage, error)
}

// OursPage is reverbgo's code: bridge/fastjson.go's single-pass scan, then the reference.
type OursPage struct{}

func (OursPage) Decode(b []byte) (*bridge.PageMessage, error) { return bridge.DecodePageMessage(b) }

// okResult builds the PageMessage of a result with status ok, with Result canonical as
// json.Marshal of the validated member map makes it: sorted keys, compacted, HTML-escaped.
func okResult(clientID, id string, data []byte) *bridge.PageMessage {
	var canon []byte
	if data == nil {
		canon = []byte(`{"status":"ok"}`)
	} else {
		canon = append(canon, `{"data":`...)
		canon = append(canon, canonical(data)...)
		canon = append(canon, `,"status":"ok"}`...)
	}
	return &bridge.PageMessage{Type: bridge.TypeResult, ClientID: clientID, ID: id, Result: canon, Status: bridge.StatusOK}
}

// canonical is json.Marshal(json.RawMessage(v)), skipped when v has nothing it would change.
func canonical(v []byte) []byte {
	if !bytes.ContainsAny(v, "<>& \t\r\n\u2028\u2029") {
		return v
	}
	out, err := json.Marshal(json.RawMessage(v))
	if err != nil {
		return v
	}
	return out
}

// guard is what a library fast path must check that the library does not: the reference
// rejects invalid UTF-8 and nesting deeper than bridge.MaxDepth; decline those to it.
func guard(b []byte) bool {
	return utf8.Valid(b) && bridge.CheckDepth(b, bridge.MaxDepth) == nil
}

// sonicGuard adds syntax: sonic does not validate what it skips or keeps raw (a long string
// with a bad escape passes its SIMD skip), and sonic.Valid accepts bad escapes, so json.Valid.
func sonicGuard(b []byte) bool { return guard(b) && json.Valid(b) }

// SonicPage decodes the hot message with sonic into structs: keys case-sensitive and unknown
// keys an error (the protocol's envelopes are strict), the last duplicate wins as in the
// reference's member map, json.RawMessage keeps the values as sent.
type SonicPage struct{}

// sonicStrict is for the protocol's strict objects (unknown keys are an error).
var sonicStrict = sonicConfig(true)

// sonicConfig matches keys case-sensitively as the reference's member maps do, validates strings
// (control characters) and copies them out of the input, as encoding/json does.
func sonicConfig(disallowUnknown bool) sonic.API {
	return sonic.Config{CaseSensitive: true, DisallowUnknownFields: disallowUnknown, ValidateString: true, CopyString: true}.Froze()
}

type sonicEnvelope struct {
	Protocol json.RawMessage `json:"protocol"`
	Type     string          `json:"type"`
	ClientID string          `json:"clientId"`
	ID       string          `json:"id"`
	Result   json.RawMessage `json:"result"`
}

type sonicOK struct {
	Status json.RawMessage `json:"status"` // raw: the canonical result keeps "o\u006b" as sent
	Data   json.RawMessage `json:"data"`
}

func (SonicPage) Decode(b []byte) (*bridge.PageMessage, error) {
	if m, ok := sonicFast(b); ok {
		return m, nil
	}
	return bridge.DecodePageMessage(b) // what a variant declines: the server's decoder (the reference behind it)
}

func sonicFast(b []byte) (*bridge.PageMessage, bool) {
	if !sonicGuard(b) {
		return nil, false
	}
	var e sonicEnvelope
	if sonicStrict.Unmarshal(b, &e) != nil || string(e.Protocol) != "1" || e.Type != bridge.TypeResult ||
		!bridge.ValidID(e.ClientID) || !bridge.ValidID(e.ID) || len(e.Result) == 0 || e.Result[0] != '{' {
		return nil, false
	}
	var r sonicOK
	if sonicStrict.Unmarshal(e.Result, &r) != nil || string(r.Status) != `"ok"` {
		return nil, false
	}
	return okResult(e.ClientID, e.ID, r.Data), true
}

// FastjsonPage decodes the hot message with fastjson (parser reused). fastjson cannot return a
// value's original bytes, only its re-serialization, which drops escapes ("\u00e9" becomes
// "é"), so the canonical result cannot be rebuilt from it when the message has any escape:
// those messages decline to the reference. Parse is lenient, so the message is validated first.
type FastjsonPage struct {
	p   fastjson.Parser
	buf []byte
}

func (d *FastjsonPage) Decode(b []byte) (*bridge.PageMessage, error) {
	if m, ok := d.fast(b); ok {
		return m, nil
	}
	return bridge.DecodePageMessage(b) // what a variant declines: the server's decoder (the reference behind it)
}

func (d *FastjsonPage) fast(b []byte) (*bridge.PageMessage, bool) {
	if bytes.IndexByte(b, '\\') >= 0 || !guard(b) || !json.Valid(b) {
		return nil, false
	}
	v, err := d.p.ParseBytes(b)
	if err != nil {
		return nil, false
	}
	o, err := v.Object()
	if err != nil || o.Len() != 5 {
		return nil, false
	}
	var clientID, id string
	var result *fastjson.Value
	var seen uint8
	ok := true
	o.Visit(func(k []byte, v *fastjson.Value) {
		var bit uint8
		switch string(k) {
		case "protocol":
			bit = 1
			ok = ok && v.Type() == fastjson.TypeNumber && string(v.MarshalTo(d.buf[:0])) == "1"
		case "type":
			bit = 2
			ok = ok && string(v.GetStringBytes()) == bridge.TypeResult && v.Type() == fastjson.TypeString
		case "clientId":
			bit = 4
			clientID = string(v.GetStringBytes())
			ok = ok && v.Type() == fastjson.TypeString && bridge.ValidID(clientID)
		case "id":
			bit = 8
			id = string(v.GetStringBytes())
			ok = ok && v.Type() == fastjson.TypeString && bridge.ValidID(id)
		case "result":
			bit, result = 16, v
		}
		ok = ok && bit != 0 && seen&bit == 0
		seen |= bit
	})
	if !ok || seen != 31 {
		return nil, false
	}
	r, err := result.Object()
	if err != nil || r.Len() > 2 {
		return nil, false
	}
	var status, data *fastjson.Value
	r.Visit(func(k []byte, v *fastjson.Value) {
		switch {
		case string(k) == "status" && status == nil:
			status = v
		case string(k) == "data" && data == nil:
			data = v
		default:
			ok = false
		}
	})
	if !ok || status == nil || status.Type() != fastjson.TypeString || string(status.GetStringBytes()) != bridge.StatusOK {
		return nil, false
	}
	var raw []byte
	if data != nil {
		raw = append([]byte(nil), data.MarshalTo(d.buf[:0])...)
	}
	return okResult(clientID, id, raw), true
}
