package jsoncmp

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"unicode/utf8"

	"github.com/bytedance/sonic"
	"github.com/reverbgo/reverbgo/pusher"
	"github.com/valyala/fastjson"
)

// Frame is what the server takes from one client frame before it acts: the envelope, and for
// pusher:subscribe / pusher:unsubscribe the decoded subscribe data. Every variant must produce
// the same Frame, or reject, for the same input (parity_test.go checks it).
type Frame struct {
	Event, Channel string
	Data           []byte // the raw data value (fastjson: its re-serialization, see FastjsonPusher)
	Sub            pusher.SubscribeData
}

// PusherDecoder decodes one client frame. A decoder is not safe for concurrent use (the
// fastjson one reuses its parsers), as a connection's reader is not.
type PusherDecoder interface {
	Decode(b []byte) (Frame, error)
}

var errMalformed = errors.New("invalid message format")

func isSubscribe(event string) bool {
	return event == "pusher:subscribe" || event == "pusher:unsubscribe"
}

// OursPusher is reverbgo's code: the exported decoders, fast path first, encoding/json behind it.
type OursPusher struct{}

func (OursPusher) Decode(b []byte) (Frame, error) {
	m, err := pusher.DecodeClientMessage(b)
	if err != nil {
		return Frame{}, err
	}
	f := Frame{Event: m.Event, Channel: m.Channel, Data: m.Data}
	if isSubscribe(m.Event) {
		if f.Sub, err = pusher.DecodeSubscribe(m.Data); err != nil {
			return Frame{}, err
		}
	}
	return f, nil
}

// unmarshaler is encoding/json's or sonic's Unmarshal.
type unmarshaler func([]byte, any) error

// reflectPusher is the decode DecodeClientMessage/DecodeSubscribe do without their fast path,
// with a struct-decoding library: the envelope, then the data object (unwrapped if a JSON string).
func reflectPusher(unmarshal unmarshaler, b []byte) (Frame, error) {
	var m pusher.ClientMessage
	if unmarshal(b, &m) != nil || m.Event == "" {
		return Frame{}, errMalformed
	}
	f := Frame{Event: m.Event, Channel: m.Channel, Data: m.Data}
	if !isSubscribe(m.Event) {
		return f, nil
	}
	d := bytes.TrimSpace(m.Data)
	if len(d) > 0 && d[0] == '"' {
		var s string
		if unmarshal(d, &s) != nil {
			return Frame{}, errMalformed
		}
		d = []byte(s)
	}
	if len(d) == 0 || d[0] != '{' || unmarshal(d, &f.Sub) != nil || f.Sub.Channel == "" {
		return Frame{}, errMalformed
	}
	return f, nil
}

// StdPusher is the reference: encoding/json only.
type StdPusher struct{}

func (StdPusher) Decode(b []byte) (Frame, error) { return reflectPusher(json.Unmarshal, b) }

// SonicPusher is the same decode with sonic's encoding/json-compatible configuration
// (case-insensitive keys, last duplicate wins, invalid UTF-8 in strings replaced). sonic also
// replaces invalid UTF-8 inside a json.RawMessage, which encoding/json keeps as sent, so a
// frame that is not valid UTF-8 goes to encoding/json (one utf8.Valid pass on every frame).
// sonic does not validate what it skips (an unknown key's string with a bad escape such as
// \0 is accepted when it is long enough for its SIMD skip; sonic.Valid accepts \0 too), so the
// frame is validated first with json.Valid, as reverbgo's own fast path does.
type SonicPusher struct{}

func (SonicPusher) Decode(b []byte) (Frame, error) {
	if !utf8.Valid(b) || !json.Valid(b) {
		return reflectPusher(json.Unmarshal, b)
	}
	return reflectPusher(sonic.ConfigStd.Unmarshal, b)
}

// FastjsonPusher decodes with valyala/fastjson, reusing its parsers, and reproduces
// encoding/json's semantics by hand: keys matched case-insensitively (the last one wins), null
// leaves a field empty, a non-string is an error, invalid UTF-8 becomes U+FFFD per byte.
// fastjson.Parse does not validate strings or numbers strictly, so the frame is validated
// first with json.Valid (fastjson.ValidateBytes accepts a raw control character inside a
// string, which encoding/json refuses: the parity case in inputs.go), a second pass.
// fastjson cannot return a value's original bytes: Data is its compact re-serialization,
// equal in value but not in formatting
// to what the others return (a relayed client event's non-string data would change spacing).
// fastjson keeps an invalid \u escape (a lone surrogate) as its six characters where
// encoding/json decodes U+FFFD, so a frame with a \uD... escape goes to encoding/json.
type FastjsonPusher struct {
	p, inner fastjson.Parser
	buf      []byte
}

func (d *FastjsonPusher) Decode(b []byte) (Frame, error) {
	if bytes.Contains(b, []byte(`\ud`)) || bytes.Contains(b, []byte(`\uD`)) {
		return reflectPusher(json.Unmarshal, b)
	}
	if !json.Valid(b) {
		return Frame{}, errMalformed
	}
	v, err := d.p.ParseBytes(b)
	if err != nil {
		return Frame{}, errMalformed
	}
	o, err := v.Object()
	if err != nil {
		return Frame{}, errMalformed
	}
	var f Frame
	var data *fastjson.Value
	bad := false
	o.Visit(func(k []byte, v *fastjson.Value) {
		switch {
		case foldEq(k, "event"):
			bad = bad || !setString(&f.Event, v)
		case foldEq(k, "channel"):
			bad = bad || !setString(&f.Channel, v)
		case foldEq(k, "data"):
			data = v
		}
	})
	if bad || f.Event == "" {
		return Frame{}, errMalformed
	}
	if data != nil {
		d.buf = data.MarshalTo(d.buf[:0])
		f.Data = append([]byte(nil), d.buf...)
	}
	if !isSubscribe(f.Event) {
		return f, nil
	}
	if data == nil {
		return Frame{}, errMalformed
	}
	if data.Type() == fastjson.TypeString {
		// Data sent as a JSON string: its content must itself be an object.
		s := data.GetStringBytes()
		if len(s) == 0 || s[0] != '{' || !json.Valid(s) {
			return Frame{}, errMalformed
		}
		if data, err = d.inner.ParseBytes(s); err != nil {
			return Frame{}, errMalformed
		}
	}
	so, err := data.Object()
	if err != nil {
		return Frame{}, errMalformed
	}
	so.Visit(func(k []byte, v *fastjson.Value) {
		switch {
		case foldEq(k, "channel"):
			bad = bad || !setString(&f.Sub.Channel, v)
		case foldEq(k, "auth"):
			bad = bad || !setString(&f.Sub.Auth, v)
		case foldEq(k, "channel_data"):
			bad = bad || !setString(&f.Sub.ChannelData, v)
		}
	})
	if bad || f.Sub.Channel == "" {
		return Frame{}, errMalformed
	}
	return f, nil
}

// foldEq matches a key as encoding/json matches a field name: exactly or case-insensitively.
func foldEq(k []byte, name string) bool {
	return string(k) == name || strings.EqualFold(string(k), name)
}

// setString stores a string value as encoding/json would; null leaves dst alone.
func setString(dst *string, v *fastjson.Value) bool {
	switch v.Type() {
	case fastjson.TypeNull:
		return true
	case fastjson.TypeString:
		*dst = validUTF8(v.GetStringBytes())
		return true
	}
	return false
}

// validUTF8 replaces each byte of an invalid UTF-8 sequence with U+FFFD, as encoding/json does.
func validUTF8(s []byte) string {
	if utf8.Valid(s) {
		return string(s)
	}
	var sb strings.Builder
	for len(s) > 0 {
		r, n := utf8.DecodeRune(s)
		if r == utf8.RuneError && n == 1 {
			sb.WriteRune(utf8.RuneError)
		} else {
			sb.Write(s[:n])
		}
		s = s[n:]
	}
	return sb.String()
}
