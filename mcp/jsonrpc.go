package mcp

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/reverbgo/reverbgo/bridge"
)

// The JSON-RPC envelope of a POST body, as ServeHTTP reads it before the SDK does (which
// request it is and its id, for the tool_use_id and a listen's notifications).

// singleRequest returns the method and id (as its JSON text) of a body that is one JSON-RPC
// request. Batches (protocol versions before 2025-06-18) are not looked into.
func singleRequest(body []byte) (method, id string, ok bool) {
	body = bytes.TrimLeft(body, " \t\r\n")
	if len(body) == 0 || body[0] != '{' {
		return "", "", false
	}
	if method, id, decided, ok := fastSingleRequest(body); decided {
		return method, id, ok
	}
	return decodeSingleRequest(body)
}

// decodeSingleRequest is singleRequest with encoding/json (the reference).
func decodeSingleRequest(body []byte) (method, id string, ok bool) {
	var m struct {
		Method string          `json:"method"`
		ID     json.RawMessage `json:"id"`
	}
	if json.Unmarshal(body, &m) != nil || m.Method == "" || len(m.ID) == 0 {
		return "", "", false
	}
	// m.ID is one valid JSON value: a string or a number is an id (null, objects... are not).
	if c := m.ID[0]; c != '"' && c != '-' && (c < '0' || c > '9') {
		return "", "", false
	}
	return m.Method, string(m.ID), true
}

// fastSingleRequest is singleRequest in one scan (bridge.ScanMembers) for the usual body:
// "method" a string without escapes, no duplicate or case-variant of "method" or "id"
// (encoding/json matches names case-insensitively, the last duplicate winning). decided is
// false for anything else, which the caller decodes with encoding/json.
func fastSingleRequest(body []byte) (method, id string, decided, ok bool) {
	var mv, iv []byte
	usual := true
	valid := bridge.ScanMembers(body, func(k, v []byte) bool {
		switch {
		case string(k) == "method" && mv == nil:
			mv = v
		case string(k) == "id" && iv == nil:
			iv = v
		case bytes.EqualFold(k, []byte("method")) || bytes.EqualFold(k, []byte("id")):
			usual = false
			return false
		}
		return true
	})
	if !valid || !usual || (mv != nil && (mv[0] != '"' || bytes.IndexByte(mv, '\\') >= 0)) {
		return "", "", false, false
	}
	// As the decoder: an absent or empty method, an absent id, or an id that is neither a
	// string nor a number is no request.
	if len(mv) <= 2 || iv == nil {
		return "", "", true, false
	}
	if c := iv[0]; c != '"' && c != '-' && (c < '0' || c > '9') {
		return "", "", true, false
	}
	return string(mv[1 : len(mv)-1]), string(iv), true, true
}

// idText is a JSON-RPC id as text: a string's value, a number's digits.
func idText(raw string) string {
	if len(raw) < 2 || raw[0] != '"' {
		return raw
	}
	if inner := raw[1 : len(raw)-1]; !strings.ContainsAny(inner, `\"`) {
		return inner // no escapes: the value is the text between the quotes
	}
	var str string
	if json.Unmarshal([]byte(raw), &str) == nil {
		return str
	}
	return raw
}

// toolsCallID returns the id of a body that is one JSON-RPC tools/call request, as text.
func toolsCallID(body []byte) (string, bool) {
	method, id, ok := singleRequest(body)
	if !ok || method != "tools/call" {
		return "", false
	}
	return idText(id), true
}
