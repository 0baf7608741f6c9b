package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	neturl "net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/reverbgo/reverbgo/auth"
	"github.com/reverbgo/reverbgo/config"
	"github.com/reverbgo/reverbgo/internal/pusherclient"
	"github.com/reverbgo/reverbgo/internal/testenv"
	"github.com/reverbgo/reverbgo/internal/testutil"
)

const (
	appID  = "app1"
	appKey = "app1-key"
	secret = "app1-secret"
)

// testNode is one in-process reverbgo behind an httptest server.
type testNode struct {
	n  *node
	ts *httptest.Server
}

// startNodes builds n nodes from one config; with scaling they share the Redis at redisURL.
func startNodes(t *testing.T, n int, redisURL, channel string) []*testNode {
	t.Helper()
	return startNodesWith(t, n, "accept_client_events_from: members, toolmark: {enabled: true}", redisURL, channel)
}

// startNodesWith is startNodes with extra flow-style keys for the app (e.g. its toolmark).
func startNodesWith(t *testing.T, n int, appKeys, redisURL, channel string) []*testNode {
	t.Helper()
	return startNodesTop(t, n, "", appKeys, redisURL, channel)
}

// startNodesTop is startNodesWith with top-level YAML (e.g. a server: line) before apps.
func startNodesTop(t *testing.T, n int, top, appKeys, redisURL, channel string) []*testNode {
	t.Helper()
	yaml := top + "apps:\n  - {app_id: " + appID + ", key: " + appKey + ", secret: " + secret + ", " + appKeys + "}\n"
	if redisURL != "" {
		yaml += fmt.Sprintf("scaling: {enabled: true, redis_url: %q, channel: %q}\n", redisURL, channel)
	}
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	out := make([]*testNode, n)
	for i := range out {
		cfg, err := config.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = startNode(t, cfg)
	}
	return out
}

// startNode validates cfg and runs one node behind an httptest server, shut down when the
// test ends.
func startNode(t *testing.T, cfg *config.Config) *testNode {
	t.Helper()
	nd := buildNode(t, cfg, prometheus.NewRegistry())
	ts := httptest.NewServer(nd.e)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		nd.shutdown(ctx, nil)
		ts.Close()
	})
	return &testNode{nd, ts}
}

// buildNode validates cfg and builds a node that logs nowhere; the caller shuts it down.
func buildNode(t *testing.T, cfg *config.Config, metrics *prometheus.Registry) *node {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	nd, err := newNode(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), metrics)
	if err != nil {
		t.Fatal(err)
	}
	return nd
}

type event struct {
	Event   string
	Channel string
	Data    string
}

var testApp = pusherclient.App{ID: appID, Key: appKey, Secret: secret}

// wsClient is a Pusher client whose reader goroutine feeds events.
type wsClient struct {
	t      *testing.T
	conn   *pusherclient.Conn
	events chan event
	socket string
}

func connect(t *testing.T, nd *testNode) *wsClient {
	t.Helper()
	conn, err := pusherclient.DialWith(context.Background(), nd.ts.URL, appKey, pusherclient.Options{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	c := &wsClient{t: t, conn: conn, events: make(chan event, 100), socket: conn.ID}
	go func() {
		defer close(c.events)
		for {
			f, err := conn.Read()
			if err != nil {
				if errors.Is(err, pusherclient.ErrBadFrame) {
					continue
				}
				return
			}
			c.events <- event{f.Event, f.Channel, f.Str()}
		}
	}()
	t.Cleanup(func() { _ = conn.Close() })
	return c
}

// next returns the next event and fails if it is not name on channel.
func (c *wsClient) next(name, channel string) event {
	c.t.Helper()
	select {
	case ev, ok := <-c.events:
		if !ok {
			c.t.Fatalf("socket closed waiting for %s", name)
		}
		if ev.Event != name || ev.Channel != channel {
			c.t.Fatalf("got %s on %q (%s), want %s on %q", ev.Event, ev.Channel, ev.Data, name, channel)
		}
		return ev
	case <-time.After(5 * time.Second):
		c.t.Fatalf("timed out waiting for %s on %q", name, channel)
	}
	return event{}
}

// skipTo returns the first event that is name on channel, skipping others.
func (c *wsClient) skipTo(name, channel string) event {
	c.t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case ev, ok := <-c.events:
			if !ok {
				c.t.Fatalf("socket closed waiting for %s", name)
			}
			if ev.Event == name && ev.Channel == channel {
				return ev
			}
		case <-deadline:
			c.t.Fatalf("timed out waiting for %s on %q", name, channel)
		}
	}
}

func (c *wsClient) send(v any) {
	c.t.Helper()
	if err := c.conn.Send(v); err != nil {
		c.t.Fatal(err)
	}
}

func (c *wsClient) subscribe(channel string) {
	c.t.Helper()
	c.send(pusherclient.SubscribeMessage(testApp, c.socket, channel, "", nil))
	c.next("pusher_internal:subscription_succeeded", channel)
}

// joinPresence subscribes as user and returns the member count of subscription_succeeded.
func (c *wsClient) joinPresence(channel, user string) int {
	c.t.Helper()
	data := `{"user_id":"` + user + `","user_info":{"name":"` + user + `"}}`
	c.send(pusherclient.SubscribeMessage(testApp, c.socket, channel, data, nil))
	var p struct {
		Presence struct {
			Count int `json:"count"`
		} `json:"presence"`
	}
	_ = json.Unmarshal([]byte(c.next("pusher_internal:subscription_succeeded", channel).Data), &p)
	return p.Presence.Count
}

// trigger publishes through a node's signed HTTP API.
func trigger(t *testing.T, nd *testNode, channel, name, data string) {
	t.Helper()
	st, err := pusherclient.Trigger(context.Background(), http.DefaultClient, nd.ts.URL, testApp, channel, name, data)
	if err != nil {
		t.Fatal(err)
	}
	if st != 200 {
		t.Fatalf("trigger on %s: %d", channel, st)
	}
}

// apiGet sends a signed GET through a node's HTTP API and returns the body.
func apiGet(t *testing.T, nd *testNode, path, query string) string {
	t.Helper()
	q, _ := neturl.ParseQuery(query)
	_, b, err := pusherclient.API(context.Background(), http.DefaultClient, nd.ts.URL, testApp, http.MethodGet, path, q, nil)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func redisURLs(t *testing.T) map[string]string {
	mr := miniredis.RunT(t)
	urls := map[string]string{"miniredis": "redis://" + mr.Addr() + "/0"}
	if u := testenv.RedisURL(t); u != "" {
		urls["redis"] = u
	} else {
		t.Log("REVERBGO_TEST_REDIS_URL not set: real-Redis case skipped")
	}
	return urls
}

// TestTwoNodes drives two in-process servers on one Redis with WebSocket clients: a publish
// through node A's HTTP API reaches a subscriber on node B, and presence is cluster-wide.
func TestTwoNodes(t *testing.T) {
	for name, url := range redisURLs(t) {
		t.Run(name, func(t *testing.T) {
			nodes := startNodes(t, 2, url, "test-"+uuid.NewString())
			a, b := nodes[0], nodes[1]

			onB := connect(t, b)
			onB.subscribe("news")
			trigger(t, a, "news", "hello", `{"n":1}`)
			if ev := onB.next("hello", "news"); ev.Data != `{"n":1}` {
				t.Fatalf("data %q", ev.Data)
			}

			const room = "presence-room"
			obs := connect(t, b)
			if n := obs.joinPresence(room, "obs"); n != 1 {
				t.Fatalf("observer sees %d members", n)
			}
			// step sends frame from c, then subscribes c to a fresh public channel: with
			// scaling, presence work runs on the connection's task goroutine and every later
			// request but a ping waits behind it, so subscription_succeeded proves the frame's
			// work is done, its publishes queued on c's node. A marker published through the
			// same node afterwards leaves through the same broker queue, so the observer must
			// see exactly want, then it.
			barriers := 0
			step := func(c *wsClient, via *testNode, frame map[string]any, want ...string) {
				t.Helper()
				if frame != nil {
					c.send(frame)
				}
				barriers++
				barrier := "barrier-" + strconv.Itoa(barriers)
				c.send(map[string]any{"event": "pusher:subscribe", "data": map[string]string{"channel": barrier}})
				c.skipTo("pusher_internal:subscription_succeeded", barrier) // c is in the room too
				trigger(t, via, room, "marker", "{}")
				for _, w := range want {
					obs.next(w, room)
				}
				obs.next("marker", room)
			}
			unsubscribe := map[string]any{"event": "pusher:unsubscribe", "data": map[string]string{"channel": room}}
			u1a := connect(t, a)
			if n := u1a.joinPresence(room, "u1"); n != 2 {
				t.Fatalf("u1 on A sees %d members, want 2", n)
			}
			step(u1a, a, nil, "pusher_internal:member_added")
			u1b := connect(t, b)
			if n := u1b.joinPresence(room, "u1"); n != 2 {
				t.Fatalf("u1's second socket on B sees %d members, want 2", n)
			}
			step(u1b, b, nil)                                           // no second member_added
			step(u1a, a, unsubscribe)                                   // u1 is still on B: no member_removed
			step(u1b, b, unsubscribe, "pusher_internal:member_removed") // the last socket: once

			// Cluster-wide answers on A about sockets on B.
			tm := connect(t, b)
			tmCh := "private-toolmark.u9.c1"
			tm.send(pusherclient.SubscribeMessage(testApp, tm.socket, tmCh, "", nil))
			var session struct{ Token string }
			_ = json.Unmarshal([]byte(tm.next("toolmark.session", tmCh).Data), &session)
			tm.next("pusher_internal:subscription_succeeded", tmCh)
			// The page POSTs to A: A verifies B's socket and its token from the socket index.
			for token, want := range map[string]int{"": 401, session.Token + "x": 401, session.Token: 204} {
				if got := pagePost(t, a, tm.socket, token, "c1"); got != want {
					t.Fatalf("page POST on A for B's socket with token %q: %d, want %d", token, got, want)
				}
			}
			if !a.n.srv.Subscribed(appID, tmCh) {
				t.Fatal("A does not see the toolmark page subscribed on B")
			}
			if app, chans, ok := a.n.srv.Channels(tm.socket); !ok || app != appID || len(chans) != 1 || chans[0] != tmCh {
				t.Fatalf("A's lookup of B's socket: %q %q %v", app, chans, ok)
			}
			if a.n.srv.Subscribed(appID, "private-toolmark.nobody.c1") {
				t.Fatal("an empty toolmark channel reads as subscribed")
			}
			testutil.WaitFor(t, "A's API to count B's subscriber of news", func() bool {
				return apiGet(t, a, "/apps/"+appID+"/channels/news", "info=subscription_count") == `{"occupied":true,"subscription_count":1}`
			})

			// terminate_connections sent to A closes the user's socket on B only.
			victim, bystander := connect(t, b), connect(t, b)
			for c, user := range map[*wsClient]string{victim: "t1", bystander: "t2"} {
				ud := `{"id":"` + user + `"}`
				c.send(map[string]any{"event": "pusher:signin", "data": map[string]string{
					"auth": appKey + ":" + auth.SigninSignature(secret, c.socket, ud), "user_data": ud}})
				c.next("pusher:signin_success", "")
			}
			path := "/apps/" + appID + "/users/t1/terminate_connections"
			q := auth.SignRequest("POST", path, nil, []byte("{}"), appKey, secret, time.Now())
			tr, err := http.Post(a.ts.URL+path+"?"+q.Encode(), "application/json", strings.NewReader("{}"))
			if err != nil || tr.StatusCode != 200 {
				t.Fatalf("terminate_connections: %v %v", tr, err)
			}
			_ = tr.Body.Close()
			victim.skipTo("pusher:error", "")
			for range victim.events { // drained until the server closes it
			}
			bystander.send(map[string]any{"event": "pusher:ping", "data": map[string]any{}})
			bystander.next("pusher:pong", "")

			resp, err := http.Get(a.ts.URL + "/up")
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("/up: %v %v", resp, err)
			}
			_ = resp.Body.Close()
		})
	}
}

// pagePost posts a manifest to a node's page endpoint and returns the status.
func pagePost(t *testing.T, nd *testNode, socketID, token, conv string) int {
	t.Helper()
	body := `{"protocol":1,"type":"manifest","clientId":"k1","rev":1,"tools":[]}`
	req, _ := http.NewRequest(http.MethodPost, nd.ts.URL+"/toolmark/bridge/"+conv, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Socket-ID", socketID)
	if token != "" {
		req.Header.Set("X-Toolmark-Token", token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

// TestScalingRefusesUnreachableRedis: a node with scaling enabled does not start alone.
func TestScalingRefusesUnreachableRedis(t *testing.T) {
	// Port 1: nothing listens there, and no other test can take it (a closed miniredis's
	// port could be handed to a parallel test's server before newNode dials it).
	url := "redis://127.0.0.1:1/0"
	path := filepath.Join(t.TempDir(), "config.yaml")
	yaml := "apps:\n  - {app_id: a, key: k, secret: s}\nscaling: {enabled: true, redis_url: \"" + url + "\"}\n"
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := newNode(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry()); err == nil || !strings.Contains(err.Error(), "unreachable") {
		t.Fatalf("newNode with Redis down: %v", err)
	}
}
