package console

import (
	"fmt"

	"bufio"
	"context"
	"github.com/reverbgo/reverbgo/httpguard"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/reverbgo/reverbgo/bridge"
	"github.com/reverbgo/reverbgo/channels"
	"github.com/reverbgo/reverbgo/internal/testutil"
	"github.com/reverbgo/reverbgo/pusher"
)

const testToken = "t0ken-for-tests"

// fakeServer is the console's Server with canned answers; it records the observer and triggers.
type fakeServer struct {
	mu        sync.Mutex
	observer  pusher.Observer
	triggered []string
	chans     []channels.ChannelInfo
	members   map[string][]channels.Member
}

func (f *fakeServer) SetObserver(o pusher.Observer) { f.mu.Lock(); f.observer = o; f.mu.Unlock() }
func (f *fakeServer) observing() bool               { f.mu.Lock(); defer f.mu.Unlock(); return f.observer != nil }
func (f *fakeServer) Counters(string) (uint64, uint64, uint64) {
	return 0, 0, 0
}
func (f *fakeServer) ConnectionCount(string) int { return 3 }
func (f *fakeServer) ChannelList(context.Context, string) []channels.ChannelInfo {
	return f.chans
}
func (f *fakeServer) Members(_ context.Context, _, ch string) ([]channels.Member, error) {
	return f.members[ch], nil
}
func (f *fakeServer) Health(context.Context) map[string]string { return nil }
func (f *fakeServer) Clustered() bool                          { return false }
func (f *fakeServer) Trigger(_ context.Context, app, ch, ev string, data []byte) error {
	if ch == "bad channel" {
		return &pusher.TriggerError{Status: http.StatusBadRequest, Message: "invalid channel name"}
	}
	f.mu.Lock()
	f.triggered = append(f.triggered, app+" "+ch+" "+ev+" "+string(data))
	f.mu.Unlock()
	return nil
}

type fakeBridge struct{ observer bridge.Observer }

func (b *fakeBridge) SetObserver(o bridge.Observer) { b.observer = o }
func (b *fakeBridge) Manifest(_ context.Context, _, user, conv string) (*bridge.Manifest, error) {
	ro := true
	return &bridge.Manifest{ClientID: "page-1", Rev: 2, Tools: []bridge.Tool{{Name: "notes.list", Description: "secret description", Hints: bridge.Hints{ReadOnly: &ro}}}}, nil
}

type harness struct {
	c   *Console
	srv *fakeServer
	ts  *httptest.Server
}

func newHarness(t *testing.T, budget int) *harness {
	t.Helper()
	srv := &fakeServer{members: map[string][]channels.Member{}}
	c := New(Options{Token: testToken, Apps: []string{"app1"}, Server: srv, Bridge: &fakeBridge{},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), EventsPerSecond: budget,
		Now: func() time.Time { return time.Unix(1_800_000_000, 0) }}) // one second: a fixed sampling window
	e := echo.New()
	c.Register(e, "/ws")
	ts := httptest.NewServer(e)
	t.Cleanup(func() { ts.Close(); c.Close() })
	return &harness{c: c, srv: srv, ts: ts}
}

var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func (h *harness) login(t *testing.T, token, origin string) *http.Response {
	t.Helper()
	return h.loginFrom(t, token, origin, "")
}

// loginFrom logs in with X-Forwarded-For: xff (none when empty).
func (h *harness) loginFrom(t *testing.T, token, origin, xff string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("POST", h.ts.URL+"/ws/console/login", strings.NewReader(url.Values{"token": {token}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if xff != "" {
		req.Header.Set("X-Forwarded-For", xff)
	}
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	res, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { res.Body.Close() })
	return res
}

func (h *harness) session(t *testing.T) *http.Cookie {
	t.Helper()
	res := h.login(t, testToken, h.ts.URL)
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("login: %d", res.StatusCode)
	}
	for _, ck := range res.Cookies() {
		if ck.Name == cookieName {
			return ck
		}
	}
	t.Fatal("no session cookie")
	return nil
}

func (h *harness) do(t *testing.T, method, path string, ck *http.Cookie, header map[string]string, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, h.ts.URL+path, strings.NewReader(body))
	if ck != nil {
		req.AddCookie(ck)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

func TestLogin(t *testing.T) {
	h := newHarness(t, 0)
	st, body := h.do(t, "GET", "/ws/console", nil, nil, "")
	if st != 200 || !strings.Contains(body, `<input id="token" name="token" type="password"`) {
		t.Fatalf("login form: %d %s", st, body)
	}
	tests := []struct {
		name, token, origin string
		status              int
		want                string
	}{
		{"wrong token", "nope", h.ts.URL, http.StatusUnauthorized, "Wrong token."},
		{"empty token", "", h.ts.URL, http.StatusUnauthorized, "Wrong token."},
		{"prefix of the token", testToken[:5], h.ts.URL, http.StatusUnauthorized, "Wrong token."},
		{"no origin", testToken, "", http.StatusForbidden, "Cross-site login refused."},
		{"other origin", testToken, "http://evil.example", http.StatusForbidden, "Cross-site login refused."},
		{"other port", testToken, "http://127.0.0.1:1", http.StatusForbidden, "Cross-site login refused."},
		{"opaque origin", testToken, "null", http.StatusForbidden, "Cross-site login refused."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h.c.logins = loginLimiter{} // the per-second failure budget is tested below
			res := h.login(t, tt.token, tt.origin)
			b, _ := io.ReadAll(res.Body)
			if res.StatusCode != tt.status || !strings.Contains(string(b), tt.want) || len(res.Cookies()) != 0 {
				t.Fatalf("%d %q cookies=%v", res.StatusCode, b, res.Cookies())
			}
			if !strings.Contains(string(b), `name="token" type="password"`) {
				t.Fatal("the form is not shown again")
			}
		})
	}
	ck := h.session(t)
	if !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Path != "/ws/console" || ck.Secure || len(ck.Value) != 64 || strings.Contains(ck.Value, testToken) {
		t.Fatalf("cookie %+v", ck)
	}
	st, body = h.do(t, "GET", "/ws/console", ck, nil, "")
	if st != 200 || !strings.Contains(body, `id="views"`) || strings.Contains(body, testToken) {
		t.Fatalf("console page: %d", st)
	}
}

func TestFailedLoginsAreLimited(t *testing.T) {
	h := newHarness(t, 0)
	now := time.Unix(1000, 0)
	h.c.now = func() time.Time { return now }
	for i := 0; i < maxFailedLogins; i++ {
		if st := h.login(t, "nope", h.ts.URL).StatusCode; st != http.StatusUnauthorized {
			t.Fatalf("attempt %d: %d", i, st)
		}
	}
	if st := h.login(t, testToken, h.ts.URL).StatusCode; st != http.StatusTooManyRequests {
		t.Fatalf("over the budget: %d", st)
	}
	now = now.Add(time.Second)
	if st := h.login(t, testToken, h.ts.URL).StatusCode; st != http.StatusSeeOther {
		t.Fatalf("next second: %d", st)
	}
}

// TestFailedLoginsArePerClient: one client (by X-Forwarded-For behind a trusted proxy) that
// used its failure budget does not lock another out; all clients together stop at the
// global ceiling.
func TestFailedLoginsArePerClient(t *testing.T) {
	h := newHarness(t, 0)
	now := time.Unix(1000, 0)
	h.c.now = func() time.Time { return now }
	clients, err := httpguard.NewClients([]string{"127.0.0.1", "::1"})
	if err != nil {
		t.Fatal(err)
	}
	h.c.opts.Clients = clients
	for i := 0; i < maxFailedLogins; i++ {
		if st := h.loginFrom(t, "nope", h.ts.URL, "198.51.100.1").StatusCode; st != http.StatusUnauthorized {
			t.Fatalf("attempt %d: %d", i, st)
		}
	}
	if st := h.loginFrom(t, testToken, h.ts.URL, "198.51.100.1").StatusCode; st != http.StatusTooManyRequests {
		t.Fatalf("the guessing client over its budget: %d", st)
	}
	if st := h.loginFrom(t, testToken, h.ts.URL, "198.51.100.2").StatusCode; st != http.StatusSeeOther {
		t.Fatalf("the operator, from another address: %d", st)
	}
	// Many clients: the ceiling holds for everyone.
	for i := 0; h.c.logins.all < maxFailedLoginsAll; i++ {
		h.loginFrom(t, "nope", h.ts.URL, fmt.Sprintf("203.0.113.%d", i))
	}
	if st := h.loginFrom(t, testToken, h.ts.URL, "198.51.100.3").StatusCode; st != http.StatusTooManyRequests {
		t.Fatalf("over the global ceiling: %d", st)
	}
	now = now.Add(time.Second)
	if st := h.loginFrom(t, testToken, h.ts.URL, "198.51.100.1").StatusCode; st != http.StatusSeeOther {
		t.Fatalf("next second: %d", st)
	}
}

func TestEndpointsNeedASession(t *testing.T) {
	h := newHarness(t, 0)
	bogus := &http.Cookie{Name: cookieName, Value: strings.Repeat("a", 64)}
	for _, ck := range []*http.Cookie{nil, bogus} {
		for _, r := range []struct{ method, path string }{
			{"GET", "/ws/console/api/session"}, {"GET", "/ws/console/api/stream?app=app1"},
			{"POST", "/ws/console/api/trigger"}, {"POST", "/ws/console/api/logout"},
		} {
			if st, _ := h.do(t, r.method, r.path, ck, nil, ""); st != http.StatusUnauthorized {
				t.Errorf("%s %s with %v: %d, want 401", r.method, r.path, ck, st)
			}
		}
	}
}

func TestTriggerNeedsTheHeaderAndTheOrigin(t *testing.T) {
	h := newHarness(t, 0)
	ck := h.session(t)
	_, sess := h.do(t, "GET", "/ws/console/api/session", ck, nil, "")
	csrf := sess[strings.Index(sess, `"csrf":"`)+8:][:64]
	body := `{"app":"app1","channel":"orders","event":"test","data":"{\"a\":1}"}`
	tests := []struct {
		name   string
		header map[string]string
		body   string
		status int
	}{
		{"no header", map[string]string{"Origin": h.ts.URL}, body, http.StatusForbidden},
		{"wrong header", map[string]string{"Origin": h.ts.URL, csrfHeader: strings.Repeat("b", 64)}, body, http.StatusForbidden},
		{"no origin", map[string]string{csrfHeader: csrf}, body, http.StatusForbidden},
		{"other origin", map[string]string{csrfHeader: csrf, "Origin": "http://evil.example"}, body, http.StatusForbidden},
		{"unknown app", map[string]string{csrfHeader: csrf, "Origin": h.ts.URL}, `{"app":"x","channel":"a","event":"e","data":""}`, http.StatusNotFound},
		{"refused by the API rules", map[string]string{csrfHeader: csrf, "Origin": h.ts.URL}, `{"app":"app1","channel":"bad channel","event":"e","data":""}`, http.StatusBadRequest},
		{"ok", map[string]string{csrfHeader: csrf, "Origin": h.ts.URL}, body, http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if st, b := h.do(t, "POST", "/ws/console/api/trigger", ck, tt.header, tt.body); st != tt.status {
				t.Fatalf("%d %s, want %d", st, b, tt.status)
			}
		})
	}
	if got := h.srv.triggered; len(got) != 1 || got[0] != `app1 orders test "{\"a\":1}"` {
		t.Fatalf("triggered %q", got)
	}
	// Logout ends the session.
	if st, _ := h.do(t, "POST", "/ws/console/api/logout", ck, map[string]string{csrfHeader: csrf, "Origin": h.ts.URL}, ""); st != http.StatusNoContent {
		t.Fatalf("logout: %d", st)
	}
	if st, _ := h.do(t, "GET", "/ws/console/api/session", ck, nil, ""); st != http.StatusUnauthorized {
		t.Fatalf("after logout: %d", st)
	}
}

// readEvents reads SSE messages until want has been seen or the deadline passes.
func readEvents(t *testing.T, r *bufio.Reader, want func(event, data string) bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	var event string
	for time.Now().Before(deadline) {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("stream ended: %v", err)
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case strings.HasPrefix(line, "event: "):
			event = line[7:]
		case strings.HasPrefix(line, "data: "):
			if want(event, line[6:]) {
				return
			}
		}
	}
	t.Fatal("not seen before the deadline")
}

// TestStream: the observer is attached only while a stream is open; events, snapshots and the
// dropped counter reach the browser; hidden payloads stay hidden.
func TestStream(t *testing.T) {
	h := newHarness(t, 3)
	ck := h.session(t)
	if h.srv.observing() {
		t.Fatal("observer attached with no console open")
	}
	h.srv.chans = []channels.ChannelInfo{{Name: "presence-room", SubscriptionCount: 2}, {Name: bridge.ChannelPrefix + "u1.c1", SubscriptionCount: 1}}
	h.srv.members["presence-room"] = []channels.Member{{UserID: "bob", Info: []byte(`{"n":"B"}`)}, {UserID: "alice", Info: []byte(`{}`)}}

	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", h.ts.URL+"/ws/console/api/stream?app=app1", nil)
	req.AddCookie(ck)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("%d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
	r := bufio.NewReader(res.Body)
	readEvents(t, r, func(ev, _ string) bool { return ev == "hello" })
	if !h.srv.observing() {
		t.Fatal("observer not attached while a console is open")
	}
	readEvents(t, r, func(ev, data string) bool {
		return ev == "channels" && strings.Contains(data, `"members":[{"id":"alice","info":"{}"},{"id":"bob","info":"{\"n\":\"B\"}"}]`)
	})
	tap := h.srv.observer
	tap.Event("app1", pusher.ObservedAPI, "private-encrypted-x", "secret", `{"ciphertext":"SECRET"}`, "")
	tap.Event("app1", pusher.ObservedAPI, bridge.ChannelPrefix+"u1.c1", "toolmark.message", `{"input":"SECRET"}`, "")
	tap.Event("app1", pusher.ObservedClient, "orders", "client-x", strings.Repeat("é", 150), "1.2")
	for i := 0; i < 5; i++ { // over the budget of 3 per second: dropped
		tap.Event("app1", pusher.ObservedAPI, "orders", "flood", "{}", "")
	}
	seen, toolmark := 0, false
	readEvents(t, r, func(ev, data string) bool {
		if ev == "toolmark" {
			toolmark = strings.Contains(data, `"tools":[{"name":"notes.list","hints":{"readOnly":true}}]`) && !strings.Contains(data, "secret description")
		}
		if ev == "event" {
			if strings.Contains(data, "SECRET") || strings.Contains(data, "flood") {
				t.Fatalf("leaked or not sampled: %s", data)
			}
			if strings.Contains(data, `"event":"client-x"`) && (!strings.Contains(data, `"size":300`) || strings.Count(data, "é") != 100) {
				t.Fatalf("preview: %s", data)
			}
			seen++
		}
		return ev == "stats" && seen == 3 && toolmark && strings.Contains(data, `"dropped":5`)
	})
	cancel()
	testutil.WaitFor(t, "the observer to detach after the last console closed", func() bool { return !h.srv.observing() })
}

func TestPreviewAndHiddenData(t *testing.T) {
	tests := []struct{ channel, data, want string }{
		{"orders", "short", "short"},
		{"orders", strings.Repeat("a", 250), strings.Repeat("a", 200) + "…"},
		{"orders", strings.Repeat("a", 199) + "éé", strings.Repeat("a", 199) + "…"},
		{"private-encrypted-x", "ciphertext", "(encrypted payload not shown)"},
		{"private-encrypted-cache-x", "ciphertext", "(encrypted payload not shown)"},
		{"private-toolmark.u.c", "input", "(Toolmark payload not shown)"},
	}
	for _, tt := range tests {
		got := preview(tt.data)
		if note, hide := hiddenData(tt.channel); hide {
			got = note
		}
		if got != tt.want {
			t.Errorf("%s %q: got %q, want %q", tt.channel, tt.data, got, tt.want)
		}
	}
}

// TestSecureCookieUnderTLS: under TLS the session cookie is Secure.
func TestSecureCookieUnderTLS(t *testing.T) {
	srv := &fakeServer{members: map[string][]channels.Member{}}
	c := New(Options{Token: testToken, Apps: []string{"app1"}, Server: srv, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	e := echo.New()
	c.Register(e, "")
	ts := httptest.NewTLSServer(e)
	t.Cleanup(func() { ts.Close(); c.Close() })
	client := ts.Client()
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	login := func(origin string) *http.Response {
		req, _ := http.NewRequest("POST", ts.URL+"/console/login", strings.NewReader("token="+testToken))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", origin)
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res
	}
	if res := login("https://evil.example"); res.StatusCode != http.StatusForbidden {
		t.Fatalf("foreign Origin: %d", res.StatusCode)
	}
	res := login(ts.URL)
	if res.StatusCode != http.StatusSeeOther || len(res.Cookies()) != 1 || !res.Cookies()[0].Secure || !res.Cookies()[0].HttpOnly {
		t.Fatalf("%d %+v", res.StatusCode, res.Cookies())
	}
}

// TestBehindATLSProxy: a plain listener behind a TLS-terminating proxy accepts the browser's
// https Origin for the same host and marks the cookie Secure.
func TestBehindATLSProxy(t *testing.T) {
	h := newHarness(t, 0)
	host := strings.TrimPrefix(h.ts.URL, "http://")
	req, _ := http.NewRequest("POST", h.ts.URL+"/ws/console/login", strings.NewReader("token="+testToken))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "https://"+host)
	req.Header.Set("X-Forwarded-Proto", "https")
	res, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusSeeOther || len(res.Cookies()) != 1 || !res.Cookies()[0].Secure {
		t.Fatalf("%d %+v", res.StatusCode, res.Cookies())
	}
}
