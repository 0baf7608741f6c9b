package pusher

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reverbgo/reverbgo/internal/pusherclient"
	"github.com/reverbgo/reverbgo/internal/testutil"

	"github.com/labstack/echo/v4"

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

type (
	event     = testutil.Event
	errorData = testutil.ErrorData
	client    = testutil.WSClient
)

var (
	privateAuth  = testutil.PrivateAuth
	presenceAuth = testutil.PresenceAuth
)

// dial opens a WebSocket without waiting for anything.
func dial(t testing.TB, u string, header http.Header) (*client, error) {
	t.Helper()
	return testutil.DialWS(t, u, header)
}

// connect dials the test app and waits for connection_established.
func (ts *tserver) connect(t testing.TB) *client {
	t.Helper()
	c, err := dial(t, ts.wsURL(ts.app.Key, "protocol=7&client=js&version=8.4.0"), nil)
	if err != nil {
		t.Fatal(err)
	}
	ts.established(t, c)
	return c
}

// established reads connection_established into c.SocketID and waits for the server to
// register the socket.
func (ts *tserver) established(t testing.TB, c *client) {
	t.Helper()
	var d struct {
		SocketID string `json:"socket_id"`
	}
	c.WaitEvent("pusher:connection_established", "").DataInto(t, &d)
	c.SocketID = d.SocketID
	// connection_established leaves with the 101 response, a moment before the server
	// registers the socket: wait for that so tests may look it up at once.
	testutil.WaitFor(t, "socket registered", func() bool { return ts.s.sockets.get(d.SocketID) != nil })
}

// pusherApp is the test app's credentials.
func (ts *tserver) pusherApp() pusherclient.App {
	return pusherclient.App{ID: ts.app.ID, Key: ts.app.Key, Secret: ts.app.Secret}
}

// subscribePrivate subscribes with a valid signature and waits for success.
func (ts *tserver) subscribePrivate(c *client, channel string) event {
	c.T.Helper()
	return c.SubscribeWith(channel, privateAuth(ts.app.Key, ts.app.Secret, c.SocketID, channel), "")
}

// subscribePresence joins with channelData and waits for success.
func (ts *tserver) subscribePresence(c *client, channel, channelData string) event {
	c.T.Helper()
	return c.SubscribeSigned(ts.pusherApp(), channel, channelData)
}

// signin signs the client in as userData (which must hold an "id").
func (ts *tserver) signin(c *client, userData string) event {
	c.T.Helper()
	return c.Signin(ts.pusherApp(), userData)
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
