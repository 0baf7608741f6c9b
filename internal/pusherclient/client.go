// Package pusherclient is the one Go client of the Pusher Channels protocol that the tests
// and the bench programs of this module use: dial (origin, headers, compression, dialer),
// the socket id of connection_established, subscriptions signed locally with the app's
// secret (private, presence, with channel_data), waiting for an event, client events,
// pusher:ping, and the signed HTTP API (events, batch events, any other call).
//
// A Conn is read by one goroutine (Read, Until, Subscribe); Listen hands reading to a
// goroutine of its own and events to a callback instead. Nothing here depends on testing,
// so load programs that open thousands of sockets use the same client as the tests.
package pusherclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/reverbgo/reverbgo/auth"
)

// App is the credentials a client connects, subscribes and publishes with.
type App struct{ ID, Key, Secret string }

// Frame is one Pusher frame as the client reads it.
type Frame struct {
	Event   string          `json:"event"`
	Channel string          `json:"channel"`
	Data    json.RawMessage `json:"data"`
	UserID  string          `json:"user_id"`
	// Serial and Epoch are a recovery channel's: an event's serial, and the position
	// subscription_succeeded carries (nil and "" when absent).
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

// SerialOr0 is the frame's serial, 0 when it has none.
func (f *Frame) SerialOr0() uint64 {
	if f.Serial == nil {
		return 0
	}
	return *f.Serial
}

// Options are how Dial connects. The zero value is a plain client.
type Options struct {
	// Client and Version are the client= and version= of the connection URL ("go", "1.0").
	Client, Version string
	// Query is more of the connection URL's query (e.g. "flash=false").
	Query string
	// Timeout bounds the handshake and connection_established, and later each write and
	// each Subscribe's wait (10s when zero).
	Timeout time.Duration
	// Origin is sent as the Origin header when set.
	Origin string
	// Header is more request headers for the handshake.
	Header http.Header
	// Compression offers permessage-deflate.
	Compression bool
	// Dialer is the WebSocket dialer to copy (buffer sizes, NetDialContext, TLS); a
	// default with 4 KiB read and 1 KiB write buffers when nil.
	Dialer *websocket.Dialer
	// Source is the local address to connect from (nil: the kernel's choice). Tens of
	// thousands of sockets from one address to a few ports make every connect search the
	// ephemeral range for a free 4-tuple; another loopback source (127.0.0.2, ...) gives
	// each its own range.
	Source net.IP
	// NoEstablished returns from Dial as soon as the handshake is done, without reading
	// connection_established (ID stays empty).
	NoEstablished bool
}

// Conn is one Pusher client connection. Reads are the caller's (one goroutine); sends may
// come from any goroutine.
type Conn struct {
	WS *websocket.Conn
	ID string // socket id, from connection_established
	// Header is the handshake response's headers (Sec-WebSocket-Extensions and so on).
	Header  http.Header
	timeout time.Duration
	wmu     sync.Mutex
}

var defaultDialer = websocket.Dialer{HandshakeTimeout: 10 * time.Second, ReadBufferSize: 4096, WriteBufferSize: 1024}

// Dial connects to addr (host:port) as app's client named client and waits, bounded by
// timeout (which also bounds later writes and subscribes), for connection_established.
func Dial(ctx context.Context, addr string, app App, client string, timeout time.Duration) (*Conn, error) {
	return DialWith(ctx, addr, app.Key, Options{Client: client, Timeout: timeout})
}

// URL is the connection URL of app key at base: host:port, http(s)://host:port or
// ws(s)://host:port, with an optional path prefix after the host.
func URL(base, key, client, version string) string {
	switch {
	case strings.HasPrefix(base, "http://"), strings.HasPrefix(base, "https://"):
		base = "ws" + strings.TrimPrefix(base, "http")
	case strings.HasPrefix(base, "ws://"), strings.HasPrefix(base, "wss://"):
	default:
		base = "ws://" + base
	}
	if client == "" {
		client = "go"
	}
	if version == "" {
		version = "1.0"
	}
	return strings.TrimSuffix(base, "/") + "/app/" + key + "?protocol=7&client=" + url.QueryEscape(client) + "&version=" + url.QueryEscape(version)
}

// DialWith connects to base (see URL) as a client of app key, as o says.
func DialWith(ctx context.Context, base, key string, o Options) (*Conn, error) {
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	d := defaultDialer
	if o.Dialer != nil {
		d = *o.Dialer
	}
	if o.Compression {
		d.EnableCompression = true
	}
	if o.Source != nil {
		nd := &net.Dialer{LocalAddr: &net.TCPAddr{IP: o.Source}}
		d.NetDialContext = nd.DialContext
	}
	h := o.Header
	if o.Origin != "" {
		h = h.Clone()
		if h == nil {
			h = http.Header{}
		}
		h.Set("Origin", o.Origin)
	}
	u := URL(base, key, o.Client, o.Version)
	if o.Query != "" {
		u += "&" + o.Query
	}
	ws, resp, err := d.DialContext(ctx, u, h)
	var rh http.Header
	if resp != nil {
		rh = resp.Header
		if resp.Body != nil {
			resp.Body.Close()
		}
	}
	if err != nil {
		return nil, err
	}
	c := &Conn{WS: ws, Header: rh, timeout: o.Timeout}
	if o.NoEstablished {
		return c, nil
	}
	dl, _ := ctx.Deadline()
	_ = ws.SetReadDeadline(dl)
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

// Compressed reports whether the server accepted permessage-deflate.
func (c *Conn) Compressed() bool {
	return strings.Contains(c.Header.Get("Sec-WebSocket-Extensions"), "permessage-deflate")
}

// ErrBadFrame is what Read's error wraps when a message is not a JSON Pusher frame (the
// connection is still open).
var ErrBadFrame = errors.New("bad frame")

// Read reads one frame, answering a pusher:ping on the way.
func (c *Conn) Read() (Frame, error) {
	_, b, err := c.WS.ReadMessage()
	if err != nil {
		return Frame{}, err
	}
	var f Frame
	if err := json.Unmarshal(b, &f); err != nil {
		return Frame{}, fmt.Errorf("%w %q", ErrBadFrame, b)
	}
	if f.Event == "pusher:ping" {
		_ = c.Pong()
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

// UntilWithin is Until bounded by d.
func (c *Conn) UntilWithin(name, channel string, d time.Duration) (Frame, error) {
	_ = c.WS.SetReadDeadline(time.Now().Add(d))
	defer c.WS.SetReadDeadline(time.Time{})
	return c.Until(name, channel)
}

// Send writes v as one JSON text frame.
func (c *Conn) Send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return c.SendRaw(b)
}

// SendRaw writes b as one text frame.
func (c *Conn) SendRaw(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.WS.SetWriteDeadline(time.Now().Add(c.timeout))
	return c.WS.WriteMessage(websocket.TextMessage, b)
}

var (
	pingFrame = []byte(`{"event":"pusher:ping","data":{}}`)
	pongFrame = []byte(`{"event":"pusher:pong","data":{}}`)
)

// Ping sends pusher:ping (the server answers pusher:pong).
func (c *Conn) Ping() error { return c.SendRaw(pingFrame) }

// Pong sends pusher:pong.
func (c *Conn) Pong() error { return c.SendRaw(pongFrame) }

// ClientEvent sends client event name (client- is the caller's) on channel with data.
func (c *Conn) ClientEvent(channel, name string, data any) error {
	return c.Send(map[string]any{"event": name, "channel": channel, "data": data})
}

// SubscribeMessage is the pusher:subscribe frame for channel from socket id, signed with
// app's secret for private- and presence- channels (presence with channelData), with
// extra fields in its data (e.g. "resume").
func SubscribeMessage(app App, socketID, channel, channelData string, extra map[string]any) map[string]any {
	data := map[string]any{"channel": channel}
	for k, v := range extra {
		data[k] = v
	}
	switch {
	case strings.HasPrefix(channel, "presence-"):
		data["channel_data"] = channelData
		data["auth"] = app.Key + ":" + auth.PresenceSignature(app.Secret, socketID, channel, channelData)
	case strings.HasPrefix(channel, "private-"):
		data["auth"] = app.Key + ":" + auth.ChannelSignature(app.Secret, socketID, channel)
	case channelData != "":
		data["channel_data"] = channelData
	}
	return map[string]any{"event": "pusher:subscribe", "data": data}
}

// MemberData is the channel_data of presence member user ({"user_id":user,"user_info":{"n":user}}).
func MemberData(user string) string {
	cd, _ := json.Marshal(map[string]any{"user_id": user, "user_info": map[string]string{"n": user}})
	return string(cd)
}

// Subscribe sends pusher:subscribe, signed with app's secret for private- and presence-
// channels (presence as user_id user, see MemberData), and returns the frames read up to
// subscription_succeeded (inclusive).
func (c *Conn) Subscribe(app App, channel, user string) ([]Frame, error) {
	return c.SubscribeWith(app, channel, user, nil)
}

// SubscribeWith is Subscribe with extra fields in the subscribe's data (e.g. "resume").
func (c *Conn) SubscribeWith(app App, channel, user string, extra map[string]any) ([]Frame, error) {
	cd := ""
	if user != "" {
		cd = MemberData(user)
	}
	return c.SubscribeData(app, channel, cd, extra)
}

// SubscribeData is SubscribeWith with the presence channel_data given as it is.
func (c *Conn) SubscribeData(app App, channel, channelData string, extra map[string]any) ([]Frame, error) {
	if err := c.Send(SubscribeMessage(app, c.ID, channel, channelData, extra)); err != nil {
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

// CloseCode is the close code of a read error (0 when it is not a close frame).
func CloseCode(err error) int {
	var ce *websocket.CloseError
	if errors.As(err, &ce) {
		return ce.Code
	}
	return 0
}
