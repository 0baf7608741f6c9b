//go:build unix

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"time"

	"github.com/reverbgo/reverbgo/bench/internal/benchkit"
	"github.com/reverbgo/reverbgo/internal/pusherclient"
)

// page is one simulated browser tab: one Pusher socket subscribed to its own
// private-toolmark.{user}.{conversation} channel, answering every call over HTTP.
type page struct {
	idx      int
	conv     string
	channel  string
	clientID string
	socketID string
	token    string // the page token from toolmark.session ("" with page_auth socket_id)
	conn     *pusherclient.Conn
	// mcp is the conversation's MCP session (--agent mcp), nil otherwise.
	mcp *benchkit.MCPSession
}

// toPage is the part of a toolmark.message event the page needs.
type toPage struct {
	Message struct {
		Type     string          `json:"type"`
		ClientID string          `json:"clientId"`
		ID       string          `json:"id"`
		Input    json.RawMessage `json:"input"`
	} `json:"message"`
}

// job is a call event waiting for its result POST.
type job struct {
	p     *page
	id    string
	input json.RawMessage
	recv  time.Duration // since run start
}

// connect opens the socket, subscribes with a private-channel signature and posts the
// manifest. Every wait is bounded by deadline.
func (r *runner) connect(ctx context.Context, p *page) error {
	deadline := time.Now().Add(15 * time.Second)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	dctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	c, err := pusherclient.DialWith(dctx, "ws://"+r.hostPort+r.cfg.Path, r.cfg.Key, pusherclient.Options{
		Client: "bridgebench", Version: "1.0", Query: "flash=false", Timeout: time.Until(deadline)})
	if err != nil {
		return fmt.Errorf("page %d: dial: %w", p.idx, err)
	}
	p.conn, p.socketID = c, c.ID
	// With toolmark.page_auth token (the default) the page token arrives as toolmark.session
	// just before subscription_succeeded; page POSTs carry it as X-Toolmark-Token.
	frames, err := c.Subscribe(pusherclient.App{ID: r.cfg.AppID, Key: r.cfg.Key, Secret: r.cfg.Secret}, p.channel, "")
	if err != nil {
		return fmt.Errorf("page %d: subscribe %s: %w", p.idx, p.channel, err)
	}
	for _, ev := range frames {
		if ev.Event == "toolmark.session" && ev.Channel == p.channel {
			var s struct {
				Token string `json:"token"`
			}
			if json.Unmarshal([]byte(ev.Str()), &s) != nil || s.Token == "" {
				return fmt.Errorf("page %d: bad toolmark.session %s", p.idx, ev.Data)
			}
			p.token = s.Token
		}
	}
	_ = c.WS.SetWriteDeadline(time.Time{})

	manifest, _ := json.Marshal(map[string]any{
		"protocol": 1, "type": "manifest", "clientId": p.clientID, "rev": 1,
		"tools": []map[string]any{{
			"name": toolName, "llmName": "bench_echo", "description": "Echoes its input (bridgebench).",
			"hints": map[string]any{"readOnly": true},
		}},
	})
	code, msg, err := r.pagePost(dctx, p, manifest)
	if err != nil {
		return fmt.Errorf("page %d: manifest: %w", p.idx, err)
	}
	if code != http.StatusNoContent {
		return fmt.Errorf("page %d: manifest: HTTP %d %s", p.idx, code, msg)
	}
	return nil
}

// pagePost sends one page message as @toolmark/core's echoTransport does.
func (r *runner) pagePost(ctx context.Context, p *page, body []byte) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.pageURLs[p.idx], bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	h := req.Header
	h["Content-Type"] = []string{"application/json"}
	h["Accept"] = []string{"application/json"}
	h["X-Requested-With"] = []string{"XMLHttpRequest"}
	h["X-Socket-Id"] = []string{p.socketID}
	if p.token != "" {
		h["X-Toolmark-Token"] = []string{p.token}
	}
	resp, err := r.pageClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	var msg []byte
	if resp.StatusCode != http.StatusNoContent {
		msg, _ = io.ReadAll(io.LimitReader(resp.Body, 512))
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	return resp.StatusCode, string(msg), nil
}

// readLoop turns call events into jobs until the socket closes. It never blocks on the job
// queue: the queue holds every call that can be in flight, so a full queue is an error.
func (r *runner) readLoop(p *page, jobs chan<- job) {
	for {
		_, b, err := p.conn.WS.ReadMessage()
		if err != nil {
			return
		}
		recv := time.Since(r.base)
		var ev pusherclient.Frame
		if json.Unmarshal(b, &ev) != nil {
			r.pageErr("bad_frame")
			continue
		}
		switch ev.Event {
		case "toolmark.message":
			var m toPage
			if json.Unmarshal([]byte(ev.Str()), &m) != nil {
				r.pageErr("bad_event")
				continue
			}
			switch m.Message.Type {
			case "call":
				if m.Message.ClientID != p.clientID {
					r.pageErr("wrong_client_id")
					continue
				}
				select {
				case jobs <- job{p: p, id: m.Message.ID, input: m.Message.Input, recv: recv}:
				default:
					r.pageErr("queue_full")
				}
			case "cancel":
				r.cancels.Add(1)
			default:
				r.pageErr("unexpected_" + m.Message.Type)
			}
		case "pusher:ping":
			_ = p.conn.Pong()
		case "pusher:error":
			r.pageErr("pusher_error")
		}
	}
}

// pageRec is the page's view of one call, for correlation with the agent's.
type pageRec struct {
	id                       string // the call id, or with --agent mcp the echoed input
	recv, postStart, postEnd time.Duration
	code                     int
}

// poster answers jobs: waits out the simulated tool time (think), then POSTs the result.
func (r *runner) poster(ctx context.Context, jobs <-chan job, out *[]pageRec) {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var buf []byte
	// got records which connection each POST used, to explain transport errors.
	var got struct {
		httptrace.GotConnInfo
		local string
	}
	trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
		got.GotConnInfo, got.local = info, info.Conn.LocalAddr().String()
	}}
	for {
		var j job
		select {
		case <-ctx.Done():
			return
		case <-r.stop:
			return
		case j = <-jobs:
		}
		if think := r.think(); think > 0 {
			if wait := j.recv + think - time.Since(r.base); wait > 0 {
				timer.Reset(wait)
				select {
				case <-ctx.Done():
					timer.Stop()
					return
				case <-r.stop:
					timer.Stop()
					return
				case <-timer.C:
				}
			}
		}
		input := j.input
		if len(input) == 0 {
			input = json.RawMessage("null")
		}
		buf = append(buf[:0], `{"protocol":1,"type":"result","clientId":`...)
		buf = strconv.AppendQuote(buf, j.p.clientID)
		buf = append(buf, `,"id":`...)
		buf = strconv.AppendQuote(buf, j.id)
		buf = append(buf, `,"result":{"status":"ok","data":`...)
		buf = append(buf, input...)
		buf = append(buf, "}}"...)
		start := time.Since(r.base)
		code, msg, err := r.pagePost(httptrace.WithClientTrace(ctx, trace), j.p, buf)
		end := time.Since(r.base)
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return
			}
			r.pageErr("post_transport")
			r.sample(fmt.Sprintf("page POST at %.3fs: %v (conn %s reused=%v idle=%v for %v)",
				start.Seconds(), err, got.local, got.Reused, got.WasIdle, got.IdleTime))
		case code != http.StatusNoContent:
			r.pageErr("post_http_" + strconv.Itoa(code))
			r.sample(fmt.Sprintf("page POST: HTTP %d %s", code, msg))
		}
		key := j.id
		if j.p.mcp != nil {
			key = string(input) // an MCP answer does not carry the call id: the agent knows its input
		}
		*out = append(*out, pageRec{id: key, recv: j.recv, postStart: start, postEnd: end, code: code})
	}
}

// think is the simulated tool time of one call: Think, spread uniformly by ±ThinkJitter.
func (r *runner) think() time.Duration {
	t := r.cfg.Think
	if t <= 0 || r.cfg.ThinkJitter <= 0 {
		return t
	}
	return time.Duration(float64(t) * (1 + r.cfg.ThinkJitter*(2*rand.Float64()-1)))
}

// pageErr counts one page-side problem by kind.
func (r *runner) pageErr(kind string) {
	r.mu.Lock()
	r.pageErrs[kind]++
	r.mu.Unlock()
}
