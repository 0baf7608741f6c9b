package testutil

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/reverbgo/reverbgo/auth"
)

// PusherEvent is one event frame a Pusher client receives. Serial and Epoch are the
// top-level fields of a recovery channel's frames (0 and "" when absent).
type PusherEvent struct {
	Event   string `json:"event"`
	Channel string `json:"channel"`
	Data    string `json:"data"`
	Serial  uint64 `json:"serial,omitempty"`
	Epoch   string `json:"epoch,omitempty"`
}

// PusherClient is a real WebSocket client of the Pusher protocol (gorilla/websocket), as a
// black-box test runs it against a reverbgo process: it answers pusher:ping, signs private
// channel subscriptions with the app secret itself (as the app's auth endpoint would) and
// hands every other event to OnEvent, from its reader goroutine.
type PusherClient struct {
	SocketID string
	ws       *websocket.Conn
	wmu      sync.Mutex
	mu       sync.Mutex
	waiting  map[string]chan struct{} // subscription_succeeded waiters, by channel
	answers  map[string]PusherEvent   // the last subscription_succeeded, by channel
	onEvent  func(PusherEvent)
	done     chan struct{}
	err      error // why the reader stopped
	closing  bool
}

// DialPusher connects to baseURL (http://host:port) as a client of app key and waits for
// pusher:connection_established. onEvent (may be nil) receives every event after that except
// pings and subscription_succeeded, on the reader goroutine: it must not block.
func DialPusher(ctx context.Context, baseURL, key string, onEvent func(PusherEvent)) (*PusherClient, error) {
	u := "ws" + strings.TrimPrefix(baseURL, "http") + "/app/" + key + "?protocol=7&client=go&version=test"
	ws, _, err := websocket.DefaultDialer.DialContext(ctx, u, nil)
	if err != nil {
		return nil, err
	}
	c := &PusherClient{ws: ws, waiting: map[string]chan struct{}{}, answers: map[string]PusherEvent{}, onEvent: onEvent, done: make(chan struct{})}
	if dl, ok := ctx.Deadline(); ok {
		_ = ws.SetReadDeadline(dl)
	}
	var first PusherEvent
	if err := ws.ReadJSON(&first); err != nil {
		ws.Close()
		return nil, err
	}
	var est struct {
		SocketID string `json:"socket_id"`
	}
	if first.Event != "pusher:connection_established" || json.Unmarshal([]byte(first.Data), &est) != nil {
		ws.Close()
		return nil, fmt.Errorf("first frame %s %q, want pusher:connection_established", first.Event, first.Data)
	}
	_ = ws.SetReadDeadline(time.Time{})
	c.SocketID = est.SocketID
	go c.read()
	return c, nil
}

func (c *PusherClient) read() {
	defer close(c.done)
	for {
		_, p, err := c.ws.ReadMessage()
		if err != nil {
			c.mu.Lock()
			c.err = err
			c.mu.Unlock()
			return
		}
		var ev PusherEvent
		if json.Unmarshal(p, &ev) != nil {
			continue
		}
		switch ev.Event {
		case "pusher:ping":
			_ = c.send(map[string]any{"event": "pusher:pong", "data": map[string]any{}})
		case "pusher_internal:subscription_succeeded":
			c.mu.Lock()
			c.answers[ev.Channel] = ev
			if ch, ok := c.waiting[ev.Channel]; ok {
				close(ch)
				delete(c.waiting, ev.Channel)
			}
			c.mu.Unlock()
		default:
			if c.onEvent != nil {
				c.onEvent(ev)
			}
		}
	}
}

func (c *PusherClient) send(v any) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.ws.WriteJSON(v)
}

// SubscribePrivate subscribes to a private channel, signing the auth field with secret
// (HMAC-SHA256 of "socket_id:channel"), and waits for subscription_succeeded.
func (c *PusherClient) SubscribePrivate(ctx context.Context, key, secret, channel string) error {
	ok := make(chan struct{})
	c.mu.Lock()
	c.waiting[channel] = ok
	c.mu.Unlock()
	sig := key + ":" + auth.ChannelSignature(secret, c.SocketID, channel)
	if err := c.send(map[string]any{"event": "pusher:subscribe", "data": map[string]string{"channel": channel, "auth": sig}}); err != nil {
		return err
	}
	select {
	case <-ok:
		return nil
	case <-c.done:
		return fmt.Errorf("socket closed subscribing to %s: %v", channel, c.Err())
	case <-ctx.Done():
		return fmt.Errorf("no subscription_succeeded for %s: %w", channel, ctx.Err())
	}
}

// Subscription is the subscription_succeeded frame channel was answered with last (its
// Serial and Epoch are the position under recovery); false before one arrived.
func (c *PusherClient) Subscription(channel string) (PusherEvent, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ev, ok := c.answers[channel]
	return ev, ok
}

// Dropped reports whether the connection ended other than by Close.
func (c *PusherClient) Dropped() bool {
	select {
	case <-c.done:
		c.mu.Lock()
		defer c.mu.Unlock()
		return !c.closing
	default:
		return false
	}
}

// Err is why the reader stopped (nil while it runs).
func (c *PusherClient) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close closes the connection.
func (c *PusherClient) Close() {
	c.mu.Lock()
	c.closing = true
	c.mu.Unlock()
	_ = c.ws.Close()
	<-c.done
}

// TriggerEvent publishes one event through the HTTP API of baseURL (POST
// /apps/{appID}/events, signed as the Pusher server SDKs sign it) and returns the status.
func TriggerEvent(ctx context.Context, hc *http.Client, baseURL, appID, key, secret, channel, name, data string) (int, error) {
	body, err := json.Marshal(map[string]string{"name": name, "channel": channel, "data": data})
	if err != nil {
		return 0, err
	}
	path := "/apps/" + appID + "/events"
	q := auth.SignRequest(http.MethodPost, path, nil, body, key, secret, time.Now())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, baseURL+path+"?"+q.Encode(), bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}
