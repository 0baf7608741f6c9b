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
)

const soakUser = "soak-user"

// page is one tab of the Toolmark bridge: its socket on private-toolmark.{user}.{conv},
// answering every call by POSTing the input back as the result.
type page struct {
	c     *sock
	conv  string
	cid   string
	token string // from toolmark.session when the server sends one (page_auth: token)
}

// post sends a page message as @toolmark/core's echo transport does.
func (s *soak) post(ctx context.Context, p *page, msg any) (int, string, error) {
	b, _ := json.Marshal(msg)
	req, err := http.NewRequestWithContext(ctx, "POST", "http://"+s.addr+"/toolmark/bridge/"+p.conv, bytes.NewReader(b))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Socket-ID", p.c.ID)
	if p.token != "" {
		req.Header.Set("X-Toolmark-Token", p.token)
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, string(body), nil
}

// openPage connects, subscribes and posts the manifest.
func (s *soak) openPage(ctx context.Context, i int) (*page, error) {
	c, err := s.dial(ctx)
	if err != nil {
		return nil, err
	}
	p := &page{c: c, conv: fmt.Sprintf("conv-%d", i), cid: fmt.Sprintf("soak-client-%d", i)}
	frames, err := s.subscribe(c, "private-toolmark."+soakUser+"."+p.conv, "")
	if err != nil {
		return nil, err
	}
	for _, f := range frames {
		if f.Event == "toolmark.session" {
			var d struct {
				Token string `json:"token"`
			}
			_ = json.Unmarshal([]byte(f.Str()), &d)
			p.token = d.Token
		}
	}
	st, body, err := s.post(ctx, p, map[string]any{
		"protocol": 1, "type": "manifest", "clientId": p.cid, "rev": 1,
		"tools": []map[string]any{{"name": "soak.echo", "llmName": "soak_echo", "description": "Echoes its input.",
			"hints": map[string]any{"readOnly": true}}},
	})
	if err != nil || st != http.StatusNoContent {
		return nil, fmt.Errorf("manifest: %d %s %v", st, body, err)
	}
	return p, nil
}

// servePage answers calls until the socket ends.
func (s *soak) servePage(ctx context.Context, p *page, stop <-chan struct{}) {
	sub := &subscriber{c: p.c}
	s.listen(sub, "-", stop, func(ev event) {
		if ev.Event != "toolmark.message" {
			return
		}
		var m struct {
			Message struct {
				Type  string          `json:"type"`
				ID    string          `json:"id"`
				Input json.RawMessage `json:"input"`
			} `json:"message"`
		}
		if json.Unmarshal([]byte(ev.Str()), &m) != nil || m.Message.Type != "call" {
			return
		}
		go func() {
			st, body, err := s.post(ctx, p, map[string]any{"protocol": 1, "type": "result", "clientId": p.cid,
				"id": m.Message.ID, "result": map[string]any{"status": "ok", "data": m.Message.Input}})
			if (err != nil || st != http.StatusNoContent) && ctx.Err() == nil {
				s.sample("page result: %d %s %v", st, body, err)
			}
		}()
	})
}

// agent calls the page's tool in a loop through the signed app API; every call must come
// back "ok" with its own input.
func (s *soak) agent(ctx context.Context, p *page, pause time.Duration) {
	path := "/apps/" + s.appID + "/toolmark/calls"
	for seq := 1; ctx.Err() == nil; seq++ {
		in := `{"seq":` + strconv.Itoa(seq) + `}`
		body := []byte(`{"user_id":"` + soakUser + `","conversation_id":"` + p.conv + `","tool":"soak.echo","input":` + in + `,"timeout_ms":10000}`)
		st, b, err := s.api(ctx, "POST", path, body)
		if ctx.Err() != nil {
			return
		}
		var r struct {
			Result struct {
				Status string          `json:"status"`
				Data   json.RawMessage `json:"data"`
			} `json:"result"`
		}
		if err != nil || st != 200 || json.Unmarshal(b, &r) != nil || r.Result.Status != "ok" || string(r.Result.Data) != in {
			s.c.callFail.Add(1)
			s.sample("bridge call: %d %.200s %v", st, b, err)
		} else {
			s.c.callOK.Add(1)
		}
		sleepCtx(ctx, pause)
	}
}
