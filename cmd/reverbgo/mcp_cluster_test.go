package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/reverbgo/reverbgo/bridge"
	"github.com/reverbgo/reverbgo/internal/pusherclient"
	"github.com/reverbgo/reverbgo/internal/testutil"
)

type bearerRT struct{ token string }

func (b bearerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// mcpPagePost POSTs a page message to a node's page endpoint as the socket, with its page token.
func mcpPagePost(t *testing.T, nd *testNode, socket, token, conv string, msg any) {
	t.Helper()
	body, _ := json.Marshal(msg)
	req, _ := http.NewRequest(http.MethodPost, nd.ts.URL+"/toolmark/bridge/"+conv, strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Socket-ID", socket)
	req.Header.Set("X-Toolmark-Token", token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	if res.StatusCode != http.StatusNoContent {
		t.Fatalf("page %s: %d", body, res.StatusCode)
	}
}

// TestMCPAcrossNodes: the official Go SDK client at 2026-07-28 (stateless, list_changed over
// subscriptions/listen) and at 2025-11-25 (session, GET stream), on one node and on two: an
// MCP client on node A gets tools/list_changed for a manifest that node B received (over the
// Redis manifest feed), and its tools/call reaches the page whose socket and result POST are
// on B.
func TestMCPAcrossNodes(t *testing.T) {
	type topology struct {
		url   string
		nodes int
	}
	tops := map[string]topology{"one node": {"", 1}}
	for name, url := range redisURLs(t) {
		tops["two nodes on "+name] = topology{url, 2}
	}
	for name, top := range tops {
		for _, version := range []string{"2026-07-28", "2025-11-25"} {
			t.Run(name+"/"+version, func(t *testing.T) {
				// MCP needs server.public_url (or public_hosts): the tokens' aud is fixed.
				nodes := startNodesTop(t, top.nodes, "server: {public_url: '"+mcpPublicURL+"'}\n",
					"toolmark: {enabled: true, mcp: {enabled: true}}", top.url, "test-"+uuid.NewString())
				a, b := nodes[0], nodes[len(nodes)-1]
				mcpFlow(t, a, b, version)
			})
		}
	}
}

// mcpPublicURL is the nodes' server.public_url, so every node names one resource.
const mcpPublicURL = "http://mcp.test"

// mcpFlow: a page on b, an MCP client at version on a: list, list_changed, call.
func mcpFlow(t *testing.T, a, b *testNode, version string) {
	conv := "c" + strings.ReplaceAll(uuid.NewString(), "-", "")[:12]
	ch := "private-toolmark.u1." + conv
	page := connect(t, b)
	page.send(pusherclient.SubscribeMessage(testApp, page.socket, ch, "", nil))
	var session struct {
		Token string `json:"token"`
	}
	_ = json.Unmarshal([]byte(page.next("toolmark.session", ch).Data), &session)
	page.next("pusher_internal:subscription_succeeded", ch)
	pt := session.Token
	tools := []map[string]any{{"name": "notes.list", "llmName": "notes__list", "description": "List", "hints": map[string]any{}}}
	mcpPagePost(t, b, page.socket, pt, conv, map[string]any{"protocol": 1, "type": "manifest", "clientId": "p1", "rev": 1, "tools": tools})

	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"iss": appKey, "sub": "u1",
		"conversation_id": conv, "aud": mcpPublicURL + "/toolmark/mcp", "exp": time.Now().Add(time.Minute).Unix()}).SignedString([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	// Occupancy is cluster-wide but reaches A a moment after B confirmed the subscription; the
	// 2026-07-28 client lists at once (no initialize round trips before it).
	key := bridge.ConvKey{App: appID, User: "u1", Conversation: conv}
	var seen string
	testutil.WaitFor(t, "node A to see the page", func() bool {
		m, err := a.n.br.PageManifest(context.Background(), key)
		now := fmt.Sprintf("node A: manifest %v, err %v, page subscribed %v", m != nil, err, a.n.srv.Subscribed(appID, ch))
		if now != seen { // logged on failure only
			t.Log(now)
			seen = now
		}
		return err == nil && m != nil
	})
	var changed atomic.Int32
	c := sdk.NewClient(&sdk.Implementation{Name: "t", Version: "1"}, &sdk.ClientOptions{
		ToolListChangedHandler: func(context.Context, *sdk.ToolListChangedRequest) { changed.Add(1) }})
	cs, err := c.Connect(context.Background(), &sdk.StreamableClientTransport{Endpoint: a.ts.URL + "/toolmark/mcp",
		HTTPClient: &http.Client{Transport: bearerRT{tok}}}, &sdk.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatal(err)
	}
	if got := cs.InitializeResult().ProtocolVersion; got != version {
		t.Fatalf("negotiated %s, want %s", got, version)
	}
	defer cs.Close()

	// The describe travels A → Redis → B's socket; the page answers on B.
	type msg struct {
		Message struct {
			Type, ID string
			Rev      *int64
		} `json:"message"`
	}
	answer := func(want string, result any) {
		ev := page.skipTo("toolmark.message", ch)
		var m msg
		if err := json.Unmarshal([]byte(ev.Data), &m); err != nil || m.Message.Type != want {
			t.Errorf("page got %s, want %s", ev.Data, want)
			return
		}
		mcpPagePost(t, b, page.socket, pt, conv, map[string]any{"protocol": 1, "type": "result", "clientId": "p1", "id": m.Message.ID, "result": result})
	}
	listed := make(chan *sdk.ListToolsResult, 1)
	go func() { l, _ := cs.ListTools(context.Background(), nil); listed <- l }()
	answer("describe", map[string]any{"status": "ok", "data": map[string]any{"inputSchema": map[string]any{"type": "object"}}})
	if l := <-listed; l == nil || len(l.Tools) != 1 || l.Tools[0].Name != "notes__list" {
		t.Fatalf("list on A: %+v", l)
	}

	mcpPagePost(t, b, page.socket, pt, conv, map[string]any{"protocol": 1, "type": "manifest", "clientId": "p1", "rev": 2, "tools": tools})
	testutil.WaitFor(t, "list_changed on A for a manifest B received", func() bool { return changed.Load() == 1 })

	called := make(chan *sdk.CallToolResult, 1)
	go func() {
		r, _ := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "notes__list"})
		called <- r
	}()
	answer("call", map[string]any{"status": "ok", "data": 1})
	if r := <-called; r == nil || r.IsError {
		t.Fatalf("call through A: %+v", r)
	}
}
