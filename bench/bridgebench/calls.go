//go:build unix

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/reverbgo/reverbgo/auth"
)

// The agent over the calls API (--agent calls, the default): one signed
// POST /apps/{id}/toolmark/calls per call, correlated by the call id it returns.

// callResponse is the agent's answer.
type callResponse struct {
	ID     string `json:"id"`
	Result struct {
		Status  string          `json:"status"`
		Data    json.RawMessage `json:"data"`
		Message string          `json:"message"`
	} `json:"result"`
}

// call makes one signed agent call and checks the echo. body is a reusable buffer.
func (r *runner) call(ctx context.Context, p *page, idx int64, body []byte) ([]byte, agentRec) {
	var input [32]byte
	in := append(strconv.AppendInt(append(input[:0], `{"seq":`...), idx, 10), '}')
	body = append(body[:0], `{"user_id":`...)
	body = strconv.AppendQuote(body, r.cfg.User)
	body = append(body, `,"conversation_id":`...)
	body = strconv.AppendQuote(body, p.conv)
	body = append(body, `,"tool":"`+toolName+`","input":`...)
	body = append(body, in...)
	body = append(body, `,"tool_use_id":"tu-`...)
	body = strconv.AppendInt(body, idx, 10)
	body = append(body, `","timeout_ms":`...)
	body = strconv.AppendInt(body, r.cfg.CallTimeout.Milliseconds(), 10)
	body = append(body, '}')

	rec := agentRec{start: time.Since(r.base)}
	q := auth.SignRequest(http.MethodPost, r.agentPath, nil, body, r.cfg.Key, r.cfg.Secret, time.Now())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.agentURL+"?"+q.Encode(), bytes.NewReader(body))
	if err != nil {
		r.agentErr("request")
		return body, rec
	}
	req.Header["Content-Type"] = []string{"application/json"}
	resp, err := r.agentHTTP.Do(req)
	if err != nil {
		rec.end = time.Since(r.base)
		if ctx.Err() == nil {
			r.agentErr("transport")
			r.sample("agent: " + err.Error())
		} else {
			r.agentErr("cancelled")
		}
		return body, rec
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	rec.end = time.Since(r.base)
	if err != nil {
		r.agentErr("transport")
		return body, rec
	}
	if resp.StatusCode != http.StatusOK {
		r.agentErr("http_" + strconv.Itoa(resp.StatusCode))
		r.sample(fmt.Sprintf("agent: HTTP %d %.200s", resp.StatusCode, raw))
		return body, rec
	}
	var cr callResponse
	if err := json.Unmarshal(raw, &cr); err != nil {
		r.agentErr("bad_response")
		r.sample(fmt.Sprintf("agent: %.200s", raw))
		return body, rec
	}
	rec.id = cr.ID
	switch {
	case cr.Result.Status != "ok":
		r.agentErr("result_" + cr.Result.Status)
		r.sample(fmt.Sprintf("agent: result %s %s", cr.Result.Status, cr.Result.Message))
	case !bytes.Equal(cr.Result.Data, in):
		r.agentErr("echo_mismatch")
		r.sample(fmt.Sprintf("agent: sent %s got %s", in, cr.Result.Data))
	default:
		rec.ok = true
	}
	return body, rec
}
