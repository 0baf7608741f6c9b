package testutil

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/reverbgo/reverbgo/auth"
	"github.com/reverbgo/reverbgo/internal/pusherclient"
)

// Event is one server frame as a test client sees it.
type Event struct {
	Event   string          `json:"event"`
	Channel string          `json:"channel"`
	Data    json.RawMessage `json:"data"`
	UserID  string          `json:"user_id"`
	Raw     []byte          `json:"-"` // the frame as received
}

// DataString returns data, which the server sends as a JSON-encoded string.
func (e Event) DataString(t testing.TB) string {
	t.Helper()
	return DataString(t, e.Event, e.Data, e.Raw)
}

// DataInto decodes the JSON inside the data string into v.
func (e Event) DataInto(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(e.DataString(t)), v); err != nil {
		t.Fatalf("%s: data string is not JSON: %s", e.Event, e.Raw)
	}
}

// ErrorData is the data of a pusher:error.
type ErrorData struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// ErrorCode returns the code of a pusher:error event.
func (e Event) ErrorCode(t testing.TB) int {
	t.Helper()
	var d ErrorData
	e.DataInto(t, &d)
	return d.Code
}

// WSClient is a WebSocket test client (gorilla, as a browser would speak) that sees every
// frame: pongs, raw bytes, invalid JSON. A reader goroutine queues every frame without
// bound, so the server never sees it as slow.
type WSClient struct {
	T        testing.TB
	WS       *websocket.Conn
	Pongs    chan string // payloads of the pongs answering the client's pings
	SocketID string      // set by whoever reads connection_established

	CountOnly atomic.Bool  // only count frames (for floods), queue none
	Count     atomic.Int64 // frames read

	mu     sync.Mutex
	queue  []Event
	notify chan struct{}
	done   chan struct{}
	err    error
}

// DialWS opens a WebSocket to u without waiting for anything (wss: accepts any certificate,
// as httptest's own is).
func DialWS(t testing.TB, u string, header http.Header) (*WSClient, error) {
	t.Helper()
	d := websocket.Dialer{HandshakeTimeout: EventTimeout}
	if strings.HasPrefix(u, "wss:") {
		d.TLSClientConfig = &tls.Config{InsecureSkipVerify: true}
	}
	ws, resp, err := d.Dial(u, header)
	if err != nil {
		if resp != nil {
			return nil, errors.New(err.Error() + ": HTTP " + resp.Status)
		}
		return nil, err
	}
	return NewWSClient(t, ws), nil
}

// NewWSClient starts reading ws, an open connection, and closes it when the test ends.
func NewWSClient(t testing.TB, ws *websocket.Conn) *WSClient {
	c := &WSClient{T: t, WS: ws, notify: make(chan struct{}, 1), done: make(chan struct{}), Pongs: make(chan string, 16)}
	ws.SetPongHandler(func(s string) error {
		select {
		case c.Pongs <- s:
		default:
		}
		return nil
	})
	go c.readLoop()
	t.Cleanup(func() { _ = ws.Close() })
	return c
}

func (c *WSClient) readLoop() {
	defer close(c.done)
	for {
		_, msg, err := c.WS.ReadMessage()
		if err != nil {
			c.mu.Lock()
			c.err = err
			c.mu.Unlock()
			c.signal()
			return
		}
		c.Count.Add(1)
		if c.CountOnly.Load() {
			continue
		}
		ev := Event{Raw: msg}
		if err := json.Unmarshal(msg, &ev); err != nil {
			ev.Event = "<invalid JSON>"
		}
		c.mu.Lock()
		c.queue = append(c.queue, ev)
		c.mu.Unlock()
		c.signal()
	}
}

func (c *WSClient) signal() {
	select {
	case c.notify <- struct{}{}:
	default:
	}
}

// Done is closed once the connection has ended.
func (c *WSClient) Done() <-chan struct{} { return c.done }

// Queued returns the number of frames read and not yet taken.
func (c *WSClient) Queued() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.queue)
}

// TryNext returns the next frame, or false once d has passed or the connection ended.
func (c *WSClient) TryNext(d time.Duration) (Event, bool) {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		if len(c.queue) > 0 {
			ev := c.queue[0]
			c.queue = c.queue[1:]
			c.mu.Unlock()
			return ev, true
		}
		c.mu.Unlock()
		select {
		case <-c.done:
			c.mu.Lock()
			empty := len(c.queue) == 0
			c.mu.Unlock()
			if empty {
				return Event{}, false
			}
		case <-c.notify:
		case <-deadline.C:
			return Event{}, false
		}
	}
}

// Next returns the next frame or fails the test.
func (c *WSClient) Next() Event {
	c.T.Helper()
	ev, ok := c.TryNext(EventTimeout)
	if !ok {
		c.T.Fatalf("no frame within %v (connection error: %v)", EventTimeout, c.ReadErr())
	}
	return ev
}

// WaitEvent skips frames until one named name (on channel, if not "") arrives.
func (c *WSClient) WaitEvent(name, channel string) Event {
	c.T.Helper()
	deadline := time.Now().Add(EventTimeout)
	var skipped []string
	for {
		ev, ok := c.TryNext(time.Until(deadline))
		if !ok {
			c.T.Fatalf("no %s on %q within %v; skipped %v (connection error: %v)", name, channel, EventTimeout, skipped, c.ReadErr())
		}
		if ev.Event == name && (channel == "" || ev.Channel == channel) {
			return ev
		}
		skipped = append(skipped, string(ev.Raw))
	}
}

// ExpectNone watches for QuietPeriod and fails if a matching frame arrives ("" matches
// any), or if the connection ends: a closed socket receives nothing, so silence from it
// proves nothing.
func (c *WSClient) ExpectNone(name, channel string) {
	c.T.Helper()
	deadline := time.Now().Add(QuietPeriod)
	for {
		ev, ok := c.TryNext(time.Until(deadline))
		if !ok {
			if c.IsClosed() {
				c.T.Fatalf("connection ended while watching for no %q on %q: %v", name, channel, c.ReadErr())
			}
			return
		}
		if (name == "" || ev.Event == name) && (channel == "" || ev.Channel == channel) {
			c.T.Fatalf("unexpected frame: %s", ev.Raw)
		}
	}
}

// WaitError waits for a pusher:error and returns its code and message.
func (c *WSClient) WaitError() (int, string) {
	c.T.Helper()
	var d ErrorData
	c.WaitEvent("pusher:error", "").DataInto(c.T, &d)
	return d.Code, d.Message
}

// ReadErr is the error that ended the connection, nil while it is open.
func (c *WSClient) ReadErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// WaitClose waits for the connection to end and returns the close code received (-1 if the
// connection ended without a close frame).
func (c *WSClient) WaitClose() int {
	c.T.Helper()
	select {
	case <-c.done:
	case <-time.After(EventTimeout):
		c.T.Fatalf("connection still open after %v", EventTimeout)
	}
	var ce *websocket.CloseError
	if errors.As(c.ReadErr(), &ce) {
		return ce.Code
	}
	return -1
}

// IsClosed reports whether the connection has ended.
func (c *WSClient) IsClosed() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// SendRaw writes msg as one text frame.
func (c *WSClient) SendRaw(msg string) {
	c.T.Helper()
	if err := c.WS.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
		c.T.Fatalf("write: %v", err)
	}
}

// Send writes v as JSON in one text frame.
func (c *WSClient) Send(v any) {
	c.T.Helper()
	c.SendRaw(string(MustMarshal(c.T, v)))
}

// Ping checks that the connection is alive and answering (pusher:ping, pusher:pong).
func (c *WSClient) Ping() {
	c.T.Helper()
	c.Send(map[string]any{"event": "pusher:ping", "data": map[string]any{}})
	c.WaitEvent("pusher:pong", "")
}

// SubscribeMsg sends pusher:subscribe with auth and channel_data when not "".
func (c *WSClient) SubscribeMsg(channel, authField, channelData string) {
	c.T.Helper()
	d := map[string]any{"channel": channel}
	if authField != "" {
		d["auth"] = authField
	}
	if channelData != "" {
		d["channel_data"] = channelData
	}
	c.Send(map[string]any{"event": "pusher:subscribe", "data": d})
}

// SubscribeWith sends pusher:subscribe as SubscribeMsg does and waits for
// subscription_succeeded.
func (c *WSClient) SubscribeWith(channel, authField, channelData string) Event {
	c.T.Helper()
	c.SubscribeMsg(channel, authField, channelData)
	return c.WaitEvent("pusher_internal:subscription_succeeded", channel)
}

// Subscribe subscribes to a public channel and waits for subscription_succeeded.
func (c *WSClient) Subscribe(channel string) Event {
	c.T.Helper()
	return c.SubscribeWith(channel, "", "")
}

// SubscribeSigned subscribes to a private- or presence- channel (channelData for presence)
// with a valid signature of app for the client's SocketID and waits for success.
func (c *WSClient) SubscribeSigned(app pusherclient.App, channel, channelData string) Event {
	c.T.Helper()
	c.Send(pusherclient.SubscribeMessage(app, c.SocketID, channel, channelData, nil))
	return c.WaitEvent("pusher_internal:subscription_succeeded", channel)
}

// Signin signs the client in as userData (which must hold an "id") and waits for
// signin_success.
func (c *WSClient) Signin(app pusherclient.App, userData string) Event {
	c.T.Helper()
	c.Send(map[string]any{"event": "pusher:signin", "data": map[string]any{
		"auth":      app.Key + ":" + auth.SigninSignature(app.Secret, c.SocketID, userData),
		"user_data": userData,
	}})
	return c.WaitEvent("pusher:signin_success", "")
}

// PrivateAuth is the auth field of a private channel subscription.
func PrivateAuth(key, secret, socketID, channel string) string {
	return key + ":" + auth.ChannelSignature(secret, socketID, channel)
}

// PresenceAuth is the auth field of a presence channel subscription.
func PresenceAuth(key, secret, socketID, channel, channelData string) string {
	return key + ":" + auth.PresenceSignature(secret, socketID, channel, channelData)
}
