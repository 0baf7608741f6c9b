package bridge

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
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

	"github.com/reverbgo/reverbgo/auth"
	"github.com/reverbgo/reverbgo/config"
	"github.com/reverbgo/reverbgo/internal/testutil"
)

// Fakes over mocks: each records what happened and tests assert on the record.

type published struct {
	App, Channel, Event string
	Data                []byte
}

type fakePublisher struct {
	mu     sync.Mutex
	events []published
	fail   bool
	onPub  func(p published) // called outside the lock
}

func (f *fakePublisher) Publish(appID, channel, event string, data []byte) error {
	p := published{appID, channel, event, append([]byte(nil), data...)}
	f.mu.Lock()
	if f.fail {
		f.mu.Unlock()
		return fmt.Errorf("publish failed")
	}
	f.events = append(f.events, p)
	hook := f.onPub
	f.mu.Unlock()
	if hook != nil {
		hook(p)
	}
	return nil
}

func (f *fakePublisher) all() []published {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]published(nil), f.events...)
}

// wireMsg is a published message decoded for assertions.
type wireMsg struct {
	Protocol int             `json:"protocol"`
	Type     string          `json:"type"`
	ClientID string          `json:"clientId"`
	ID       string          `json:"id"`
	Rev      *int64          `json:"rev"`
	Tool     string          `json:"tool"`
	Input    json.RawMessage `json:"input"`
}

func decodeEvent(t testing.TB, p published) wireMsg {
	t.Helper()
	var env struct {
		Message json.RawMessage `json:"message"`
	}
	if err := json.Unmarshal(p.Data, &env); err != nil {
		t.Fatalf("event data %s: %v", p.Data, err)
	}
	if err := ValidateToPage(env.Message); err != nil {
		t.Fatalf("server emitted an invalid message %s: %v", env.Message, err)
	}
	var m wireMsg
	if err := json.Unmarshal(env.Message, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// waitMsg polls until a message of type typ (and id, if not empty) was published.
func (f *fakePublisher) waitMsg(t testing.TB, typ, id string) wireMsg {
	t.Helper()
	return f.waitFirst(t, "a published "+typ+" "+id, func(m wireMsg) bool { return m.Type == typ && (id == "" || m.ID == id) })
}

// waitOther polls until a message of type typ whose id is not notID was published.
func (f *fakePublisher) waitOther(t testing.TB, typ, notID string) wireMsg {
	t.Helper()
	return f.waitFirst(t, "a published "+typ+" other than "+notID, func(m wireMsg) bool { return m.Type == typ && m.ID != notID })
}

// waitFirst polls until a published message satisfies match and returns the first that does.
func (f *fakePublisher) waitFirst(t testing.TB, what string, match func(wireMsg) bool) wireMsg {
	t.Helper()
	var found wireMsg
	testutil.WaitFor(t, what, func() bool {
		for _, p := range f.all() {
			if m := decodeEvent(t, p); match(m) {
				found = m
				return true
			}
		}
		return false
	})
	return found
}

// pageToken is the page token the fake sockets were issued.
func pageToken(socketID string) string { return testutil.PageToken(socketID) }

// clock is a settable clock shared by the bridge, limiter and signatures.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// syncBuffer collects log lines (the shared helper).
type syncBuffer = testutil.SyncBuffer

const prefix = "/px"

type harness struct {
	t       testing.TB
	b       *Bridge
	e       *echo.Echo
	pub     *fakePublisher
	sockets *testutil.Sockets
	hooks   *testutil.Emitter
	apps    testutil.Apps
	clock   *clock
	logs    *syncBuffer
	store   *MemoryStore
}

func newHarness(t testing.TB, mod func(*Options)) *harness {
	t.Helper()
	h := &harness{t: t, pub: &fakePublisher{}, hooks: &testutil.Emitter{}, clock: &clock{t: time.Unix(1_700_000_000, 0)},
		logs: &syncBuffer{}}
	h.apps = testutil.Apps{
		{ID: "app1", Key: "key1", Secret: "secret1", AllowedOrigins: []string{"*.example.com"},
			MaxMessageSize: 10000, Toolmark: config.Toolmark{Enabled: true, CallTimeoutMS: 30000, MaxTimeoutMS: 600000}},
		{ID: "app2", Key: "key2", Secret: "secret2", Toolmark: config.Toolmark{Enabled: false}},
	}
	// Every toolmark channel of a socket carries the page token pageToken(id).
	h.sockets = &testutil.Sockets{Hash: TokenHash, Prefix: ChannelPrefix}
	h.sockets.Set("1.1", "app1", "presence-room", "private-toolmark.u1.c1")
	h.sockets.Set("2.1", "app1", "private-other")
	h.sockets.Set("3.1", "app1", "private-toolmark.u1.c1", "private-toolmark.u2.c1")
	h.sockets.Set("4.1", "app2", "private-toolmark.u1.c1")
	h.sockets.Set("5.1", "app1", "private-toolmark.u2.c1")
	h.sockets.Set("6.1", "app1", "private-toolmark.u1.c2")
	h.store = NewMemoryStore(MemoryOptions{Now: h.clock.Now})
	opts := Options{Store: h.store, Publisher: h.pub, Sockets: h.sockets, Webhooks: h.hooks, Apps: h.apps,
		Logger: slog.New(slog.NewJSONHandler(h.logs, nil)), Now: h.clock.Now}
	if mod != nil {
		mod(&opts)
	}
	h.b = New(opts)
	h.e = echo.New()
	h.b.Register(h.e.Group(prefix), prefix)
	t.Cleanup(func() {
		h.b.Close()
		_ = h.store.Close()
	})
	return h
}

func (h *harness) do(req *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.e.ServeHTTP(rec, req)
	return rec
}

// page POSTs a page message as socket sid for conversation conv.
func (h *harness) page(sid, conv, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, prefix+"/toolmark/bridge/"+conv, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if sid != "" {
		req.Header.Set("X-Socket-ID", sid)
		req.Header.Set("X-Toolmark-Token", pageToken(sid))
	}
	return h.do(req)
}

// signedReq builds a signed app request for path (without prefix).
func (h *harness) signedReq(ctx context.Context, method, app, path string, query url.Values, body []byte) *http.Request {
	a := h.apps.AppByID(app)
	key, secret := "key1", "secret1"
	if a != nil {
		key, secret = a.Key, a.Secret
	}
	q := auth.SignRequest(method, path, query, body, key, secret, h.clock.Now())
	req := httptest.NewRequestWithContext(ctx, method, prefix+path+"?"+q.Encode(), bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	return req
}

func (h *harness) app(method, path string, body string) *httptest.ResponseRecorder {
	return h.do(h.signedReq(context.Background(), method, "app1", path, nil, []byte(body)))
}

type callResp struct {
	Code   int
	ID     string          `json:"id"`
	Result json.RawMessage `json:"result"`
	Hints  json.RawMessage `json:"hints"`
	Error  string          `json:"error"`
	Raw    string
}

func parseCall(t testing.TB, rec *httptest.ResponseRecorder) callResp {
	var r callResp
	r.Code, r.Raw = rec.Code, rec.Body.String()
	if rec.Body.Len() > 0 {
		if err := json.Unmarshal(rec.Body.Bytes(), &r); err != nil {
			t.Errorf("response %q: %v", rec.Body.String(), err)
		}
	}
	return r
}

// startCall runs an agent call asynchronously; the channel yields its response.
func (h *harness) startCall(ctx context.Context, kind, body string) <-chan callResp {
	ch := make(chan callResp, 1)
	req := h.signedReq(ctx, http.MethodPost, "app1", "/apps/app1/toolmark/"+kind, nil, []byte(body))
	go func() { ch <- parseCall(h.t, h.do(req)) }()
	return ch
}

func recv(t testing.TB, ch <-chan callResp) callResp {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("agent call did not return")
		return callResp{}
	}
}

const client1 = "k7c1e0de-0000-4000-8000-000000000001"

func manifestMsg(client string, rev int, tools string) string {
	return fmt.Sprintf(`{"protocol":1,"type":"manifest","clientId":%q,"rev":%d,"tools":[%s]}`, client, rev, tools)
}

const toolsJSON = `{"name":"form.fill","llmName":"form__fill","description":"Fill","hints":{"readOnly":false,"consequential":true,"future":1},"extra":true},
{"name":"form.submit","llmName":"form__submit","title":"Submit","description":"Submit","hints":{},"mode":"stepwise"}`

// withManifest installs a manifest for u1/c1 via s1.
func (h *harness) withManifest(client string, rev int) {
	h.t.Helper()
	if rec := h.page("1.1", "c1", manifestMsg(client, rev, toolsJSON)); rec.Code != http.StatusNoContent {
		h.t.Fatalf("manifest: %d %s", rec.Code, rec.Body)
	}
}

func resultMsg(client, id, result string) string {
	return fmt.Sprintf(`{"protocol":1,"type":"result","clientId":%q,"id":%q,"result":%s}`, client, id, result)
}

func confirmedMsg(client, confirmID, result string) string {
	return fmt.Sprintf(`{"protocol":1,"type":"confirmed","clientId":%q,"confirmId":%q,"result":%s}`, client, confirmID, result)
}

func readAll(r io.Reader) string {
	b, _ := io.ReadAll(r)
	return string(b)
}
