package benchkit

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/reverbgo/reverbgo/internal/pusherclient"
)

// The agent side of the load tools over reverbgo's MCP endpoint ({server.path}/toolmark/mcp):
// a minimal Streamable HTTP client of one session (protocol 2025-11-25, as the Go SDK's client
// speaks it when asked for that version), so that a benchmark measures the server's cost of
// tools/call and not an SDK client's. It sends what the SDK's client sends (POST of one
// JSON-RPC message, Accept of JSON and SSE, Mcp-Session-Id and Mcp-Protocol-Version after
// initialize) and reads either answer form (application/json, or an SSE stream whose first
// response is the answer).

// MCPProtocol is the protocol revision MCPConnect negotiates.
const MCPProtocol = "2025-11-25"

// MCPToken is an HS256 token of app for user's conversation conv with aud resource, valid
// for ttl: what an app mints for its agent (mcp/auth.go has the rules).
func MCPToken(app pusherclient.App, user, conv, resource string, ttl time.Duration) (string, error) {
	now := time.Now()
	return jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"iss": app.Key, "sub": user, "conversation_id": conv, "aud": resource,
		"iat": now.Unix(), "exp": now.Add(ttl).Unix(),
	}).SignedString([]byte(app.Secret))
}

// MCPSession is one initialized MCP session. Calls may come from any goroutine.
type MCPSession struct {
	hc     *http.Client
	url    string
	auth   []string // the Authorization header value
	id     []string // the Mcp-Session-Id header value
	nextID atomic.Int64
}

var (
	mcpAccept      = []string{"application/json, text/event-stream"}
	mcpContentType = []string{"application/json"}
	mcpVersion     = []string{MCPProtocol}
)

// MCPConnect initializes a session at url (the endpoint's full URL) with token.
func MCPConnect(ctx context.Context, hc *http.Client, url, token string) (*MCPSession, error) {
	s := &MCPSession{hc: hc, url: url, auth: []string{"Bearer " + token}}
	init := `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"` + MCPProtocol +
		`","capabilities":{},"clientInfo":{"name":"benchkit","version":"1"}}}`
	code, h, body, err := s.post(ctx, []byte(init), nil)
	if err != nil {
		return nil, fmt.Errorf("mcp initialize: %w", err)
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("mcp initialize: HTTP %d %.200s", code, body)
	}
	sid := h.Get("Mcp-Session-Id")
	if sid == "" {
		return nil, errors.New("mcp initialize: no Mcp-Session-Id")
	}
	var r struct {
		Result struct {
			ProtocolVersion string `json:"protocolVersion"`
		} `json:"result"`
	}
	if msg, err := firstResponse(h, body); err != nil || json.Unmarshal(msg, &r) != nil || r.Result.ProtocolVersion != MCPProtocol {
		return nil, fmt.Errorf("mcp initialize: bad answer %.200s", body)
	}
	s.id = []string{sid}
	code, _, body, err = s.post(ctx, []byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`), nil)
	if err != nil || code != http.StatusAccepted {
		return nil, fmt.Errorf("mcp initialized: HTTP %d %v %.200s", code, err, body)
	}
	s.nextID.Store(1)
	return s, nil
}

// ID is the session's Mcp-Session-Id.
func (s *MCPSession) ID() string { return s.id[0] }

// CallTool sends tools/call of tool with arguments (a JSON object) and returns the JSON-RPC
// response (one message), the HTTP status, and buf (reusable, grown) holding the request.
func (s *MCPSession) CallTool(ctx context.Context, tool string, arguments []byte, buf []byte) (resp []byte, code int, _ []byte, err error) {
	buf = append(buf[:0], `{"jsonrpc":"2.0","id":`...)
	buf = strconv.AppendInt(buf, s.nextID.Add(1), 10)
	buf = append(buf, `,"method":"tools/call","params":{"name":`...)
	buf = strconv.AppendQuote(buf, tool)
	buf = append(buf, `,"arguments":`...)
	buf = append(buf, arguments...)
	buf = append(buf, "}}"...)
	code, h, body, err := s.post(ctx, buf, s.id)
	if err != nil || code != http.StatusOK {
		return body, code, buf, err
	}
	resp, err = firstResponse(h, body)
	return resp, code, buf, err
}

// Close ends the session (DELETE).
func (s *MCPSession) Close(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, s.url, nil)
	if err != nil {
		return err
	}
	req.Header["Authorization"] = s.auth
	req.Header["Mcp-Session-Id"] = s.id
	req.Header["Mcp-Protocol-Version"] = mcpVersion
	resp, err := s.hc.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.Body.Close()
}

func (s *MCPSession) post(ctx context.Context, body []byte, sid []string) (int, http.Header, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, nil, err
	}
	h := req.Header
	h["Content-Type"] = mcpContentType
	h["Accept"] = mcpAccept
	h["Authorization"] = s.auth
	if sid != nil {
		h["Mcp-Session-Id"] = sid
		h["Mcp-Protocol-Version"] = mcpVersion
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	return resp.StatusCode, resp.Header, b, err
}

// firstResponse is the JSON-RPC response of an answer: the body itself (application/json),
// or the data of the first SSE event that is a response (has a result or an error).
func firstResponse(h http.Header, body []byte) ([]byte, error) {
	ct := h.Get("Content-Type")
	if len(ct) >= 16 && ct[:16] == "application/json" {
		return body, nil
	}
	if len(ct) < 17 || ct[:17] != "text/event-stream" {
		return nil, fmt.Errorf("answer of type %q", ct)
	}
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(nil, len(body)+1)
	var data []byte
	for sc.Scan() {
		line := sc.Bytes()
		switch {
		case bytes.HasPrefix(line, []byte("data:")):
			d := bytes.TrimPrefix(bytes.TrimPrefix(line, []byte("data:")), []byte(" "))
			if data != nil {
				data = append(data, '\n')
			}
			data = append(data, d...)
		case len(line) == 0 && data != nil:
			if isResponse(data) {
				return data, nil
			}
			data = nil
		}
	}
	if data != nil && isResponse(data) {
		return data, nil
	}
	return nil, errors.New("no response in the event stream")
}

func isResponse(msg []byte) bool {
	var m struct {
		ID     json.RawMessage `json:"id"`
		Result json.RawMessage `json:"result"`
		Error  json.RawMessage `json:"error"`
	}
	return json.Unmarshal(msg, &m) == nil && len(m.ID) > 0 && (m.Result != nil || m.Error != nil)
}

// MCPToolResult is the part of a tools/call response the load tools check: the bridge's
// ToolResult (structuredContent) and whether MCP marked it an error.
type MCPToolResult struct {
	Status  string          `json:"status"`
	Data    json.RawMessage `json:"data"`
	Message string          `json:"message"`
	IsError bool            `json:"-"`
	RPCErr  string          `json:"-"` // a JSON-RPC error's message
}

// DecodeMCPToolResult decodes a tools/call response.
func DecodeMCPToolResult(resp []byte) (MCPToolResult, error) {
	var m struct {
		Result *struct {
			StructuredContent MCPToolResult `json:"structuredContent"`
			IsError           bool          `json:"isError"`
		} `json:"result"`
		Error *struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(resp, &m); err != nil {
		return MCPToolResult{}, err
	}
	switch {
	case m.Error != nil:
		return MCPToolResult{RPCErr: m.Error.Message}, nil
	case m.Result == nil:
		return MCPToolResult{}, errors.New("neither result nor error")
	}
	r := m.Result.StructuredContent
	r.IsError = m.Result.IsError
	return r, nil
}
