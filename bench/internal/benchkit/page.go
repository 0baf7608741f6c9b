package benchkit

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"

	"github.com/reverbgo/reverbgo/internal/pusherclient"
)

// The Toolmark page side of the load tools: what a page posts and what it reads.

// PostPage sends a page message to addr's /toolmark/bridge/{conv} as @toolmark/core's
// transport does (X-Socket-ID, and X-Toolmark-Token when the server sent one), and returns
// the status and (up to 4 KiB of) the body.
func PostPage(ctx context.Context, hc *http.Client, addr, conv, socketID, token string, msg any) (int, string, error) {
	b, _ := json.Marshal(msg)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/toolmark/bridge/"+conv, bytes.NewReader(b))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Socket-ID", socketID)
	if token != "" {
		req.Header.Set("X-Toolmark-Token", token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, string(body), nil
}

// EchoManifest is a manifest (rev 1) of one read-only tool that echoes its input.
func EchoManifest(clientID, tool string) map[string]any {
	return map[string]any{
		"protocol": 1, "type": "manifest", "clientId": clientID, "rev": 1,
		"tools": []map[string]any{{"name": tool, "llmName": llmName(tool), "description": "Echoes its input.",
			"hints": map[string]any{"readOnly": true}}},
	}
}

func llmName(tool string) string {
	b := []byte(tool)
	for i, c := range b {
		if c == '.' {
			b[i] = '_'
		}
	}
	return string(b)
}

// SessionToken is the page token of a toolmark.session frame.
func SessionToken(f pusherclient.Frame) (string, bool) {
	if f.Event != "toolmark.session" {
		return "", false
	}
	var d struct {
		Token string `json:"token"`
	}
	_ = json.Unmarshal([]byte(f.Str()), &d)
	return d.Token, true
}

// Call is the id and input of a toolmark.message frame carrying a call.
func Call(f pusherclient.Frame) (id string, input json.RawMessage, ok bool) {
	if f.Event != "toolmark.message" {
		return "", nil, false
	}
	var m struct {
		Message struct {
			Type  string          `json:"type"`
			ID    string          `json:"id"`
			Input json.RawMessage `json:"input"`
		} `json:"message"`
	}
	if json.Unmarshal([]byte(f.Str()), &m) != nil || m.Message.Type != "call" {
		return "", nil, false
	}
	return m.Message.ID, m.Message.Input, true
}

// OKResult is the page's "ok" result of call id with data.
func OKResult(clientID, id string, data json.RawMessage) map[string]any {
	return map[string]any{"protocol": 1, "type": "result", "clientId": clientID,
		"id": id, "result": map[string]any{"status": "ok", "data": data}}
}

// EchoCall is the body of a calls API request for an echo tool with input {"seq":N} and
// the input itself, which the result's data must equal.
func EchoCall(user, conv, tool string, seq, timeoutMS int) (body []byte, input string) {
	in := `{"seq":` + strconv.Itoa(seq) + `}`
	return []byte(`{"user_id":"` + user + `","conversation_id":"` + conv + `","tool":"` + tool + `","input":` + in +
		`,"timeout_ms":` + strconv.Itoa(timeoutMS) + `}`), in
}

// EchoedOK reports whether a calls API answer is an "ok" result whose data is input.
func EchoedOK(status int, body []byte, input string) bool {
	var r struct {
		Result struct {
			Status string          `json:"status"`
			Data   json.RawMessage `json:"data"`
		} `json:"result"`
	}
	return status == http.StatusOK && json.Unmarshal(body, &r) == nil && r.Result.Status == "ok" && string(r.Result.Data) == input
}
