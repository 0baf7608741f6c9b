// Package benchkit is what every load tool of bench/ shares: one Pusher client (dial,
// read, subscribe with locally signed auth, answering pings) and one signed HTTP API call,
// so the figures of the soak, the chaos soak and the benchmarks come from one client
// implementation.
package benchkit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/reverbgo/reverbgo/auth"
)

// App is the credentials a tool connects and publishes with.
type App struct{ ID, Key, Secret string }

// Frame is a Pusher frame as the tools read it.
type Frame struct {
	Event   string          `json:"event"`
	Channel string          `json:"channel"`
	Data    json.RawMessage `json:"data"`
	UserID  string          `json:"user_id"`
	// Serial and Epoch are a recovery channel's (issue 23): an event's serial, and the
	// position subscription_succeeded carries.
	Serial *uint64 `json:"serial"`
	Epoch  string  `json:"epoch"`
}

// Str is the data decoded from the JSON string Pusher sends (the raw JSON otherwise).
func (f *Frame) Str() string {
	var s string
	if json.Unmarshal(f.Data, &s) == nil {
		return s
	}
	return string(f.Data)
}

// Conn is one Pusher client connection. Reads are the caller's (one goroutine); sends may
// come from any goroutine.
type Conn struct {
	WS      *websocket.Conn
	ID      string // socket id
	timeout time.Duration
	wmu     sync.Mutex
}

var dialer = websocket.Dialer{HandshakeTimeout: 10 * time.Second, ReadBufferSize: 4096, WriteBufferSize: 1024}

// Dial connects to addr (host:port) as app's client named client and waits, bounded by
// timeout (which also bounds later writes and subscribes), for connection_established.
func Dial(ctx context.Context, addr string, app App, client string, timeout time.Duration) (*Conn, error) {
	return DialFrom(ctx, nil, addr, app, client, timeout)
}

// DialFrom is Dial from the local address source (nil = the kernel's choice). Tens of
// thousands of sockets from one address to a few ports make every connect search the
// ephemeral range for a free 4-tuple: at 93,000 sockets on 127.0.0.1 a reconnecting load
// process spent more than a core in the kernel for ~300 connects/s. Another loopback source
// (127.0.0.2, ...) gives each its own range.
func DialFrom(ctx context.Context, source net.IP, addr string, app App, client string, timeout time.Duration) (*Conn, error) {
	u := url.URL{Scheme: "ws", Host: addr, Path: "/app/" + app.Key, RawQuery: "protocol=7&client=" + client + "&version=1.0"}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	d := &dialer
	if source != nil {
		from := dialer
		nd := &net.Dialer{LocalAddr: &net.TCPAddr{IP: source}}
		from.NetDialContext = nd.DialContext
		d = &from
	}
	ws, resp, err := d.DialContext(ctx, u.String(), nil)
	if resp != nil && resp.Body != nil {
		resp.Body.Close()
	}
	if err != nil {
		return nil, err
	}
	c := &Conn{WS: ws, timeout: timeout}
	_ = ws.SetReadDeadline(time.Now().Add(timeout))
	f, err := c.Until("pusher:connection_established", "")
	if err != nil {
		ws.Close()
		return nil, err
	}
	var est struct {
		SocketID string `json:"socket_id"`
	}
	if json.Unmarshal([]byte(f.Str()), &est) != nil || est.SocketID == "" {
		ws.Close()
		return nil, fmt.Errorf("bad connection_established %s", f.Data)
	}
	c.ID = est.SocketID
	_ = ws.SetReadDeadline(time.Time{})
	return c, nil
}

// Read reads one frame, answering a pusher:ping on the way.
func (c *Conn) Read() (Frame, error) {
	_, b, err := c.WS.ReadMessage()
	if err != nil {
		return Frame{}, err
	}
	var f Frame
	if err := json.Unmarshal(b, &f); err != nil {
		return Frame{}, fmt.Errorf("bad frame %q", b)
	}
	if f.Event == "pusher:ping" {
		_ = c.Send(map[string]any{"event": "pusher:pong", "data": map[string]any{}})
	}
	return f, nil
}

// Until reads frames until event name (on channel, if set); an error frame ends it.
func (c *Conn) Until(name, channel string) (Frame, error) {
	for {
		f, err := c.Read()
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

// Send writes v as one JSON text frame.
func (c *Conn) Send(v any) error {
	b, _ := json.Marshal(v)
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.WS.SetWriteDeadline(time.Now().Add(c.timeout))
	return c.WS.WriteMessage(websocket.TextMessage, b)
}

// Subscribe sends pusher:subscribe, signed with app's secret for private- and presence-
// channels (presence as user_id user, when user is set), and returns the frames read up to
// subscription_succeeded (inclusive).
func (c *Conn) Subscribe(app App, channel, user string) ([]Frame, error) {
	return c.SubscribeWith(app, channel, user, nil)
}

// SubscribeWith is Subscribe with extra fields in the subscribe's data (e.g. "resume").
func (c *Conn) SubscribeWith(app App, channel, user string, extra map[string]any) ([]Frame, error) {
	data := map[string]any{"channel": channel}
	for k, v := range extra {
		data[k] = v
	}
	switch {
	case user != "":
		cd, _ := json.Marshal(map[string]any{"user_id": user, "user_info": map[string]string{"n": user}})
		data["channel_data"] = string(cd)
		data["auth"] = app.Key + ":" + auth.PresenceSignature(app.Secret, c.ID, channel, string(cd))
	case strings.HasPrefix(channel, "private-"):
		data["auth"] = app.Key + ":" + auth.ChannelSignature(app.Secret, c.ID, channel)
	}
	if err := c.Send(map[string]any{"event": "pusher:subscribe", "data": data}); err != nil {
		return nil, err
	}
	_ = c.WS.SetReadDeadline(time.Now().Add(c.timeout))
	defer c.WS.SetReadDeadline(time.Time{})
	var got []Frame
	for {
		f, err := c.Read()
		if err != nil {
			return got, err
		}
		got = append(got, f)
		switch {
		case f.Event == "pusher_internal:subscription_succeeded" && f.Channel == channel:
			return got, nil
		case f.Event == "pusher:error", f.Event == "pusher:subscription_error":
			return got, fmt.Errorf("%s: %s", f.Event, f.Data)
		}
	}
}

// Close closes the connection.
func (c *Conn) Close() error { return c.WS.Close() }

// ClosedQuietly reports whether err is what ending a socket ourselves looks like.
func ClosedQuietly(err error) bool {
	return errors.Is(err, websocket.ErrCloseSent) || websocket.IsCloseError(err, websocket.CloseNormalClosure)
}

// API sends a Pusher HTTP API request to addr, signed as the pusher SDKs sign it, and
// returns the status and (up to 4 MiB of) the body.
func API(ctx context.Context, hc *http.Client, addr string, app App, method, path string, query url.Values, body []byte) (int, []byte, error) {
	q := auth.SignRequest(method, path, query, body, app.Key, app.Secret, time.Now())
	var r io.Reader
	if len(body) > 0 {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+addr+path+"?"+q.Encode(), r)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	return resp.StatusCode, b, err
}
