package api

import (
	"encoding/json"
	"fmt"
	"github.com/reverbgo/reverbgo/internal/testutil"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/reverbgo/reverbgo/auth"
	"github.com/reverbgo/reverbgo/config"
)

func TestTriggerDeliversDataIntact(t *testing.T) {
	ts := newServer(t)
	c := ts.connect(t)
	c.Subscribe("news")
	datas := []string{
		`{"some":"data"}`,
		`plain text`,
		`{"quote":"\"","backslash":"\\","nl":"a\nb","uni":"héllo ✓ 😀","ls":" ","html":"<b>&</b>"}`,
		``,
	}
	for i, d := range datas {
		name := fmt.Sprintf("ev-%d", i)
		ts.trigger(t, "news", name, d)
		ev := c.WaitEvent(name, "news")
		if got := ev.DataString(t); got != d {
			t.Errorf("data %q, want %q", got, d)
		}
		if ev.UserID != "" {
			t.Errorf("API event carries user_id: %s", ev.Raw)
		}
	}
	// data sent as a JSON object (not a string) is refused, as Pusher and Reverb do: SDKs
	// JSON-encode it first. (TestAPIInputTypes covers every field.)
	body := []byte(`{"name":"obj","channel":"news","data":{"a":[1,2]}}`)
	if st, b := ts.api(t, "POST", "/apps/"+testAppID+"/events", nil, body); st != 400 || !strings.Contains(string(b), "data must be a string") {
		t.Fatalf("%d %s", st, b)
	}
	c.ExpectNone("obj", "news")
}

func TestTriggerChannelsListAndExclusion(t *testing.T) {
	ts := newServer(t)
	a, b := ts.connect(t), ts.connect(t)
	for _, c := range []*client{a, b} {
		c.Subscribe("one")
		c.Subscribe("two")
	}
	body := mustMarshal(t, map[string]any{"name": "multi", "channels": []string{"one", "two"}, "data": "x"})
	st, resp := ts.api(t, "POST", "/apps/"+testAppID+"/events", nil, body)
	if st != 200 || string(resp) != "{}\n" && string(resp) != "{}" {
		t.Fatalf("%d %s", st, resp)
	}
	for _, c := range []*client{a, b} {
		c.WaitEvent("multi", "one")
		c.WaitEvent("multi", "two")
	}

	// socket_id excludes that socket only.
	body = mustMarshal(t, map[string]any{"name": "excl", "channel": "one", "data": "y", "socket_id": a.SocketID})
	if st, resp := ts.api(t, "POST", "/apps/"+testAppID+"/events", nil, body); st != 200 {
		t.Fatalf("%d %s", st, resp)
	}
	b.WaitEvent("excl", "one")
	a.ExpectNone("excl", "")

	// info asks for attributes of each channel.
	body = mustMarshal(t, map[string]any{"name": "info", "channel": "one", "data": "z", "info": "subscription_count"})
	st, resp = ts.api(t, "POST", "/apps/"+testAppID+"/events", nil, body)
	if st != 200 {
		t.Fatalf("%d %s", st, resp)
	}
	var got struct {
		Channels map[string]map[string]int `json:"channels"`
	}
	if err := json.Unmarshal(resp, &got); err != nil || got.Channels["one"]["subscription_count"] != 2 {
		t.Errorf("info answer %s", resp)
	}
}

func TestBatchEvents(t *testing.T) {
	ts := newServer(t)
	a, b := ts.connect(t), ts.connect(t)
	a.Subscribe("b1")
	b.Subscribe("b1")
	b.Subscribe("b2")
	body := mustMarshal(t, map[string]any{"batch": []map[string]any{
		{"name": "e1", "channel": "b1", "data": "one"},
		{"name": "e2", "channel": "b2", "data": `{"n":2}`},
		{"name": "e3", "channel": "b1", "data": "three", "socket_id": a.SocketID},
	}})
	st, resp := ts.api(t, "POST", "/apps/"+testAppID+"/batch_events", nil, body)
	if st != 200 {
		t.Fatalf("%d %s", st, resp)
	}
	if m := mustJSONMap(t, resp); m["batch"] == nil {
		t.Errorf("answer %s, want {\"batch\":{}}", resp)
	}
	if d := b.WaitEvent("e1", "b1").DataString(t); d != "one" {
		t.Errorf("e1 data %q", d)
	}
	if d := b.WaitEvent("e2", "b2").DataString(t); d != `{"n":2}` {
		t.Errorf("e2 data %q", d)
	}
	b.WaitEvent("e3", "b1")
	a.WaitEvent("e1", "b1")
	a.ExpectNone("e3", "")

	// With info the answer is index-aligned.
	body = mustMarshal(t, map[string]any{"batch": []map[string]any{
		{"name": "x", "channel": "b1", "data": "1", "info": "subscription_count"},
		{"name": "y", "channel": "empty", "data": "2", "info": "subscription_count"},
	}})
	st, resp = ts.api(t, "POST", "/apps/"+testAppID+"/batch_events", nil, body)
	var got struct {
		Batch []map[string]int `json:"batch"`
	}
	if st != 200 || json.Unmarshal(resp, &got) != nil || len(got.Batch) != 2 ||
		got.Batch[0]["subscription_count"] != 2 || got.Batch[1]["subscription_count"] != 0 {
		t.Errorf("batch info: %d %s", st, resp)
	}
}

func TestAPIErrorStatuses(t *testing.T) {
	ts := newServer(t, withApp(func(a *config.App) { a.MaxMessageSize = 500 }))
	eventsPath := "/apps/" + testAppID + "/events"
	good := []byte(`{"name":"e","channel":"c","data":"x"}`)
	sign := func(method, path string, q url.Values, body []byte, key, secret string, now time.Time) string {
		return path + "?" + auth.SignRequest(method, path, q, body, key, secret, now).Encode()
	}
	tooManyChannels := make([]string, 101)
	for i := range tooManyChannels {
		tooManyChannels[i] = fmt.Sprintf("c%d", i)
	}
	batch := func(n int) []byte {
		evs := make([]map[string]any, n)
		for i := range evs {
			evs[i] = map[string]any{"name": "e", "channel": "c", "data": "x"}
		}
		return mustMarshal(t, map[string]any{"batch": evs})
	}
	tests := []struct {
		name   string
		method string
		target string // path and query, sent as is
		body   []byte
		status int
	}{
		{"valid", "POST", sign("POST", eventsPath, nil, good, testKey, testSecret, time.Now()), good, 200},
		{"bad signature", "POST", sign("POST", eventsPath, nil, good, testKey, "wrong", time.Now()), good, 401},
		{"no signature", "POST", eventsPath + "?unsigned", good, 401},
		{"stale timestamp", "POST", sign("POST", eventsPath, nil, good, testKey, testSecret, time.Now().Add(-700*time.Second)), good, 401},
		{"future timestamp", "POST", sign("POST", eventsPath, nil, good, testKey, testSecret, time.Now().Add(700*time.Second)), good, 401},
		{"unknown key", "POST", sign("POST", eventsPath, nil, good, "other-key", testSecret, time.Now()), good, 401},
		{"body_md5 mismatch", "POST", sign("POST", eventsPath, nil, []byte(`{"name":"e","channel":"c","data":"y"}`), testKey, testSecret, time.Now()), good, 401},
		{"signed for another path", "POST", strings.Replace(sign("POST", "/apps/"+testAppID+"/batch_events", nil, good, testKey, testSecret, time.Now()), "batch_events", "events", 1), good, 401},
		{"unknown app", "POST", sign("POST", "/apps/999/events", nil, good, testKey, testSecret, time.Now()), good, 404},
		{"body over max_request_size", "POST", "", []byte(`{"name":"e","channel":"c","data":"` + strings.Repeat("a", 10000) + `"}`), 413},
		{"data over max_message_size", "POST", "", []byte(`{"name":"e","channel":"c","data":"` + strings.Repeat("a", 501) + `"}`), 413},
		{"data at max_message_size", "POST", "", []byte(`{"name":"e","channel":"c","data":"` + strings.Repeat("a", 500) + `"}`), 200},
		{"over 100 channels", "POST", "", mustMarshal(t, map[string]any{"name": "e", "channels": tooManyChannels, "data": "x"}), 400},
		{"exactly 100 channels", "POST", "", mustMarshal(t, map[string]any{"name": "e", "channels": tooManyChannels[:100], "data": "x"}), 200},
		{"bad JSON", "POST", "", []byte(`{"name":`), 400},
		{"JSON array", "POST", "", []byte(`[]`), 400},
		{"trailing data", "POST", "", []byte(`{"name":"e","channel":"c","data":"x"} {}`), 400},
		{"empty body", "POST", "", nil, 400},
		{"no name", "POST", "", []byte(`{"channel":"c","data":"x"}`), 400},
		{"name too long", "POST", "", []byte(`{"name":"` + strings.Repeat("n", 201) + `","channel":"c","data":"x"}`), 400},
		{"no channel", "POST", "", []byte(`{"name":"e","data":"x"}`), 400},
		{"invalid channel", "POST", "", []byte(`{"name":"e","channel":"a b","data":"x"}`), 400},
		{"no data", "POST", "", []byte(`{"name":"e","channel":"c"}`), 400},
		{"null data", "POST", "", []byte(`{"name":"e","channel":"c","data":null}`), 400},
		{"bad socket_id", "POST", "", []byte(`{"name":"e","channel":"c","data":"x","socket_id":"abc"}`), 400},
		{"name not a string", "POST", "", []byte(`{"name":5,"channel":"c","data":"x"}`), 400},
		{"batch of 10", "POST batch", "", batch(10), 200},
		{"batch of 11", "POST batch", "", batch(11), 400},
		{"empty batch", "POST batch", "", []byte(`{"batch":[]}`), 400},
		{"batch with channels list", "POST batch", "", []byte(`{"batch":[{"name":"e","channels":["a"],"data":"x"}]}`), 400},
		{"batch bad JSON", "POST batch", "", []byte(`{"batch":{}}`), 400},
		{"batch data over max_message_size", "POST batch", "", []byte(`{"batch":[{"name":"e","channel":"c","data":"` + strings.Repeat("a", 501) + `"}]}`), 413},
		{"user_count on non-presence channel", "GET", "/apps/" + testAppID + "/channels/public-x?info=user_count", nil, 400},
		{"user_count without presence prefix", "GET", "/apps/" + testAppID + "/channels?info=user_count", nil, 400},
		{"user_count with other prefix", "GET", "/apps/" + testAppID + "/channels?info=user_count&filter_by_prefix=private-", nil, 400},
		{"users of non-presence channel", "GET", "/apps/" + testAppID + "/channels/private-x/users", nil, 400},
		{"invalid channel in path", "GET", "/apps/" + testAppID + "/channels/a%20b", nil, 400},
		{"info on presence channel", "GET", "/apps/" + testAppID + "/channels/presence-x?info=user_count,subscription_count", nil, 200},
		{"terminate", "POST", "/apps/" + testAppID + "/users/u1/terminate_connections", []byte(`{}`), 200},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			method, target := tc.method, tc.target
			if method == "POST batch" {
				method, target = "POST", "/apps/"+testAppID+"/batch_events"
			}
			if target == "" {
				target = eventsPath
			}
			// Targets not already signed are signed here over their path and query.
			if u, _ := url.Parse(target); u.Query().Get("auth_signature") == "" && u.RawQuery != "unsigned" {
				target = sign(method, u.EscapedPath(), u.Query(), tc.body, testKey, testSecret, time.Now())
			}
			st, body := ts.rawAPI(t, method, target, tc.body)
			if st != tc.status {
				t.Fatalf("status %d, want %d: %s", st, tc.status, body)
			}
			if st >= 400 {
				if m := mustJSONMap(t, body); m["error"] == nil {
					t.Errorf("error answer without message: %s", body)
				}
			}
		})
	}
}

func TestChannelsEndpoints(t *testing.T) {
	ts := newServer(t)
	a, b := ts.connect(t), ts.connect(t)
	a.Subscribe("public-1")
	b.Subscribe("public-1")
	a.Subscribe("other")
	ts.subscribePrivate(a, "private-x")
	ts.subscribePresence(a, "presence-room", `{"user_id":"u1"}`)
	ts.subscribePresence(b, "presence-room", `{"user_id":"u1"}`)
	c := ts.connect(t)
	ts.subscribePresence(c, "presence-room", `{"user_id":"u2"}`)

	get := func(path string, q url.Values) map[string]any {
		t.Helper()
		st, body := ts.api(t, "GET", "/apps/"+testAppID+path, q, nil)
		if st != 200 {
			t.Fatalf("GET %s %v: %d %s", path, q, st, body)
		}
		return mustJSONMap(t, body)
	}
	all := get("/channels", nil)["channels"].(map[string]any)
	for _, name := range []string{"public-1", "other", "private-x", "presence-room"} {
		if _, ok := all[name]; !ok {
			t.Errorf("channel %s missing from %v", name, all)
		}
	}
	if len(all) != 4 {
		t.Errorf("channels %v", all)
	}
	pub := get("/channels", url.Values{"filter_by_prefix": {"public-"}, "info": {"subscription_count"}})["channels"].(map[string]any)
	if len(pub) != 1 || pub["public-1"].(map[string]any)["subscription_count"] != 2.0 {
		t.Errorf("filter_by_prefix=public- %v", pub)
	}
	pres := get("/channels", url.Values{"filter_by_prefix": {"presence-"}, "info": {"user_count"}})["channels"].(map[string]any)
	if len(pres) != 1 || pres["presence-room"].(map[string]any)["user_count"] != 2.0 {
		t.Errorf("filter_by_prefix=presence- info=user_count: %v", pres)
	}

	one := get("/channels/public-1", url.Values{"info": {"subscription_count"}})
	if one["occupied"] != true || one["subscription_count"] != 2.0 {
		t.Errorf("channel public-1: %v", one)
	}
	empty := get("/channels/nobody", nil)
	if empty["occupied"] != false || len(empty) != 1 {
		t.Errorf("unoccupied channel: %v", empty)
	}
	room := get("/channels/presence-room", url.Values{"info": {"user_count,subscription_count"}})
	if room["occupied"] != true || room["user_count"] != 2.0 || room["subscription_count"] != 3.0 {
		t.Errorf("presence-room: %v", room)
	}
	users := get("/channels/presence-room/users", nil)["users"].([]any)
	if len(users) != 2 || users[0].(map[string]any)["id"] != "u1" || users[1].(map[string]any)["id"] != "u2" {
		t.Errorf("users %v", users)
	}

	// Vacated channels disappear from the listing.
	_ = a.WS.Close()
	testutil.WaitFor(t, "other vacated", func() bool {
		_, ok := get("/channels", nil)["channels"].(map[string]any)["other"]
		return !ok
	})

}

func TestConnectionsAndUp(t *testing.T) {
	ts := newServer(t)
	ts.connect(t)
	ts.connect(t)
	// connection_established leaves a moment before the server counts the socket.
	testutil.WaitFor(t, "sockets counted", func() bool { return ts.s.ConnectionCount(testAppID) == 2 })
	st, body := ts.api(t, "GET", "/apps/"+testAppID+"/connections", nil, nil)
	if st != 200 || mustJSONMap(t, body)["connections"] != 2.0 {
		t.Errorf("connections: %d %s", st, body)
	}
	st, body = ts.rawAPI(t, "GET", "/up", nil)
	if st != 200 || mustJSONMap(t, body)["health"] != "OK" {
		t.Errorf("/up: %d %s", st, body)
	}
	st, _ = ts.rawAPI(t, "GET", "/apps/"+testAppID+"/connections", nil)
	if st != 401 {
		t.Errorf("unsigned /connections: %d, want 401", st)
	}
}

func TestRoutesWithPrefix(t *testing.T) {
	// A second echo mount with a prefix: SDKs sign the path without it.
	ts := newServer(t, withPrefix("/reverb"))
	path := "/apps/" + testAppID + "/connections"
	q := auth.SignRequest("GET", path, nil, nil, testKey, testSecret, time.Now())
	if st, body := ts.rawAPI(t, "GET", "/reverb"+path+"?"+q.Encode(), nil); st != 200 {
		t.Errorf("prefixed API: %d %s", st, body)
	}
	ts.connectAt(t, "/reverb") // the WebSocket endpoint is mounted under the prefix too
}
