package bridge

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"unicode/utf8"
)

// This file is the strict decoder for page-to-server messages and the validator for
// server-to-page messages. It is hand-written (no reflection-driven struct decoding) because the
// protocol's strictness is per object: envelopes, ToolResults and issues reject unknown keys,
// manifest entries and hints tolerate them. It agrees with the protocol's own fixtures
// (testdata/fixtures) and additionally enforces the id pattern of MUST 7.

// obj is a JSON object split into raw members.
type obj map[string]json.RawMessage

// CheckDepth reports an error when b nests arrays/objects deeper than max. It scans the raw
// bytes (skipping strings) so it runs before, and protects, json.Unmarshal.
func CheckDepth(b []byte, max int) error {
	depth, inString, escaped := 0, false, false
	for _, c := range b {
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '[', '{':
			depth++
			if depth > max {
				return protoErr("nesting deeper than %d", max)
			}
		case ']', '}':
			depth--
		}
	}
	return nil
}

// parseObject checks depth, UTF-8 and syntax, then splits a top-level object.
func parseObject(b []byte) (obj, error) {
	if err := CheckDepth(b, MaxDepth); err != nil {
		return nil, err
	}
	if !utf8.Valid(b) {
		return nil, protoErr("message is not valid UTF-8")
	}
	if !json.Valid(b) {
		return nil, protoErr("message is not valid JSON")
	}
	return asObject(b, "message")
}

// kind classifies a raw JSON value by its first byte: o a s n b z(null).
func kind(raw json.RawMessage) byte {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	if len(raw) == 0 {
		return 0
	}
	switch raw[0] {
	case '{':
		return 'o'
	case '[':
		return 'a'
	case '"':
		return 's'
	case 't', 'f':
		return 'b'
	case 'n':
		return 'z'
	default:
		return 'n'
	}
}

func asObject(raw json.RawMessage, where string) (obj, error) {
	if kind(raw) != 'o' {
		return nil, protoErr("%s must be an object", where)
	}
	var o obj
	if err := json.Unmarshal(raw, &o); err != nil {
		return nil, protoErr("%s must be an object", where)
	}
	return o, nil
}

func asString(raw json.RawMessage, where string) (string, error) {
	var s string
	if kind(raw) != 's' || json.Unmarshal(raw, &s) != nil {
		return "", protoErr("%s must be a string", where)
	}
	return s, nil
}

func asBool(raw json.RawMessage, where string) (bool, error) {
	var v bool
	if kind(raw) != 'b' || json.Unmarshal(raw, &v) != nil {
		return false, protoErr("%s must be a boolean", where)
	}
	return v, nil
}

// maxSafeInt is JavaScript's Number.MAX_SAFE_INTEGER: revs come from JS pages.
const maxSafeInt = 1<<53 - 1

// asRev accepts what JS's Number.isInteger(v) && v >= 0 accepts (so 1.0 and 1e2 too).
func asRev(raw json.RawMessage, where string) (int64, error) {
	if kind(raw) != 'n' {
		return 0, protoErr("%s must be an integer >= 0", where)
	}
	f, err := strconv.ParseFloat(string(bytes.TrimSpace(raw)), 64)
	if err != nil || f != math.Trunc(f) || f < 0 || f > maxSafeInt {
		return 0, protoErr("%s must be an integer >= 0", where)
	}
	return int64(f), nil
}

func asID(raw json.RawMessage, where string) (string, error) {
	s, err := asString(raw, where)
	if err != nil {
		return "", err
	}
	if !ValidID(s) {
		return "", protoErr("%s must match ^[A-Za-z0-9_-]{1,128}$", where)
	}
	return s, nil
}

// only rejects keys outside allowed: the strict objects of the protocol.
func (o obj) only(where string, allowed ...string) error {
	for k := range o {
		found := false
		for _, a := range allowed {
			if k == a {
				found = true
				break
			}
		}
		if !found {
			return protoErr("%s: unexpected property %q", where, k)
		}
	}
	return nil
}

func (o obj) need(where string, keys ...string) error {
	for _, k := range keys {
		if _, ok := o[k]; !ok {
			return protoErr("%s: missing %q", where, k)
		}
	}
	return nil
}

// envelope checks protocol, type and clientId, common to both directions.
func envelope(o obj) (typ, clientID string, err error) {
	p, ok := o["protocol"]
	if !ok {
		return "", "", protoErr("missing \"protocol\"")
	}
	if f, perr := strconv.ParseFloat(string(bytes.TrimSpace(p)), 64); kind(p) != 'n' || perr != nil || f != ProtocolVersion {
		return "", "", protoErr("unsupported protocol")
	}
	t, ok := o["type"]
	if !ok {
		return "", "", protoErr("missing \"type\"")
	}
	if typ, err = asString(t, "type"); err != nil {
		return "", "", err
	}
	c, ok := o["clientId"]
	if !ok {
		return "", "", protoErr("%s: missing \"clientId\"", typ)
	}
	clientID, err = asID(c, "clientId")
	return typ, clientID, err
}

// DecodePageMessage strictly decodes one page-to-server message. Every error is a
// *ProtocolError (HTTP 422).
func DecodePageMessage(b []byte) (*PageMessage, error) {
	if m, ok := fastDecodeResult(b); ok {
		return m, nil
	}
	return decodePageMessage(b)
}

// decodePageMessage is the reference decoder for every page message.
func decodePageMessage(b []byte) (*PageMessage, error) {
	o, err := parseObject(b)
	if err != nil {
		return nil, err
	}
	typ, clientID, err := envelope(o)
	if err != nil {
		return nil, err
	}
	m := &PageMessage{Type: typ, ClientID: clientID}
	base := []string{"protocol", "type", "clientId"}
	switch typ {
	case TypeManifest:
		if err = o.need(typ, "rev", "tools"); err == nil {
			err = o.only(typ, append(base, "rev", "tools")...)
		}
		if err == nil {
			m.Rev, err = asRev(o["rev"], "rev")
		}
		if err == nil {
			m.Tools, err = decodeTools(o["tools"])
		}
	case TypeChanged:
		if err = o.need(typ, "rev"); err == nil {
			err = o.only(typ, append(base, "rev")...)
		}
		if err == nil {
			m.Rev, err = asRev(o["rev"], "rev")
		}
	case TypeResult, TypeConfirmed:
		idKey := "id"
		if typ == TypeConfirmed {
			idKey = "confirmId"
		}
		if err = o.need(typ, idKey, "result"); err == nil {
			err = o.only(typ, append(base, idKey, "result")...)
		}
		var id string
		if err == nil {
			id, err = asID(o[idKey], idKey)
		}
		if typ == TypeResult {
			m.ID = id
		} else {
			m.ConfirmID = id
		}
		if err == nil {
			m.Result, m.Status, m.ResultConfirmID, err = decodeToolResult(o["result"])
		}
	default:
		return nil, protoErr("unknown message type %q", typ)
	}
	if err != nil {
		return nil, err
	}
	return m, nil
}

// decodeToolResult validates a strict ToolResult variant and returns it re-encoded with sorted,
// de-duplicated keys, so what reaches the agent is exactly what was validated.
func decodeToolResult(raw json.RawMessage) (json.RawMessage, string, string, error) {
	o, err := asObject(raw, "result")
	if err != nil {
		return nil, "", "", err
	}
	st, ok := o["status"]
	if !ok {
		return nil, "", "", protoErr("result has an unknown status")
	}
	status, err := asString(st, "result.status")
	if err != nil {
		return nil, "", "", protoErr("result has an unknown status")
	}
	var confirmID string
	switch status {
	case StatusOK:
		err = o.only("result", "status", "data")
	case StatusInvalid:
		if err = o.need("result", "issues"); err == nil {
			err = o.only("result", "status", "issues")
		}
		if err == nil {
			err = eachItem(o["issues"], "result.issues", func(item json.RawMessage) error {
				io, err := asObject(item, "issue")
				if err == nil {
					err = io.need("issue", "path", "message")
				}
				if err == nil {
					err = io.only("issue", "path", "message")
				}
				if err == nil {
					_, err = asString(io["path"], "issue.path")
				}
				if err == nil {
					_, err = asString(io["message"], "issue.message")
				}
				return err
			})
		}
	case StatusRefused:
		if err = o.need("result", "code", "message"); err == nil {
			err = o.only("result", "status", "code", "message", "rev")
		}
		if err == nil {
			_, err = asString(o["code"], "result.code")
		}
		if err == nil {
			_, err = asString(o["message"], "result.message")
		}
		if r, has := o["rev"]; err == nil && has {
			_, err = asRev(r, "result.rev")
		}
	case StatusNeedsConfirmation:
		if err = o.need("result", "confirmId", "summary"); err == nil {
			err = o.only("result", "status", "confirmId", "summary", "changes")
		}
		if err == nil {
			confirmID, err = asID(o["confirmId"], "result.confirmId")
		}
		if err == nil {
			_, err = asString(o["summary"], "result.summary")
		}
		if c, has := o["changes"]; err == nil && has {
			err = eachItem(c, "result.changes", func(item json.RawMessage) error {
				co, err := asObject(item, "change")
				if err == nil {
					err = co.need("change", "path")
				}
				if err == nil {
					err = co.only("change", "path", "before", "after")
				}
				if err == nil {
					_, err = asString(co["path"], "change.path")
				}
				return err
			})
		}
	case StatusCancelled:
		if err = o.need("result", "by"); err == nil {
			err = o.only("result", "status", "by")
		}
		if err == nil {
			var by string
			by, err = asString(o["by"], "result.by")
			if err == nil && by != "operator" && by != "signal" && by != "policy" {
				err = protoErr("result.by is invalid")
			}
		}
	case StatusError:
		if err = o.need("result", "message"); err == nil {
			err = o.only("result", "status", "message")
		}
		if err == nil {
			_, err = asString(o["message"], "result.message")
		}
	default:
		return nil, "", "", protoErr("result has an unknown status")
	}
	if err != nil {
		return nil, "", "", err
	}
	canon, err := json.Marshal(o) // map keys sorted; RawMessage values compacted
	if err != nil {
		return nil, "", "", protoErr("result is not valid JSON")
	}
	return canon, status, confirmID, nil
}

func eachItem(raw json.RawMessage, where string, f func(json.RawMessage) error) error {
	if kind(raw) != 'a' {
		return protoErr("%s must be an array", where)
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return protoErr("%s must be an array", where)
	}
	for _, it := range items {
		if err := f(it); err != nil {
			return err
		}
	}
	return nil
}

// decodeTools validates manifest entries, keeping only known fields and known hints.
func decodeTools(raw json.RawMessage) ([]Tool, error) {
	tools := []Tool{}
	err := eachItem(raw, "tools", func(item json.RawMessage) error {
		if len(tools) >= MaxTools {
			return protoErr("more than %d tools", MaxTools)
		}
		o, err := asObject(item, "tool")
		if err != nil {
			return err
		}
		if err := o.need("tool", "name", "llmName", "description", "hints"); err != nil {
			return err
		}
		var t Tool
		if t.Name, err = asString(o["name"], "tool.name"); err != nil {
			return err
		}
		if !ValidToolName(t.Name) {
			return protoErr("tool.name must match ^[A-Za-z0-9_.-]{1,128}$")
		}
		if t.LLMName, err = asString(o["llmName"], "tool.llmName"); err != nil {
			return err
		}
		if !validLLMName(t.LLMName) {
			return protoErr("tool.llmName must match ^[a-zA-Z0-9_-]{1,64}$")
		}
		if t.Description, err = asString(o["description"], "tool.description"); err != nil {
			return err
		}
		if utf8.RuneCountInString(t.Description) > MaxTextLen {
			return protoErr("tool.description longer than %d characters", MaxTextLen)
		}
		if raw, ok := o["title"]; ok {
			title, err := asString(raw, "tool.title")
			if err != nil {
				return err
			}
			if utf8.RuneCountInString(title) > MaxTextLen {
				return protoErr("tool.title longer than %d characters", MaxTextLen)
			}
			t.Title = &title
		}
		if raw, ok := o["mode"]; ok {
			if t.Mode, err = asString(raw, "tool.mode"); err != nil || t.Mode != "stepwise" {
				return protoErr("tool.mode must be \"stepwise\"")
			}
		}
		t.Hints, err = decodeHints(o["hints"])
		if err != nil {
			return err
		}
		tools = append(tools, t)
		return nil
	})
	return tools, err
}

func decodeHints(raw json.RawMessage) (Hints, error) {
	var h Hints
	o, err := asObject(raw, "tool.hints")
	if err != nil {
		return h, err
	}
	for key, dst := range map[string]**bool{
		"readOnly": &h.ReadOnly, "consequential": &h.Consequential,
		"destructive": &h.Destructive, "untrustedContent": &h.UntrustedContent,
	} {
		if raw, ok := o[key]; ok {
			v, err := asBool(raw, "tool.hints."+key)
			if err != nil {
				return h, err
			}
			*dst = &v
		}
	}
	return h, nil
}

// ValidateToPage checks a server-to-page message (call, describe, cancel) with the protocol's
// strictness plus the id and tool-name patterns. The encoders are valid by construction; the
// tests run it on their output.
func ValidateToPage(b []byte) error {
	o, err := parseObject(b)
	if err != nil {
		return err
	}
	typ, _, err := envelope(o)
	if err != nil {
		return err
	}
	base := []string{"protocol", "type", "clientId"}
	switch typ {
	case TypeCall:
		if err = o.need(typ, "id", "tool", "input"); err == nil {
			err = o.only(typ, append(base, "id", "rev", "tool", "input")...)
		}
		if r, has := o["rev"]; err == nil && has {
			_, err = asRev(r, "rev")
		}
	case TypeDescribe:
		if err = o.need(typ, "id", "tool"); err == nil {
			err = o.only(typ, append(base, "id", "tool")...)
		}
	case TypeCancel:
		if err = o.need(typ, "id"); err == nil {
			err = o.only(typ, append(base, "id")...)
		}
	default:
		return protoErr("unknown message type %q", typ)
	}
	if err == nil {
		_, err = asID(o["id"], "id")
	}
	if t, has := o["tool"]; err == nil && has {
		var name string
		if name, err = asString(t, "tool"); err == nil && !ValidToolName(name) {
			err = protoErr("tool must match ^[A-Za-z0-9_.-]{1,128}$")
		}
	}
	return err
}

// EncodeCall builds a call message; input nil means JSON null (input is required). It checks
// its arguments and then appends the message directly (appendToPage) instead of marshalling and
// re-validating it: TestEncoderMatchesValidator checks the output against ValidateToPage.
func EncodeCall(clientID, id, tool string, rev *int64, input json.RawMessage) ([]byte, error) {
	if err := checkToPage(clientID, id, tool, true); err != nil {
		return nil, err
	}
	if rev != nil && (*rev < 0 || *rev > maxSafeInt) {
		return nil, protoErr("rev must be an integer >= 0")
	}
	if len(bytes.TrimSpace(input)) > 0 {
		if !json.Valid(input) {
			return nil, protoErr("cannot encode call: input is not valid JSON")
		}
		if CheckDepth(input, MaxDepth-1) != nil { // the message adds one level
			return nil, protoErr("nesting deeper than %d", MaxDepth)
		}
	}
	return appendToPage(nil, TypeCall, clientID, id, rev, tool, input), nil
}

// EncodeDescribe builds a describe message.
func EncodeDescribe(clientID, id, tool string) ([]byte, error) {
	if err := checkToPage(clientID, id, tool, true); err != nil {
		return nil, err
	}
	return appendToPage(nil, TypeDescribe, clientID, id, nil, tool, nil), nil
}

// EncodeCancel builds a cancel message.
func EncodeCancel(clientID, id string) ([]byte, error) {
	if err := checkToPage(clientID, id, "", false); err != nil {
		return nil, err
	}
	return appendToPage(nil, TypeCancel, clientID, id, nil, "", nil), nil
}

// checkToPage checks the strings of a server-to-page message: these patterns are also what make
// them safe to append without JSON escaping.
func checkToPage(clientID, id, tool string, hasTool bool) error {
	switch {
	case !ValidID(clientID):
		return protoErr("clientId must match ^[A-Za-z0-9_-]{1,128}$")
	case !ValidID(id):
		return protoErr("id must match ^[A-Za-z0-9_-]{1,128}$")
	case hasTool && !ValidToolName(tool):
		return protoErr("tool must match ^[A-Za-z0-9_.-]{1,128}$")
	}
	return nil
}

// EventData wraps a message as the Pusher event payload {"message": ...}.
func EventData(msg []byte) []byte {
	out := make([]byte, 0, len(msg)+12)
	out = append(out, `{"message":`...)
	out = append(out, msg...)
	return append(out, '}')
}
