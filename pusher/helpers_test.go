package pusher

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reverbgo/reverbgo/internal/testutil"

	"github.com/gorilla/websocket"
	"github.com/labstack/echo/v4"

	"github.com/reverbgo/reverbgo/auth"
	"github.com/reverbgo/reverbgo/config"
)

const (
	waitTimeout = testutil.EventTimeout // every wait for something that should happen
	quietPeriod = testutil.QuietPeriod  // watching for something that must NOT arrive
	testAppID   = testutil.TestAppID
	testKey     = testutil.TestKey
	testSecret  = testutil.TestSecret
)

// setup is what a test may change before the server starts.
type setup struct {
	cfg  *config.Config
	opts Options
	tls  bool
	fast bool // serve through FastListener (the default, as in production)
	// prefixes are mounted besides "" before the server starts
	prefixes []string
}

type serverOpt func(*setup)

func withApp(fn func(*config.App)) serverOpt { return func(s *setup) { fn(&s.cfg.Apps[0]) } }

func withOptions(fn func(*Options)) serverOpt { return func(s *setup) { fn(&s.opts) } }

// withTLS serves over TLS: connections then use the blocking writer (no raw socket).
func withTLS() serverOpt { return func(s *setup) { s.tls = true } }

// withFastListener serves through FastListener, as cmd/reverbgo does without TLS. It is the
// default of every plain server of the suite; tests of the fast path say it explicitly.
func withFastListener() serverOpt { return func(s *setup) { s.fast = true } }

// withStdListener serves through net/http alone (gorilla upgrades), the path TLS and
// non-Linux systems take. PUSHER_TEST_FAST_ACCEPT=0 does so for every server of the suite.
func withStdListener() serverOpt { return func(s *setup) { s.fast = false } }

// withPrefix mounts the routes under p as well.
func withPrefix(p string) serverOpt { return func(s *setup) { s.prefixes = append(s.prefixes, p) } }

func boolPtr(b bool) *bool { return &b }
func intPtr(n int) *int    { return &n }

func testConfig() *config.Config { return testutil.TestConfig() }

// tserver is a Server mounted on echo behind an httptest server.
type tserver struct {
	t   testing.TB
	cfg *config.Config
	app *config.App
	s   *Server
	e   *echo.Echo
	ts  *httptest.Server
}

func newServer(t testing.TB, opts ...serverOpt) *tserver {
	t.Helper()
	st := &setup{cfg: testConfig(), fast: os.Getenv("PUSHER_TEST_FAST_ACCEPT") != "0"}
	st.opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, o := range opts {
		o(st)
	}
	st.opts.Config = st.cfg
	s := NewServer(st.opts)
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	s.Routes(e, "")
	for _, p := range st.prefixes {
		s.Routes(e, p)
	}
	ts := httptest.NewUnstartedServer(e)
	if st.fast && !st.tls {
		ts.Listener = s.FastListener(ts.Listener, "")
	}
	if st.tls {
		ts.StartTLS()
	} else {
		ts.Start()
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		_ = s.Shutdown(ctx)
		ts.Close()
	})
	return &tserver{t: t, cfg: st.cfg, app: &st.cfg.Apps[0], s: s, e: e, ts: ts}
}

func (ts *tserver) wsURL(key, query string) string {
	u := "ws" + strings.TrimPrefix(ts.ts.URL, "http") + "/app/" + key
	if query != "" {
		u += "?" + query
	}
	return u
}

// rawAPI sends an unsigned request with the given path and query.
func (ts *tserver) rawAPI(t testing.TB, method, pathAndQuery string, body []byte) (int, []byte) {
	t.Helper()
	return testutil.RawAPI(t, ts.ts, method, pathAndQuery, body)
}

// trigger publishes an event as the HTTP API does (encoded once, through the broker); the
// API itself is package api's, tested there.
func (ts *tserver) trigger(t testing.TB, channel, event, data string) {
	t.Helper()
	if err := ts.s.Publish(ts.app.ID, channel, event, []byte(data)); err != nil {
		t.Fatalf("trigger %s on %s: %v", event, channel, err)
	}
}

var (
	mustMarshal = testutil.MustMarshal
	mustJSONMap = testutil.MustJSONMap
)

// event is one server frame as a client sees it.
type event struct {
	Event   string          `json:"event"`
	Channel string          `json:"channel"`
	Data    json.RawMessage `json:"data"`
	UserID  string          `json:"user_id"`
	raw     []byte
}

// dataString returns data, which the server sends as a JSON-encoded string.
func (e event) dataString(t testing.TB) string {
	t.Helper()
	return testutil.DataString(t, e.Event, e.Data, e.raw)
}

// dataInto decodes the JSON inside the data string into v.
func (e event) dataInto(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(e.dataString(t)), v); err != nil {
		t.Fatalf("%s: data string is not JSON: %s", e.Event, e.raw)
	}
}

type errorData struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func (e event) errorCode(t testing.TB) int {
	t.Helper()
	var d errorData
	e.dataInto(t, &d)
	return d.Code
}

// client is a WebSocket test client. A reader goroutine queues every frame without bound,
// so the server never sees this client as slow.
type client struct {
	t      testing.TB
	ws     *websocket.Conn
	mu     sync.Mutex
	queue  []event
	notify chan struct{}
	done   chan struct{}
	err    error
	pongs  chan string

	countOnly atomic.Bool // only count frames (for floods)
	count     atomic.Int64

	socketID string
}

// dial opens a WebSocket without waiting for anything.
func dial(t testing.TB, u string, header http.Header) (*client, error) {
	t.Helper()
	d := websocket.Dialer{HandshakeTimeout: waitTimeout}
	if strings.HasPrefix(u, "wss:") {
		d.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} // httptest's own certificate
	}
	ws, resp, err := d.Dial(u, header)
	if err != nil {
		if resp != nil {
			return nil, errors.New(err.Error() + ": HTTP " + resp.Status)
		}
		return nil, err
	}
	c := &client{t: t, ws: ws, notify: make(chan struct{}, 1), done: make(chan struct{}), pongs: make(chan string, 16)}
	ws.SetPongHandler(func(s string) error {
		select {
		case c.pongs <- s:
		default:
		}
		return nil
	})
	go c.readLoop()
	t.Cleanup(func() { _ = ws.Close() })
	return c, nil
}

func (c *client) readLoop() {
	defer close(c.done)
	for {
		_, msg, err := c.ws.ReadMessage()
		if err != nil {
			c.mu.Lock()
			c.err = err
			c.mu.Unlock()
			c.signal()
			return
		}
		c.count.Add(1)
		if c.countOnly.Load() {
			continue
		}
		ev := event{raw: msg}
		if err := json.Unmarshal(msg, &ev); err != nil {
			ev.Event = "<invalid JSON>"
		}
		c.mu.Lock()
		c.queue = append(c.queue, ev)
		c.mu.Unlock()
		c.signal()
	}
}

func (c *client) signal() {
	select {
	case c.notify <- struct{}{}:
	default:
	}
}

// connect dials the test app and waits for connection_established.
func (ts *tserver) connect(t testing.TB) *client {
	t.Helper()
	c, err := dial(t, ts.wsURL(ts.app.Key, "protocol=7&client=js&version=8.4.0"), nil)
	if err != nil {
		t.Fatal(err)
	}
	ev := c.waitEvent("pusher:connection_established", "")
	var d struct {
		SocketID string `json:"socket_id"`
	}
	ev.dataInto(t, &d)
	c.socketID = d.SocketID
	// connection_established leaves with the 101 response, a moment before the server
	// registers the socket: wait for that so tests may look it up at once.
	testutil.WaitFor(t, "socket registered", func() bool { return ts.s.sockets.get(d.SocketID) != nil })
	return c
}

// tryNext returns the next frame, or false once d has passed or the connection ended.
func (c *client) tryNext(d time.Duration) (event, bool) {
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
				return event{}, false
			}
		case <-c.notify:
		case <-deadline.C:
			return event{}, false
		}
	}
}

// next returns the next frame or fails the test.
func (c *client) next() event {
	c.t.Helper()
	ev, ok := c.tryNext(waitTimeout)
	if !ok {
		c.t.Fatalf("no frame within %v (connection error: %v)", waitTimeout, c.readErr())
	}
	return ev
}

// waitEvent skips frames until one named name (on channel, if not "") arrives.
func (c *client) waitEvent(name, channel string) event {
	c.t.Helper()
	deadline := time.Now().Add(waitTimeout)
	var skipped []string
	for {
		ev, ok := c.tryNext(time.Until(deadline))
		if !ok {
			c.t.Fatalf("no %s on %q within %v; skipped %v (connection error: %v)", name, channel, waitTimeout, skipped, c.readErr())
		}
		if ev.Event == name && (channel == "" || ev.Channel == channel) {
			return ev
		}
		skipped = append(skipped, string(ev.raw))
	}
}

// expectNone watches for quietPeriod and fails if a matching frame arrives, or if the
// connection ends: a closed socket receives nothing, so silence from it proves nothing.
func (c *client) expectNone(name, channel string) {
	c.t.Helper()
	deadline := time.Now().Add(quietPeriod)
	for {
		ev, ok := c.tryNext(time.Until(deadline))
		if !ok {
			if c.isClosed() {
				c.t.Fatalf("connection ended while watching for no %q on %q: %v", name, channel, c.readErr())
			}
			return
		}
		if (name == "" || ev.Event == name) && (channel == "" || ev.Channel == channel) {
			c.t.Fatalf("unexpected frame: %s", ev.raw)
		}
	}
}

// waitError waits for a pusher:error and returns its code.
func (c *client) waitError() (int, string) {
	c.t.Helper()
	ev := c.waitEvent("pusher:error", "")
	var d errorData
	ev.dataInto(c.t, &d)
	return d.Code, d.Message
}

func (c *client) readErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// waitClose waits for the connection to end and returns the close code received (-1 if the
// connection ended without a close frame).
func (c *client) waitClose() int {
	c.t.Helper()
	select {
	case <-c.done:
	case <-time.After(waitTimeout):
		c.t.Fatalf("connection still open after %v", waitTimeout)
	}
	var ce *websocket.CloseError
	if errors.As(c.readErr(), &ce) {
		return ce.Code
	}
	return -1
}

func (c *client) isClosed() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

func (c *client) sendRaw(msg string) {
	c.t.Helper()
	if err := c.ws.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

func (c *client) send(v any) {
	c.t.Helper()
	c.sendRaw(string(mustMarshal(c.t, v)))
}

// ping checks that the connection is alive and answering.
func (c *client) ping() {
	c.t.Helper()
	c.send(map[string]any{"event": "pusher:ping", "data": map[string]any{}})
	c.waitEvent("pusher:pong", "")
}

func (c *client) subscribeMsg(channel, authField, channelData string) {
	c.t.Helper()
	d := map[string]any{"channel": channel}
	if authField != "" {
		d["auth"] = authField
	}
	if channelData != "" {
		d["channel_data"] = channelData
	}
	c.send(map[string]any{"event": "pusher:subscribe", "data": d})
}

// subscribe subscribes to a public channel and waits for subscription_succeeded.
func (c *client) subscribe(channel string) event {
	c.t.Helper()
	c.subscribeMsg(channel, "", "")
	return c.waitEvent("pusher_internal:subscription_succeeded", channel)
}

func privateAuth(key, secret, socketID, channel string) string {
	return key + ":" + auth.ChannelSignature(secret, socketID, channel)
}

func presenceAuth(key, secret, socketID, channel, channelData string) string {
	return key + ":" + auth.PresenceSignature(secret, socketID, channel, channelData)
}

// subscribePrivate subscribes with a valid signature and waits for success.
func (ts *tserver) subscribePrivate(c *client, channel string) event {
	c.t.Helper()
	c.subscribeMsg(channel, privateAuth(ts.app.Key, ts.app.Secret, c.socketID, channel), "")
	return c.waitEvent("pusher_internal:subscription_succeeded", channel)
}

// subscribePresence joins with channelData and waits for success.
func (ts *tserver) subscribePresence(c *client, channel, channelData string) event {
	c.t.Helper()
	c.subscribeMsg(channel, presenceAuth(ts.app.Key, ts.app.Secret, c.socketID, channel, channelData), channelData)
	return c.waitEvent("pusher_internal:subscription_succeeded", channel)
}

// signin signs the client in as userData (which must hold an "id").
func (ts *tserver) signin(c *client, userData string) event {
	c.t.Helper()
	c.send(map[string]any{"event": "pusher:signin", "data": map[string]any{
		"auth":      ts.app.Key + ":" + auth.SigninSignature(ts.app.Secret, c.socketID, userData),
		"user_data": userData,
	}})
	return c.waitEvent("pusher:signin_success", "")
}

// fakeClock is a settable Options.Now.
type fakeClock struct{ ns atomic.Int64 }

func newFakeClock(t time.Time) *fakeClock {
	c := &fakeClock{}
	c.ns.Store(t.UnixNano())
	return c
}

func (c *fakeClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// rawConn is a WebSocket client made by hand over TCP: it performs the handshake and then
// reads only when told to, so it can play a consumer that stops reading.
type rawConn struct {
	nc net.Conn
}

func rawDial(t testing.TB, addr, path string) *rawConn {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, waitTimeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(4096) // fill up sooner
	}
	var key [16]byte
	_, _ = rand.Read(key[:])
	req := "GET " + path + " HTTP/1.1\r\nHost: " + addr + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: " + base64.StdEncoding.EncodeToString(key[:]) + "\r\nSec-WebSocket-Version: 13\r\n\r\n"
	_ = nc.SetDeadline(time.Now().Add(waitTimeout))
	if _, err := io.WriteString(nc, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(nc), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("handshake: %s", resp.Status)
	}
	_ = nc.SetDeadline(time.Time{})
	return &rawConn{nc: nc}
}

// writeText sends one masked text frame, as a client must.
func (r *rawConn) writeText(t testing.TB, msg string) {
	t.Helper()
	var mask [4]byte
	_, _ = rand.Read(mask[:])
	n := len(msg)
	var b []byte
	switch {
	case n < 126:
		b = []byte{0x81, 0x80 | byte(n)}
	case n <= 0xFFFF:
		b = []byte{0x81, 0x80 | 126, byte(n >> 8), byte(n)}
	default:
		b = []byte{0x81, 0x80 | 127}
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	b = append(b, mask[:]...)
	for i := 0; i < n; i++ {
		b = append(b, msg[i]^mask[i%4])
	}
	if _, err := r.nc.Write(b); err != nil {
		t.Fatal(err)
	}
}
