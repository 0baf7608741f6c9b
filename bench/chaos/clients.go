package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/reverbgo/reverbgo/auth"
)

const (
	appID, appKey, appSecret = "chaos", "chaos-key", "chaos-secret"
)

type frame struct {
	Event   string          `json:"event"`
	Channel string          `json:"channel"`
	Data    json.RawMessage `json:"data"`
}

func (f *frame) str() string {
	var s string
	if json.Unmarshal(f.Data, &s) == nil {
		return s
	}
	return string(f.Data)
}

// conn is one Pusher connection of the load.
type conn struct {
	ws   *websocket.Conn
	id   string
	node int
	wmu  sync.Mutex
}

var dialer = websocket.Dialer{HandshakeTimeout: 5 * time.Second, ReadBufferSize: 4096, WriteBufferSize: 1024}

func dialNode(ctx context.Context, n *node) (*conn, error) {
	u := url.URL{Scheme: "ws", Host: n.addr, Path: "/app/" + appKey, RawQuery: "protocol=7&client=chaos&version=1.0"}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ws, resp, err := dialer.DialContext(ctx, u.String(), nil)
	if resp != nil && resp.Body != nil {
		resp.Body.Close()
	}
	if err != nil {
		return nil, err
	}
	c := &conn{ws: ws, node: n.i}
	_ = ws.SetReadDeadline(time.Now().Add(5 * time.Second))
	f, err := c.until("pusher:connection_established", "")
	if err != nil {
		ws.Close()
		return nil, err
	}
	var est struct {
		SocketID string `json:"socket_id"`
	}
	if json.Unmarshal([]byte(f.str()), &est) != nil || est.SocketID == "" {
		ws.Close()
		return nil, fmt.Errorf("bad connection_established %s", f.Data)
	}
	c.id = est.SocketID
	_ = ws.SetReadDeadline(time.Time{})
	return c, nil
}

func (c *conn) read() (frame, error) {
	_, b, err := c.ws.ReadMessage()
	if err != nil {
		return frame{}, err
	}
	var f frame
	if err := json.Unmarshal(b, &f); err != nil {
		return frame{}, fmt.Errorf("bad frame %q", b)
	}
	if f.Event == "pusher:ping" {
		_ = c.send(map[string]any{"event": "pusher:pong", "data": map[string]any{}})
	}
	return f, nil
}

func (c *conn) until(name, channel string) (frame, error) {
	for {
		f, err := c.read()
		if err != nil {
			return f, fmt.Errorf("waiting for %s: %w", name, err)
		}
		switch {
		case f.Event == name && (channel == "" || f.Channel == channel):
			return f, nil
		case f.Event == "pusher:error", f.Event == "pusher:subscription_error":
			return f, fmt.Errorf("%s: %s", f.Event, f.Data)
		}
	}
}

func (c *conn) send(v any) error {
	b, _ := json.Marshal(v)
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.ws.SetWriteDeadline(time.Now().Add(5 * time.Second))
	return c.ws.WriteMessage(websocket.TextMessage, b)
}

// subscribe signs and sends pusher:subscribe (presence as user when user != "") and waits
// for subscription_succeeded.
func (c *conn) subscribe(channel, user string) error {
	data := map[string]string{"channel": channel}
	switch {
	case user != "":
		cd, _ := json.Marshal(map[string]any{"user_id": user, "user_info": map[string]string{"n": user}})
		data["channel_data"] = string(cd)
		data["auth"] = appKey + ":" + auth.PresenceSignature(appSecret, c.id, channel, string(cd))
	case len(channel) > 8 && channel[:8] == "private-":
		data["auth"] = appKey + ":" + auth.ChannelSignature(appSecret, c.id, channel)
	}
	if err := c.send(map[string]any{"event": "pusher:subscribe", "data": data}); err != nil {
		return err
	}
	_ = c.ws.SetReadDeadline(time.Now().Add(8 * time.Second))
	defer c.ws.SetReadDeadline(time.Time{})
	_, err := c.until("pusher_internal:subscription_succeeded", channel)
	return err
}

var apiClient = &http.Client{Timeout: 5 * time.Second}

// api sends a signed HTTP API request to node n.
func api(ctx context.Context, n *node, method, path string, query url.Values, body []byte) (int, []byte, error) {
	q := auth.SignRequest(method, path, query, body, appKey, appSecret, time.Now())
	var r io.Reader
	if len(body) > 0 {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+n.addr+path+"?"+q.Encode(), r)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := apiClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	return resp.StatusCode, b, err
}

// trigger publishes one event through node n's HTTP API.
func trigger(ctx context.Context, n *node, channel, event, data string) error {
	body, _ := json.Marshal(map[string]any{"name": event, "channel": channel, "data": data})
	code, b, err := api(ctx, n, http.MethodPost, "/apps/"+appID+"/events", nil, body)
	if err != nil {
		return err
	}
	if code != http.StatusOK {
		return fmt.Errorf("trigger: %d %s", code, b)
	}
	return nil
}

// users is GET /apps/{id}/channels/{channel}/users as a set.
func users(ctx context.Context, n *node, channel string) (map[string]bool, error) {
	code, b, err := api(ctx, n, http.MethodGet, "/apps/"+appID+"/channels/"+channel+"/users", nil, nil)
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("users: %d %s", code, b)
	}
	var r struct {
		Users []struct {
			ID string `json:"id"`
		} `json:"users"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, err
	}
	set := map[string]bool{}
	for _, u := range r.Users {
		set[u.ID] = true
	}
	return set, nil
}

// subscriptionCount is GET /apps/{id}/channels/{channel}?info=subscription_count.
func subscriptionCount(ctx context.Context, n *node, channel string) (int, error) {
	code, b, err := api(ctx, n, http.MethodGet, "/apps/"+appID+"/channels/"+channel, url.Values{"info": {"subscription_count"}}, nil)
	if err != nil {
		return 0, err
	}
	if code != http.StatusOK {
		return 0, fmt.Errorf("channel: %d %s", code, b)
	}
	var r struct {
		Count int `json:"subscription_count"`
	}
	err = json.Unmarshal(b, &r)
	return r.Count, err
}
