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
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/reverbgo/reverbgo/auth"
	"github.com/reverbgo/reverbgo/bench/internal/benchkit"
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
	ws       *websocket.Conn
	wmu      sync.Mutex // websocket writes (subscribe, pong)
	// mcp is the conversation's MCP session (--agent mcp), nil otherwise.
	mcp *benchkit.MCPSession
}

// wsEvent is a Pusher frame; data is a JSON string for every event the bench reads.
type wsEvent struct {
	Event   string          `json:"event"`
	Channel string          `json:"channel"`
	Data    json.RawMessage `json:"data"`
}

// dataString unquotes a Pusher data field sent as a JSON string (or returns it raw).
func (e *wsEvent) dataString() string {
	var s string
	if json.Unmarshal(e.Data, &s) == nil {
		return s
	}
	return string(e.Data)
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
	u := url.URL{Scheme: "ws", Host: r.hostPort, Path: r.cfg.Path + "/app/" + r.cfg.Key,
		RawQuery: "protocol=7&client=bridgebench&version=1.0&flash=false"}
	dialer := websocket.Dialer{HandshakeTimeout: 10 * time.Second, ReadBufferSize: 4096, WriteBufferSize: 1024}
	dctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	ws, resp, err := dialer.DialContext(dctx, u.String(), nil)
	if resp != nil && resp.Body != nil {
		resp.Body.Close()
	}
	if err != nil {
		return fmt.Errorf("page %d: dial: %w", p.idx, err)
	}
	p.ws = ws
	_ = ws.SetReadDeadline(deadline)
	ev, err := readUntil(ws, "pusher:connection_established", "", 10)
	if err != nil {
		return fmt.Errorf("page %d: %w", p.idx, err)
	}
	var est struct {
		SocketID string `json:"socket_id"`
	}
	if err := json.Unmarshal([]byte(ev.dataString()), &est); err != nil || est.SocketID == "" {
		return fmt.Errorf("page %d: bad connection_established %s", p.idx, ev.Data)
	}
	p.socketID = est.SocketID
	sig := auth.ChannelSignature(r.cfg.Secret, p.socketID, p.channel)
	sub, _ := json.Marshal(map[string]any{"event": "pusher:subscribe",
		"data": map[string]string{"channel": p.channel, "auth": r.cfg.Key + ":" + sig}})
	_ = ws.SetWriteDeadline(deadline)
	if err := ws.WriteMessage(websocket.TextMessage, sub); err != nil {
		return fmt.Errorf("page %d: subscribe: %w", p.idx, err)
	}
	// With toolmark.page_auth token (the default) the page token arrives as toolmark.session
	// just before subscription_succeeded; page POSTs carry it as X-Toolmark-Token.
	subscribed := false
	for i := 0; i < 10 && !subscribed; i++ {
		ev, err := readUntil(ws, "", p.channel, 10)
		if err != nil {
			return fmt.Errorf("page %d: subscribe %s: %w", p.idx, p.channel, err)
		}
		if ev.Event == "toolmark.session" {
			var s struct {
				Token string `json:"token"`
			}
			if json.Unmarshal([]byte(ev.dataString()), &s) != nil || s.Token == "" {
				return fmt.Errorf("page %d: bad toolmark.session %s", p.idx, ev.Data)
			}
			p.token = s.Token
		}
		subscribed = ev.Event == "pusher_internal:subscription_succeeded"
	}
	if !subscribed {
		return fmt.Errorf("page %d: no subscription_succeeded on %s", p.idx, p.channel)
	}
	_ = ws.SetReadDeadline(time.Time{})
	_ = ws.SetWriteDeadline(time.Time{})

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

// readUntil reads frames until event (on channel, if set) arrives; pusher:error and
// subscription errors end it; an empty event matches any event on channel. At most n frames
// are read.
func readUntil(ws *websocket.Conn, event, channel string, n int) (*wsEvent, error) {
	for range n {
		_, b, err := ws.ReadMessage()
		if err != nil {
			return nil, fmt.Errorf("waiting for %s: %w", event, err)
		}
		var ev wsEvent
		if err := json.Unmarshal(b, &ev); err != nil {
			return nil, fmt.Errorf("bad frame %q", b)
		}
		switch {
		case (event == "" || ev.Event == event) && (channel == "" || ev.Channel == channel):
			return &ev, nil
		case ev.Event == "pusher:error", ev.Event == "pusher:subscription_error":
			return nil, fmt.Errorf("%s: %s", ev.Event, ev.Data)
		}
	}
	return nil, fmt.Errorf("no %s within %d frames", event, n)
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
		_, b, err := p.ws.ReadMessage()
		if err != nil {
			return
		}
		recv := time.Since(r.base)
		var ev wsEvent
		if json.Unmarshal(b, &ev) != nil {
			r.pageErr("bad_frame")
			continue
		}
		switch ev.Event {
		case "toolmark.message":
			var m toPage
			if json.Unmarshal([]byte(ev.dataString()), &m) != nil {
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
			p.wmu.Lock()
			_ = p.ws.SetWriteDeadline(time.Now().Add(5 * time.Second))
			_ = p.ws.WriteMessage(websocket.TextMessage, []byte(`{"event":"pusher:pong","data":{}}`))
			p.wmu.Unlock()
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
