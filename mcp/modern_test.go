package mcp

import (
	"context"
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync/atomic"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/reverbgo/reverbgo/bridge"
	"github.com/reverbgo/reverbgo/internal/testutil"
)

// TestProtocol20260728: the Go SDK client left to its own choice negotiates 2026-07-28 (the
// stateless handler, server/discover), lists and calls the page's tools, and gets
// tools/list_changed on its subscriptions/listen stream, tagged with the listen's id.
func TestProtocol20260728(t *testing.T) {
	h := newHarness(t, bridgeLimits())
	h.page.setAnswer(standardPage)
	h.openPage("c1", "p1", 1, testTools)
	var changed atomic.Int32
	var tagged atomic.Bool
	c := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, &sdk.ClientOptions{
		ToolListChangedHandler: func(_ context.Context, r *sdk.ToolListChangedRequest) {
			if r.Params != nil && r.Params.Meta[metaSubscriptionID] != nil {
				tagged.Store(true)
			}
			changed.Add(1)
		}})
	tr := &sdk.StreamableClientTransport{Endpoint: h.srv.URL + "/toolmark/mcp",
		HTTPClient: &http.Client{Transport: bearer{token("secret1", nil), http.DefaultTransport}}}
	cs, err := c.Connect(context.Background(), tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	if v := cs.InitializeResult().ProtocolVersion; v != "2026-07-28" {
		t.Fatalf("negotiated %s", v)
	}
	ctx := context.Background()
	list, err := cs.ListTools(ctx, nil)
	if err != nil || len(list.Tools) != 2 || list.Tools[0].Name != "notes__create" {
		t.Fatalf("list: %v %s", err, mustJSON(list))
	}
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "notes__create", Arguments: map[string]any{"title": "Hi"}})
	if err != nil || res.IsError {
		t.Fatalf("call: %v %s", err, mustJSON(res))
	}
	calls := h.page.messages(bridge.TypeCall)
	if len(calls) != 1 || calls[0].Tool != "notes.create" || *calls[0].Rev != 1 {
		t.Fatalf("calls %+v", calls)
	}
	if n := h.mcp.sessionCount(bridge.ConvKey{App: "app1", User: "u1", Conversation: "c1"}); n != 1 {
		t.Fatalf("%d registered listens, want the one subscriptions/listen", n)
	}
	h.openPage("c1", "p1", 2, testTools[1:])
	testutil.WaitFor(t, "list_changed over subscriptions/listen", func() bool { return changed.Load() == 1 })
	if !tagged.Load() {
		t.Fatal("list_changed without the listen's subscription id")
	}
	list, err = cs.ListTools(ctx, nil)
	if err != nil || len(list.Tools) != 1 {
		t.Fatalf("relist: %v %s", err, mustJSON(list))
	}
	_ = cs.Close()
	testutil.WaitFor(t, "the listen to end", func() bool {
		return h.mcp.sessionCount(bridge.ConvKey{App: "app1", User: "u1", Conversation: "c1"}) == 0
	})
}

// TestResource: the audience and metadata URL of a request, table-driven. Without
// public_url the resource comes from Host only when public_hosts lists it (issue 24): any
// other Host is refused, never turned into an audience.
func TestResource(t *testing.T) {
	loopbackProxy := []netip.Prefix{}
	hosts := []string{"127.0.0.1:8080", "ws.example.com"}
	tests := []struct {
		name, publicURL, path, host, remote, xfp string
		tls                                      bool
		proxies                                  []netip.Prefix
		hosts                                    []string
		want                                     string // "" = refused with code
		code                                     int
	}{
		{name: "public_url wins", publicURL: "https://ws.example.com", path: "/ws", host: "evil:1", remote: "1.2.3.4:5", want: "https://ws.example.com/ws/toolmark/mcp"},
		{name: "from a listed Host", host: "127.0.0.1:8080", remote: "1.2.3.4:5", hosts: hosts, want: "http://127.0.0.1:8080/toolmark/mcp"},
		{name: "Host is lowercased", host: "WS.Example.com", remote: "1.2.3.4:5", hosts: hosts, want: "http://ws.example.com/toolmark/mcp"},
		{name: "TLS", host: "ws.example.com", remote: "1.2.3.4:5", tls: true, hosts: hosts, want: "https://ws.example.com/toolmark/mcp"},
		{name: "X-Forwarded-Proto from loopback", host: "ws.example.com", remote: "127.0.0.1:5", xfp: "https", proxies: loopbackProxy, hosts: hosts, want: "https://ws.example.com/toolmark/mcp"},
		{name: "X-Forwarded-Proto list", host: "ws.example.com", remote: "[::1]:5", xfp: "https, http", hosts: hosts, want: "https://ws.example.com/toolmark/mcp"},
		{name: "X-Forwarded-Proto from a stranger", host: "ws.example.com", remote: "1.2.3.4:5", xfp: "https", hosts: hosts, want: "http://ws.example.com/toolmark/mcp"},
		{name: "X-Forwarded-Proto from a configured proxy", host: "ws.example.com", remote: "10.1.2.3:5", xfp: "https",
			proxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, hosts: hosts, want: "https://ws.example.com/toolmark/mcp"},
		{name: "loopback not trusted once proxies are configured", host: "ws.example.com", remote: "127.0.0.1:5", xfp: "https",
			proxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, hosts: hosts, want: "http://ws.example.com/toolmark/mcp"},
		{name: "a Host not listed", host: "staging.example.com", remote: "1.2.3.4:5", hosts: hosts, code: http.StatusMisdirectedRequest},
		{name: "a listed name on another port", host: "ws.example.com:8443", remote: "1.2.3.4:5", hosts: hosts, code: http.StatusMisdirectedRequest},
		{name: "neither public_url nor public_hosts", host: "ws.example.com", remote: "1.2.3.4:5", code: http.StatusMisdirectedRequest},
		{name: "a quote in Host", host: `a"b`, remote: "1.2.3.4:5", hosts: hosts, code: http.StatusBadRequest},
		{name: "a slash in Host", host: "a/b", remote: "1.2.3.4:5", hosts: hosts, code: http.StatusBadRequest},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := &Server{opts: Options{PublicURL: tc.publicURL, PublicHosts: tc.hosts, Path: tc.path, TrustedProxies: tc.proxies}}
			r := httptest.NewRequest(http.MethodPost, "/toolmark/mcp", nil)
			r.Host, r.RemoteAddr = tc.host, tc.remote
			if tc.xfp != "" {
				r.Header.Set("X-Forwarded-Proto", tc.xfp)
			}
			if tc.tls {
				r.TLS = &tls.ConnectionState{}
			}
			res, meta, herr := s.resource(r)
			if tc.want == "" {
				if herr == nil || herr.code != tc.code {
					t.Fatalf("resource %q, refusal %+v; want refused with %d", res, herr, tc.code)
				}
				return
			}
			if herr != nil || res != tc.want {
				t.Fatalf("resource %q (%+v), want %q", res, herr, tc.want)
			}
			if wantMeta := res[:len(res)-len(tc.path+endpointPath)] + wellKnownPath + tc.path + endpointPath; meta != wantMeta {
				t.Fatalf("metadata %q, want %q", meta, wantMeta)
			}
		})
	}
}

// TestFollower: the latest conversation of each user, bounded.
func TestFollower(t *testing.T) {
	f := newFollower(2)
	k := func(user, conv string) bridge.ConvKey {
		return bridge.ConvKey{App: "a", User: user, Conversation: conv}
	}
	for _, step := range []struct {
		saw     bridge.ConvKey
		changed bool
	}{{k("u1", "c1"), true}, {k("u1", "c1"), false}, {k("u1", "c2"), true}, {k("u2", "c9"), true}} {
		if got := f.saw(step.saw); got != step.changed {
			t.Fatalf("saw %+v: %v", step.saw, got)
		}
	}
	if f.latest("a", "u1") != "c2" || f.latest("a", "u2") != "c9" || f.latest("b", "u1") != "" {
		t.Fatal("latest")
	}
	f.saw(k("u3", "c3")) // over the bound: u1, the oldest, goes
	if f.latest("a", "u1") != "" || f.latest("a", "u3") != "c3" {
		t.Fatal("bound")
	}
}

// TestListenEndsOnClose: Close ends the 2026-07-28 listen streams, as it ends GET streams, so a
// graceful shutdown does not wait for them.
func TestListenEndsOnClose(t *testing.T) {
	h := newHarness(t, bridgeLimits())
	h.openPage("c1", "p1", 1, testTools)
	cs := h.clientAt(token("secret1", nil), "", func() {})
	if v := cs.InitializeResult().ProtocolVersion; v != "2026-07-28" {
		t.Fatalf("negotiated %s", v)
	}
	key := bridge.ConvKey{App: "app1", User: "u1", Conversation: "c1"}
	testutil.WaitFor(t, "the listen", func() bool { return h.mcp.sessionCount(key) == 1 })
	h.mcp.Close()
	testutil.WaitFor(t, "the listen to end", func() bool { return h.mcp.sessionCount(key) == 0 })
}
