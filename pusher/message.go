package pusher

import (
	"bytes"
	"encoding/json"
	"errors"
)

// ClientMessage is one decoded frame from a client.
type ClientMessage struct {
	Event   string          `json:"event"`
	Channel string          `json:"channel"`
	Data    json.RawMessage `json:"data"`
}

// SubscribeData is the data of pusher:subscribe and pusher:unsubscribe.
type SubscribeData struct {
	Channel     string `json:"channel"`
	Auth        string `json:"auth"`
	ChannelData string `json:"channel_data"`
}

// SigninData is the data of pusher:signin.
type SigninData struct {
	Auth     string `json:"auth"`
	UserData string `json:"user_data"`
}

var errMalformed = errors.New("invalid message format")

// DecodeClientMessage parses one client frame. It never panics on arbitrary input.
func DecodeClientMessage(b []byte) (ClientMessage, error) {
	var m ClientMessage // on the stack: only the fallback's copy goes through encoding/json
	if !fastClientMessage(b, &m) {
		m = ClientMessage{}
		if err := unmarshalClientMessage(b, &m); err != nil {
			return m, errMalformed
		}
	}
	if m.Event == "" {
		return m, errMalformed
	}
	return m, nil
}

// unmarshalClientMessage is DecodeClientMessage's fallback; what encoding/json fills
// escapes to the heap, so it fills a copy of its own instead of the caller's value.
func unmarshalClientMessage(b []byte, m *ClientMessage) error {
	var v ClientMessage
	err := json.Unmarshal(b, &v)
	*m = v
	return err
}

// unmarshalSubscribe is DecodeSubscribe's fallback, for the same reason.
func unmarshalSubscribe(d []byte, s *SubscribeData) error {
	var v SubscribeData
	err := json.Unmarshal(d, &v)
	*s = v
	return err
}

// unwrapData returns data as JSON: Java and Flutter clients send the object as a JSON string.
func unwrapData(data json.RawMessage) (json.RawMessage, error) {
	d := bytes.TrimSpace(data)
	if len(d) > 0 && d[0] == '"' {
		var s string
		if err := json.Unmarshal(d, &s); err != nil {
			return nil, errMalformed
		}
		return json.RawMessage(s), nil
	}
	return d, nil
}

// DecodeSubscribe parses subscribe data given as an object or a JSON string.
func DecodeSubscribe(data json.RawMessage) (SubscribeData, error) {
	var s SubscribeData
	d, err := unwrapData(data)
	if err != nil || len(d) == 0 || d[0] != '{' {
		return s, errMalformed
	}
	if !fastSubscribe(d, &s) {
		s = SubscribeData{}
		if err := unmarshalSubscribe(d, &s); err != nil {
			return s, errMalformed
		}
	}
	if s.Channel == "" {
		return s, errMalformed
	}
	return s, nil
}

// DecodeSignin parses pusher:signin data.
func DecodeSignin(data json.RawMessage) (SigninData, error) {
	var s SigninData
	d, err := unwrapData(data)
	if err != nil || len(d) == 0 || d[0] != '{' {
		return s, errMalformed
	}
	if err := json.Unmarshal(d, &s); err != nil || s.Auth == "" || s.UserData == "" {
		return s, errMalformed
	}
	return s, nil
}

// clientEventData returns the data to relay for a client event as the JSON string Pusher sends:
// a JSON-string data is decoded first (Reverb v1.6.1), any other JSON value is passed as is.
func clientEventData(data json.RawMessage) string {
	d := bytes.TrimSpace(data)
	if len(d) == 0 {
		return "null"
	}
	if d[0] == '"' {
		var s string
		if json.Unmarshal(d, &s) == nil {
			return s
		}
	}
	return string(d)
}
