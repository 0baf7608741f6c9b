package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/labstack/echo/v4"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/reverbgo/reverbgo/bridge"
	"github.com/reverbgo/reverbgo/config"
	"github.com/reverbgo/reverbgo/internal/testutil"
)

// Fakes over mocks: a real Bridge and MCP server on an httptest server; the "page" is a
// Publisher that answers each broadcast message by POSTing to the bridge's page endpoint, as
// @toolmark/core's echoTransport does.

// sockID is the (valid, numeric) socket id of conv's page; sockToken its page token.
func sockID(conv string) string {
	return "1." + strconv.FormatUint(uint64(crc32.ChecksumIEEE([]byte(conv))), 10)
}

func sockToken(id string) string { return testutil.PageToken(id) }

// pageMsg is a server-to-page message as the page decodes it.
type pageMsg struct {
	Type     string          `json:"type"`
	ClientID string          `json:"clientId"`
	ID       string          `json:"id"`
	Tool     string          `json:"tool"`
	Rev      *int64          `json:"rev"`
	Input    json.RawMessage `json:"input"`
}

// fakePage answers messages with answer(m): a ToolResult to POST, or nil for no answer.
type fakePage struct {
	t      testing.TB
	url    string
	mu     sync.Mutex
	got    []pageMsg
	answer func(m pageMsg) json.RawMessage
	// posts counts answers in flight: the bridge hands a result to the waiting call before it
	// writes the page's 204, so a test can end while a POST is still being answered; cleanup
	// waits for them before it closes the server (closing first made the POST fail with EOF).
	posts sync.WaitGroup
	// handler, when set, takes the page's POSTs in process (no connection, no client), for
	// the allocation counts of the server's own work.
	handler http.Handler
}

func (p *fakePage) Publish(_, channel, _ string, data []byte) error {
	var env struct {
		Message pageMsg `json:"message"`
	}
	if err := json.Unmarshal(data, &env); err != nil {
		p.t.Errorf("published %s: %v", data, err)
		return nil
	}
	m := env.Message
	p.mu.Lock()
	p.got = append(p.got, m)
	answer := p.answer
	p.mu.Unlock()
	if answer == nil || m.Type == bridge.TypeCancel {
		return nil
	}
	if res := answer(m); res != nil {
		conv := channel[strings.LastIndexByte(channel, '.')+1:]
		p.posts.Add(1)
		go func() {
			defer p.posts.Done()
			p.post(conv, map[string]any{"protocol": 1, "type": "result", "clientId": m.ClientID, "id": m.ID, "result": res})
		}()
	}
	return nil
}

// pageClient is the fake page's own HTTP client, one connection per POST, as a browser page has
// its own connection pool apart from the agent's.
var pageClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second}

func (p *fakePage) post(conv string, msg any) int {
	body, _ := json.Marshal(msg)
	req, _ := http.NewRequest(http.MethodPost, p.url+"/toolmark/bridge/"+conv, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Socket-ID", sockID(conv))
	req.Header.Set("X-Toolmark-Token", sockToken(sockID(conv)))
	if p.handler != nil {
		rec := httptest.NewRecorder()
		p.handler.ServeHTTP(rec, req)
		return rec.Code
	}
	res, err := pageClient.Do(req)
	if err != nil {
		p.t.Errorf("page post: %v", err)
		return 0
	}
	_, _ = io.Copy(io.Discard, res.Body)
	_ = res.Body.Close()
	return res.StatusCode
}

func (p *fakePage) messages(typ string) []pageMsg {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []pageMsg
	for _, m := range p.got {
		if typ == "" || m.Type == typ {
			out = append(out, m)
		}
	}
	return out
}

func (p *fakePage) setAnswer(f func(m pageMsg) json.RawMessage) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.answer = f
}

type harness struct {
	t       testing.TB
	hooks   *testutil.Emitter
	srv     *httptest.Server
	br      *bridge.Bridge
	mcp     *Server
	page    *fakePage
	sockets *testutil.Sockets
	apps    testutil.Apps
	logs    *syncBuffer
}

// syncBuffer collects log lines (the shared helper).
type syncBuffer = testutil.SyncBuffer

func testApps() testutil.Apps {
	return testutil.Apps{
		{ID: "app1", Key: "key1", Secret: "secret1", Toolmark: config.Toolmark{Enabled: true, CallTimeoutMS: 3000,
			MaxTimeoutMS: 600000, MCP: config.ToolmarkMCP{Enabled: true}}},
		{ID: "app2", Key: "key2", Secret: "secret2", Toolmark: config.Toolmark{Enabled: true}},
		{ID: "app3", Key: "key3", Secret: "secret3", Toolmark: config.Toolmark{MCP: config.ToolmarkMCP{Enabled: true}}},
		{ID: "app4", Key: "key4", Secret: "secret4", Toolmark: config.Toolmark{Enabled: true, MCP: config.ToolmarkMCP{Enabled: true}}},
	}
}

func newHarness(t testing.TB, limits bridge.Limits, with ...func(*Options)) *harness {
	h := &harness{t: t, hooks: &testutil.Emitter{},
		sockets: &testutil.Sockets{Hash: bridge.TokenHash, Prefix: bridge.ChannelPrefix}, apps: testApps(), logs: &syncBuffer{}}
	h.page = &fakePage{t: t}
	logger := slog.New(slog.NewJSONHandler(h.logs, nil))
	feed := bridge.NewLocalFeed()
	mem := bridge.NewMemoryStore(bridge.MemoryOptions{})
	h.br = bridge.New(bridge.Options{Store: bridge.WithManifestFeed(mem, feed, nil), Publisher: h.page, Sockets: h.sockets,
		Webhooks: h.hooks, Apps: h.apps, Logger: logger, Limits: limits})
	opts := Options{Bridge: h.br, Apps: h.apps, Feed: feed, Logger: logger, PublicURL: testPublicURL}
	for _, f := range with {
		f(&opts)
	}
	h.mcp = New(opts)
	e := echo.New()
	g := e.Group("")
	h.br.Register(g, "")
	g.Any("/toolmark/mcp", echo.WrapHandler(h.mcp))
	h.srv = httptest.NewServer(e)
	h.page.url = h.srv.URL
	t.Cleanup(func() {
		h.page.posts.Wait()
		h.mcp.Close()
		h.srv.CloseClientConnections()
		h.srv.Close()
		h.br.Close()
		_ = mem.Close()
	})
	return h
}

// openPage subscribes the page's socket to conv and posts a manifest.
func (h *harness) openPage(conv, clientID string, rev int64, tools []map[string]any) {
	h.t.Helper()
	h.sockets.Set(sockID(conv), "app1", bridge.Channel("u1", conv))
	if code := h.page.post(conv, map[string]any{"protocol": 1, "type": "manifest", "clientId": clientID, "rev": rev, "tools": tools}); code != http.StatusNoContent {
		h.t.Fatalf("manifest: %d", code)
	}
}

func (h *harness) closePage(conv string) {
	h.sockets.Remove(sockID(conv))
}

// testPublicURL is the harness's server.public_url, so testResource is every token's aud.
const (
	testPublicURL = "http://mcp.test"
	testResource  = testPublicURL + "/toolmark/mcp"
)

// token mints an HS256 token; claims override the defaults (nil deletes one).
func token(secret string, claims map[string]any) string {
	c := jwt.MapClaims{"iss": "key1", "sub": "u1", "conversation_id": "c1", "aud": testResource,
		"exp": time.Now().Add(time.Hour).Unix()}
	for k, v := range claims {
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
	}
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString([]byte(secret))
	if err != nil {
		panic(err)
	}
	return s
}

// bearer adds the Authorization header to every request of an MCP client.
type bearer struct {
	token string
	base  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.base.RoundTrip(r)
}

// client connects the Go SDK's MCP client with tok at protocol 2025-11-25 (sessions, GET
// stream); onListChanged (optional) sees notifications/tools/list_changed.
func (h *harness) client(tok string, onListChanged func()) *sdk.ClientSession {
	h.t.Helper()
	return h.clientAt(tok, "2025-11-25", onListChanged)
}

// clientAt is client at protocol version ("" = the SDK's own choice, 2026-07-28 first).
func (h *harness) clientAt(tok, version string, onListChanged func()) *sdk.ClientSession {
	h.t.Helper()
	opts := &sdk.ClientOptions{}
	if onListChanged != nil {
		opts.ToolListChangedHandler = func(context.Context, *sdk.ToolListChangedRequest) { onListChanged() }
	}
	c := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, opts)
	tr := &sdk.StreamableClientTransport{Endpoint: h.srv.URL + "/toolmark/mcp",
		HTTPClient: &http.Client{Transport: bearer{tok, http.DefaultTransport}}, DisableStandaloneSSE: onListChanged == nil}
	cs, err := c.Connect(context.Background(), tr, &sdk.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		h.t.Fatalf("connect: %v", err)
	}
	h.t.Cleanup(func() { _ = cs.Close() })
	return cs
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprint(err))
	}
	return b
}
