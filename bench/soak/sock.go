package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/reverbgo/reverbgo/auth"
)

// event is a Pusher frame as the soak reads it.
type event struct {
	Event   string          `json:"event"`
	Channel string          `json:"channel"`
	Data    json.RawMessage `json:"data"`
	UserID  string          `json:"user_id"`
}

// str is data decoded from the JSON string Pusher sends (or the raw JSON otherwise).
func (e *event) str() string {
	var s string
	if json.Unmarshal(e.Data, &s) == nil {
		return s
	}
	return string(e.Data)
}

// sock is one Pusher client connection.
type sock struct {
	ws  *websocket.Conn
	id  string
	wmu sync.Mutex
}

var dialer = websocket.Dialer{HandshakeTimeout: 10 * time.Second, ReadBufferSize: 4096, WriteBufferSize: 1024}

// dial connects to app key and waits for connection_established.
func (s *soak) dial(ctx context.Context) (*sock, error) {
	u := url.URL{Scheme: "ws", Host: s.addr, Path: "/app/" + s.key, RawQuery: "protocol=7&client=soak&version=1.0"}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ws, resp, err := dialer.DialContext(ctx, u.String(), nil)
	if resp != nil && resp.Body != nil {
		resp.Body.Close()
	}
	if err != nil {
		return nil, err
	}
	c := &sock{ws: ws}
	_ = ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	ev, err := c.until("pusher:connection_established", "")
	if err != nil {
		ws.Close()
		return nil, err
	}
	var est struct {
		SocketID string `json:"socket_id"`
	}
	if json.Unmarshal([]byte(ev.str()), &est) != nil || est.SocketID == "" {
		ws.Close()
		return nil, fmt.Errorf("bad connection_established %s", ev.Data)
	}
	c.id = est.SocketID
	_ = ws.SetReadDeadline(time.Time{})
	return c, nil
}

func (c *sock) read() (event, error) {
	_, b, err := c.ws.ReadMessage()
	if err != nil {
		return event{}, err
	}
	var ev event
	if err := json.Unmarshal(b, &ev); err != nil {
		return event{}, fmt.Errorf("bad frame %q", b)
	}
	return ev, nil
}

// until reads frames until event (on channel, if set); errors end it.
func (c *sock) until(name, channel string) (event, error) {
	for {
		ev, err := c.read()
		if err != nil {
			return ev, fmt.Errorf("waiting for %s: %w", name, err)
		}
		switch {
		case ev.Event == name && (channel == "" || ev.Channel == channel):
			return ev, nil
		case ev.Event == "pusher:error", ev.Event == "pusher:subscription_error":
			return ev, fmt.Errorf("%s: %s", ev.Event, ev.Data)
		case ev.Event == "pusher:ping":
			c.send(map[string]any{"event": "pusher:pong", "data": map[string]any{}})
		}
	}
}

func (c *sock) send(v any) error {
	b, _ := json.Marshal(v)
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.ws.SetWriteDeadline(time.Now().Add(10 * time.Second))
	return c.ws.WriteMessage(websocket.TextMessage, b)
}

// subscribe sends pusher:subscribe, signed for private- and presence- channels (presence
// with user as user_id), and returns the frames up to subscription_succeeded (inclusive).
func (s *soak) subscribe(c *sock, channel, user string) ([]event, error) {
	data := map[string]string{"channel": channel}
	switch {
	case user != "":
		cd, _ := json.Marshal(map[string]any{"user_id": user, "user_info": map[string]string{"n": user}})
		data["channel_data"] = string(cd)
		data["auth"] = s.key + ":" + auth.PresenceSignature(s.secret, c.id, channel, string(cd))
	case len(channel) > 8 && channel[:8] == "private-":
		data["auth"] = s.key + ":" + auth.ChannelSignature(s.secret, c.id, channel)
	}
	if err := c.send(map[string]any{"event": "pusher:subscribe", "data": data}); err != nil {
		return nil, err
	}
	_ = c.ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	defer c.ws.SetReadDeadline(time.Time{})
	var got []event
	for {
		ev, err := c.read()
		if err != nil {
			return got, err
		}
		got = append(got, ev)
		switch {
		case ev.Event == "pusher_internal:subscription_succeeded" && ev.Channel == channel:
			return got, nil
		case ev.Event == "pusher:error", ev.Event == "pusher:subscription_error":
			return got, fmt.Errorf("%s: %s", ev.Event, ev.Data)
		}
	}
}

// api sends a signed Pusher HTTP API request and returns the status and body.
func (s *soak) api(ctx context.Context, method, path string, body []byte) (int, []byte, error) {
	q := auth.SignRequest(method, path, nil, body, s.key, s.secret, time.Now())
	var r io.Reader
	if len(body) > 0 {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+s.addr+path+"?"+q.Encode(), r)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, b, err
}

// closedQuietly reports whether err is what ending a socket ourselves looks like.
func closedQuietly(err error) bool {
	return errors.Is(err, websocket.ErrCloseSent) || websocket.IsCloseError(err, websocket.CloseNormalClosure)
}
