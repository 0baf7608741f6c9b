package api

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/labstack/echo/v4"

	"github.com/reverbgo/reverbgo/auth"
	"github.com/reverbgo/reverbgo/config"
	"github.com/reverbgo/reverbgo/internal/pusherclient"
	"github.com/reverbgo/reverbgo/internal/testutil"
	"github.com/reverbgo/reverbgo/pusher"
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
	cfg      *config.Config
	opts     pusher.Options
	prefixes []string // mounted besides ""
	metrics  bool     // count requests with pusher's HTTPMetrics (prefix ""), as cmd/reverbgo does
}

type serverOpt func(*setup)

func withApp(fn func(*config.App)) serverOpt { return func(s *setup) { fn(&s.cfg.Apps[0]) } }

func withPrefix(p string) serverOpt { return func(s *setup) { s.prefixes = append(s.prefixes, p) } }

func withMetrics() serverOpt { return func(s *setup) { s.metrics = true } }

func testConfig() *config.Config { return testutil.TestConfig() }

// tserver is a real pusher.Server with the API mounted beside it on echo, wired as
// cmd/reverbgo wires them, behind an httptest server.
type tserver struct {
	cfg  *config.Config
	app  *config.App
	s    *pusher.Server
	http *API
	ts   *httptest.Server
}

func newServer(t testing.TB, opts ...serverOpt) *tserver {
	t.Helper()
	st := &setup{cfg: testConfig()}
	st.opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, o := range opts {
		o(st)
	}
	st.opts.Config = st.cfg
	s := pusher.NewServer(st.opts)
	a := New(Options{Config: st.cfg, Publisher: s, Info: s, Terminator: s})
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	if st.metrics {
		e.Use(s.HTTPMetrics(""))
	}
	for _, p := range append([]string{""}, st.prefixes...) {
		s.Routes(e, p)
		a.Routes(e, p)
	}
	ts := httptest.NewServer(e)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		_ = s.Shutdown(ctx)
		ts.Close()
	})
	return &tserver{cfg: st.cfg, app: &st.cfg.Apps[0], s: s, http: a, ts: ts}
}

// pusherApp is the test app's credentials.
func (ts *tserver) pusherApp() pusherclient.App {
	return pusherclient.App{ID: ts.app.ID, Key: ts.app.Key, Secret: ts.app.Secret}
}

// api sends a request signed like a server SDK (path without prefix).
func (ts *tserver) api(t testing.TB, method, path string, q url.Values, body []byte) (int, []byte) {
	t.Helper()
	signed := auth.SignRequest(method, path, q, body, ts.app.Key, ts.app.Secret, time.Now())
	return ts.rawAPI(t, method, path+"?"+signed.Encode(), body)
}

// rawAPI sends an unsigned request with the given path and query.
func (ts *tserver) rawAPI(t testing.TB, method, pathAndQuery string, body []byte) (int, []byte) {
	t.Helper()
	return testutil.RawAPI(t, ts.ts, method, pathAndQuery, body)
}

// trigger publishes through POST /apps/{id}/events and expects 200.
func (ts *tserver) trigger(t testing.TB, channel, event, data string) {
	t.Helper()
	body := mustMarshal(t, map[string]any{"name": event, "channel": channel, "data": data})
	if st, b := ts.api(t, "POST", "/apps/"+ts.app.ID+"/events", nil, body); st != 200 {
		t.Fatalf("trigger %s on %s: %d %s", event, channel, st, b)
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

// client is a WebSocket test client (gorilla, as a browser would speak). A reader goroutine
// queues every frame into a channel without bound, so the server never sees it as slow.
type client struct {
	t        testing.TB
	ws       *websocket.Conn
	frames   chan event
	done     chan struct{}
	mu       sync.Mutex
	err      error
	socketID string
}

func dial(t testing.TB, u string) *client {
	t.Helper()
	d := websocket.Dialer{HandshakeTimeout: waitTimeout}
	ws, _, err := d.Dial(u, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &client{t: t, ws: ws, frames: make(chan event, 4096), done: make(chan struct{})}
	go func() {
		defer close(c.done)
		for {
			_, msg, err := ws.ReadMessage()
			if err != nil {
				c.mu.Lock()
				c.err = err
				c.mu.Unlock()
				return
			}
			ev := event{raw: msg}
			if json.Unmarshal(msg, &ev) != nil {
				ev.Event = "<invalid JSON>"
			}
			c.frames <- ev
		}
	}()
	t.Cleanup(func() { _ = ws.Close() })
	return c
}

// connect dials the test app (under prefix) and waits for connection_established.
func (ts *tserver) connectAt(t testing.TB, prefix string) *client {
	t.Helper()
	c := dial(t, "ws"+strings.TrimPrefix(ts.ts.URL, "http")+prefix+"/app/"+ts.app.Key+"?protocol=7&client=js&version=8.4.0")
	ev := c.waitEvent("pusher:connection_established", "")
	var d struct {
		SocketID string `json:"socket_id"`
	}
	if err := json.Unmarshal([]byte(ev.dataString(t)), &d); err != nil {
		t.Fatal(err)
	}
	c.socketID = d.SocketID
	return c
}

func (ts *tserver) connect(t testing.TB) *client { t.Helper(); return ts.connectAt(t, "") }

func (c *client) readErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// tryNext returns the next frame, or false once d has passed or the connection ended.
func (c *client) tryNext(d time.Duration) (event, bool) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case ev := <-c.frames:
		return ev, true
	case <-timer.C:
		return event{}, false
	case <-c.done:
		select {
		case ev := <-c.frames:
			return ev, true
		default:
			return event{}, false
		}
	}
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

// expectNone watches for quietPeriod and fails if a matching frame arrives or the
// connection ends (a closed socket receives nothing, so its silence proves nothing).
func (c *client) expectNone(name, channel string) {
	c.t.Helper()
	deadline := time.Now().Add(quietPeriod)
	for {
		ev, ok := c.tryNext(time.Until(deadline))
		if !ok {
			select {
			case <-c.done:
				c.t.Fatalf("connection ended while watching for no %q on %q: %v", name, channel, c.readErr())
			default:
			}
			return
		}
		if (name == "" || ev.Event == name) && (channel == "" || ev.Channel == channel) {
			c.t.Fatalf("unexpected frame: %s", ev.raw)
		}
	}
}

// waitError waits for a pusher:error and returns its code.
func (c *client) waitError() int {
	c.t.Helper()
	var d struct {
		Code int `json:"code"`
	}
	if err := json.Unmarshal([]byte(c.waitEvent("pusher:error", "").dataString(c.t)), &d); err != nil {
		c.t.Fatal(err)
	}
	return d.Code
}

// waitClose waits for the connection to end and returns the close code (-1 without one).
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

func (c *client) send(v any) {
	c.t.Helper()
	if err := c.ws.WriteMessage(websocket.TextMessage, mustMarshal(c.t, v)); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// ping checks that the connection is alive and answering.
func (c *client) ping() {
	c.t.Helper()
	c.send(map[string]any{"event": "pusher:ping", "data": map[string]any{}})
	c.waitEvent("pusher:pong", "")
}

// subscribeWith sends pusher:subscribe (auth and channel_data when not "") and waits for
// subscription_succeeded.
func (c *client) subscribeWith(channel, authField, channelData string) {
	c.t.Helper()
	d := map[string]any{"channel": channel}
	if authField != "" {
		d["auth"] = authField
	}
	if channelData != "" {
		d["channel_data"] = channelData
	}
	c.send(map[string]any{"event": "pusher:subscribe", "data": d})
	c.waitEvent("pusher_internal:subscription_succeeded", channel)
}

func (c *client) subscribe(channel string) { c.t.Helper(); c.subscribeWith(channel, "", "") }

func (ts *tserver) subscribePrivate(c *client, channel string) {
	c.t.Helper()
	c.send(pusherclient.SubscribeMessage(ts.pusherApp(), c.socketID, channel, "", nil))
	c.waitEvent("pusher_internal:subscription_succeeded", channel)
}

func (ts *tserver) subscribePresence(c *client, channel, channelData string) {
	c.t.Helper()
	c.send(pusherclient.SubscribeMessage(ts.pusherApp(), c.socketID, channel, channelData, nil))
	c.waitEvent("pusher_internal:subscription_succeeded", channel)
}

// signin signs the client in as userData (which must hold an "id").
func (ts *tserver) signin(c *client, userData string) {
	c.t.Helper()
	c.send(map[string]any{"event": "pusher:signin", "data": map[string]any{
		"auth":      ts.app.Key + ":" + auth.SigninSignature(ts.app.Secret, c.socketID, userData),
		"user_data": userData,
	}})
	c.waitEvent("pusher:signin_success", "")
}
