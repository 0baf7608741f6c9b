package api

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

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

type (
	event  = testutil.Event
	client = testutil.WSClient
)

// dial opens a WebSocket to u or fails the test.
func dial(t testing.TB, u string) *client {
	t.Helper()
	c, err := testutil.DialWS(t, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// connect dials the test app (under prefix) and waits for connection_established.
func (ts *tserver) connectAt(t testing.TB, prefix string) *client {
	t.Helper()
	c := dial(t, "ws"+strings.TrimPrefix(ts.ts.URL, "http")+prefix+"/app/"+ts.app.Key+"?protocol=7&client=js&version=8.4.0")
	var d struct {
		SocketID string `json:"socket_id"`
	}
	c.WaitEvent("pusher:connection_established", "").DataInto(t, &d)
	c.SocketID = d.SocketID
	return c
}

func (ts *tserver) connect(t testing.TB) *client { t.Helper(); return ts.connectAt(t, "") }

func (ts *tserver) subscribePrivate(c *client, channel string) {
	c.T.Helper()
	c.SubscribeSigned(ts.pusherApp(), channel, "")
}

func (ts *tserver) subscribePresence(c *client, channel, channelData string) {
	c.T.Helper()
	c.SubscribeSigned(ts.pusherApp(), channel, channelData)
}

// signin signs the client in as userData (which must hold an "id").
func (ts *tserver) signin(c *client, userData string) {
	c.T.Helper()
	c.Signin(ts.pusherApp(), userData)
}
