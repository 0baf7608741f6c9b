package pusher

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/reverbgo/reverbgo/internal/testutil"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/reverbgo/reverbgo/config"
)

var socketIDRe = regexp.MustCompile(`^\d+\.\d+$`)

func TestConnectionEstablished(t *testing.T) {
	ts := newServer(t, withApp(func(a *config.App) { a.ActivityTimeout = 42 }))
	c, err := dial(t, ts.wsURL(ts.app.Key, "protocol=7"), nil)
	if err != nil {
		t.Fatal(err)
	}
	ev := c.Next()
	if ev.Event != "pusher:connection_established" {
		t.Fatalf("first frame %s", ev.Raw)
	}
	if strings.Contains(string(ev.Raw), `"channel"`) {
		t.Errorf("connection_established carries a channel field: %s", ev.Raw)
	}
	var d struct {
		SocketID        string `json:"socket_id"`
		ActivityTimeout int    `json:"activity_timeout"`
	}
	ev.DataInto(t, &d)
	if !socketIDRe.MatchString(d.SocketID) {
		t.Errorf("socket_id %q does not match %s", d.SocketID, socketIDRe)
	}
	if d.ActivityTimeout != 42 {
		t.Errorf("activity_timeout = %d, want 42", d.ActivityTimeout)
	}
	testutil.WaitFor(t, "socket registered", func() bool { return ts.s.sockets.get(d.SocketID) != nil })
	if n := ts.s.ConnectionCount(testAppID); n != 1 {
		t.Errorf("ConnectionCount = %d, want 1", n)
	}
	if app, chans, ok := ts.s.Channels(d.SocketID); !ok || app != testAppID || len(chans) != 0 {
		t.Errorf("Channels(%s) = %q %v %v", d.SocketID, app, chans, ok)
	}
	_ = c.WS.Close()
	testutil.WaitFor(t, "connection count back to 0", func() bool { return ts.s.ConnectionCount(testAppID) == 0 })
	if _, _, ok := ts.s.Channels(d.SocketID); ok {
		t.Error("closed socket still known")
	}
}

func TestSocketIDsAreUnique(t *testing.T) {
	ts := newServer(t)
	seen := map[string]bool{}
	for i := 0; i < 30; i++ {
		c := ts.connect(t)
		if !socketIDRe.MatchString(c.SocketID) {
			t.Fatalf("socket_id %q", c.SocketID)
		}
		if seen[c.SocketID] {
			t.Fatalf("socket_id %q issued twice", c.SocketID)
		}
		seen[c.SocketID] = true
	}
	// Both halves are random: over many ids neither half repeats or counts up.
	firsts, seconds := map[string]bool{}, map[string]bool{}
	prev := int64(-1)
	ascending := 0
	for i := 0; i < 1000; i++ {
		id := newSocketID()
		a, b, _ := strings.Cut(id, ".")
		if !socketIDRe.MatchString(id) || firsts[a] || seconds[b] {
			t.Fatalf("newSocketID %q: malformed or a half repeats", id)
		}
		firsts[a], seconds[b] = true, true
		n, _ := strconv.ParseInt(a, 10, 64)
		if n == prev+1 {
			ascending++
		}
		prev = n
	}
	if ascending > 5 {
		t.Errorf("%d of 1000 socket ids follow their predecessor: sequential?", ascending)
	}
}

func TestConnectionRefused(t *testing.T) {
	tests := []struct {
		name   string
		app    func(*config.App)
		key    string // "" = the app's key
		query  string
		origin string
		pre    int // connections opened first (quota)
		node   int // Options.MaxConnections
		code   int
	}{
		{name: "unknown key", key: "nope", query: "protocol=7", code: 4001},
		{name: "app disabled", app: func(a *config.App) { a.Enabled = boolPtr(false) }, query: "protocol=7", code: 4003},
		{name: "over max_connections", app: func(a *config.App) { a.MaxConnections = 2 }, query: "protocol=7", pre: 2, code: 4004},
		// The node's cap (server.max_connections) answers 4100: pusher-js backs off and retries,
		// behind a load balancer on another node.
		{name: "over the node's cap", query: "protocol=7", pre: 2, node: 2, code: 4100},
		{name: "origin not allowed", app: func(a *config.App) { a.AllowedOrigins = []string{"example.com"} }, query: "protocol=7", origin: "http://evil.com", code: 4009},
		{name: "origin glob does not match parent", app: func(a *config.App) { a.AllowedOrigins = []string{"*.example.com"} }, query: "protocol=7", origin: "https://example.com.evil.com", code: 4009},
		{name: "a URL pattern names its scheme", app: func(a *config.App) { a.AllowedOrigins = []string{"https://example.com"} }, query: "protocol=7", origin: "http://example.com", code: 4009},
		{name: "protocol 4", query: "protocol=4", code: 4007},
		{name: "protocol garbage", query: "protocol=x", code: 4007},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var opts []serverOpt
			if tc.app != nil {
				opts = append(opts, withApp(tc.app))
			}
			if tc.node > 0 {
				opts = append(opts, withOptions(func(o *Options) { o.MaxConnections = tc.node }))
			}
			ts := newServer(t, opts...)
			for i := 0; i < tc.pre; i++ {
				ts.connect(t)
			}
			key := tc.key
			if key == "" {
				key = ts.app.Key
			}
			h := http.Header{}
			if tc.origin != "" {
				h.Set("Origin", tc.origin)
			}
			c, err := dial(t, ts.wsURL(key, tc.query), h)
			if err != nil {
				t.Fatal(err)
			}
			ev := c.Next()
			if ev.Event != "pusher:error" {
				t.Fatalf("first frame %s, want pusher:error", ev.Raw)
			}
			if code := ev.ErrorCode(t); code != tc.code {
				t.Errorf("pusher:error code %d, want %d (%s)", code, tc.code, ev.Raw)
			}
			if code := c.WaitClose(); code != tc.code {
				t.Errorf("close code %d, want %d", code, tc.code)
			}
			if tc.pre > 0 {
				if n := ts.s.ConnectionCount(testAppID); n != tc.pre {
					t.Errorf("ConnectionCount = %d after refusal, want %d", n, tc.pre)
				}
			}
		})
	}
}

func TestConnectionAccepted(t *testing.T) {
	tests := []struct {
		name    string
		origins []string
		origin  string
		query   string
	}{
		{name: "wildcard origin", origins: []string{"*"}, origin: "http://anything.test", query: "protocol=7"},
		{name: "exact host", origins: []string{"example.com"}, origin: "https://example.com", query: "protocol=7"},
		{name: "host glob", origins: []string{"*.example.com"}, origin: "https://app.example.com:8443", query: "protocol=7"},
		{name: "pattern written as URL", origins: []string{"https://example.com"}, origin: "https://example.com", query: "protocol=7"},
		{name: "case insensitive", origins: []string{"Example.COM"}, origin: "http://example.com", query: "protocol=7"},
		{name: "no origin header", origins: []string{"example.com"}, query: "protocol=7"},
		{name: "missing protocol", origins: []string{"*"}},
		{name: "protocol 5", origins: []string{"*"}, query: "protocol=5"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ts := newServer(t, withApp(func(a *config.App) { a.AllowedOrigins = tc.origins }))
			h := http.Header{}
			if tc.origin != "" {
				h.Set("Origin", tc.origin)
			}
			c, err := dial(t, ts.wsURL(ts.app.Key, tc.query), h)
			if err != nil {
				t.Fatal(err)
			}
			if ev := c.Next(); ev.Event != "pusher:connection_established" {
				t.Fatalf("got %s", ev.Raw)
			}
		})
	}
}

func TestMaxConnectionsFreedOnClose(t *testing.T) {
	ts := newServer(t, withApp(func(a *config.App) { a.MaxConnections = 1 }))
	c := ts.connect(t)
	_ = c.WS.Close()
	testutil.WaitFor(t, "slot freed", func() bool { return ts.s.ConnectionCount(testAppID) == 0 })
	ts.connect(t).Ping()
}

func TestPusherPing(t *testing.T) {
	ts := newServer(t)
	c := ts.connect(t)
	c.SendRaw(`{"event":"pusher:ping","data":{}}`)
	ev := c.WaitEvent("pusher:pong", "")
	if string(ev.Raw) != `{"event":"pusher:pong"}` {
		t.Errorf("pong frame %s, want {\"event\":\"pusher:pong\"}", ev.Raw)
	}
	// pusher:pong from the client is accepted silently.
	c.SendRaw(`{"event":"pusher:pong","data":{}}`)
	c.ExpectNone("pusher:error", "")
}

func TestControlPing(t *testing.T) {
	ts := newServer(t)
	c := ts.connect(t)
	if err := c.WS.WriteControl(websocket.PingMessage, []byte("hello"), time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-c.Pongs:
		if p != "hello" {
			t.Errorf("pong payload %q, want hello", p)
		}
	case <-time.After(waitTimeout):
		t.Fatal("no pong frame")
	}
}

func TestInvalidMessagesKeepConnection(t *testing.T) {
	tests := []struct {
		name string
		msg  string
		code int
	}{
		{"not JSON", `hello`, 4200},
		{"truncated JSON", `{"event":"pusher:ping"`, 4200},
		{"JSON array", `[1,2]`, 4200},
		{"no event", `{"data":{}}`, 4200},
		{"event not a string", `{"event":5}`, 4200},
		{"unknown pusher event", `{"event":"pusher:bogus","data":{}}`, 4200},
		{"pusher_internal from client", `{"event":"pusher_internal:subscription_succeeded","channel":"a"}`, 4200},
		{"unprefixed event", `{"event":"typing","channel":"a","data":{}}`, 4200},
		{"subscribe without data", `{"event":"pusher:subscribe"}`, 4200},
		{"subscribe data number", `{"event":"pusher:subscribe","data":5}`, 4200},
		{"subscribe bad data string", `{"event":"pusher:subscribe","data":"{not json"}`, 4200},
		{"subscribe without channel", `{"event":"pusher:subscribe","data":{"auth":""}}`, 4200},
		{"unsubscribe without channel", `{"event":"pusher:unsubscribe","data":{}}`, 4200},
		{"signin without data", `{"event":"pusher:signin"}`, 4200},
		{"invalid channel name", `{"event":"pusher:subscribe","data":{"channel":"bad channel!"}}`, 4009},
		{"channel name too long", `{"event":"pusher:subscribe","data":{"channel":"` + strings.Repeat("a", 165) + `"}}`, 4009},
	}
	ts := newServer(t)
	c := ts.connect(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c.T = t
			c.SendRaw(tc.msg)
			if code, msg := c.WaitError(); code != tc.code {
				t.Errorf("code %d (%s), want %d", code, msg, tc.code)
			}
			c.Ping() // still open
		})
	}
}

func TestSubscribeDataAsJSONString(t *testing.T) {
	ts := newServer(t)
	c := ts.connect(t)
	c.SendRaw(`{"event":"pusher:subscribe","data":"{\"channel\":\"flutter\"}"}`)
	ev := c.WaitEvent("pusher_internal:subscription_succeeded", "flutter")
	if ev.DataString(t) != "{}" {
		t.Errorf("public subscription_succeeded data %s, want \"{}\"", ev.Data)
	}
	ts.trigger(t, "flutter", "hi", "x")
	c.WaitEvent("hi", "flutter")
}

func TestMessageSizeLimit(t *testing.T) {
	ts := newServer(t)
	t.Run("exactly max_message_size is read", func(t *testing.T) {
		c := ts.connect(t)
		msg := `{"event":"pusher:ping","data":{}}`
		msg += strings.Repeat(" ", ts.app.MaxMessageSize-len(msg))
		c.SendRaw(msg)
		c.WaitEvent("pusher:pong", "")
	})
	t.Run("one byte over closes with 1009", func(t *testing.T) {
		c := ts.connect(t)
		msg := `{"event":"pusher:ping","data":{}}`
		msg += strings.Repeat(" ", ts.app.MaxMessageSize+1-len(msg))
		c.SendRaw(msg)
		if code := c.WaitClose(); code != websocket.CloseMessageTooBig {
			t.Errorf("close code %d, want 1009 (err %v)", code, c.ReadErr())
		}
		testutil.WaitFor(t, "connection released", func() bool { return ts.s.ConnectionCount(testAppID) == 0 })
	})
}

func TestUnsubscribe(t *testing.T) {
	ts := newServer(t)
	c := ts.connect(t)
	c.Subscribe("news")
	c.SendRaw(`{"event":"pusher:unsubscribe","data":{"channel":"news"}}`)
	testutil.WaitFor(t, "unsubscribed", func() bool { return ts.s.Registry().SubscriptionCount(testAppID, "news") == 0 })
	ts.trigger(t, "news", "late", "x")
	c.ExpectNone("late", "")
	// Unsubscribing from a channel never joined is harmless.
	c.SendRaw(`{"event":"pusher:unsubscribe","data":{"channel":"other"}}`)
	c.Ping()
}

// Every event published after the subscribe is handled must arrive after
// subscription_succeeded, even while the channel is flooded.
func TestSubscriptionSucceededPrecedesEvents(t *testing.T) {
	ts := newServer(t)
	for i := 0; i < 30; i++ {
		ch := fmt.Sprintf("flood-%d", i)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { // publish on the channel without pause while the client subscribes
			defer wg.Done()
			// Bursts of 50 with a 1 ms pause: a flood during the subscribe, but bounded
			// (about 50k events/s) so a reader slowed by a loaded machine is not cut off as a
			// slow consumer (4100) before it has read subscription_succeeded.
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				_ = ts.s.Publish(testAppID, ch, "tick", []byte(strconv.Itoa(n)))
				if n%50 == 49 {
					time.Sleep(time.Millisecond)
				}
			}
		}()
		c := ts.connect(t)
		c.SubscribeMsg(ch, "", "")
		for {
			ev := c.Next()
			if ev.Channel != ch {
				continue
			}
			if ev.Event != "pusher_internal:subscription_succeeded" {
				close(stop)
				wg.Wait()
				t.Fatalf("round %d: %s arrived before subscription_succeeded", i, ev.Raw)
			}
			break
		}
		c.WaitEvent("tick", ch) // and the flood does reach it afterwards
		close(stop)
		wg.Wait()
		_ = c.WS.Close()
	}
}

func TestCacheChannel(t *testing.T) {
	ts := newServer(t)
	a := ts.connect(t)
	a.SubscribeMsg("cache-prices", "", "")
	if ev := a.Next(); ev.Event != "pusher_internal:subscription_succeeded" {
		t.Fatalf("first %s", ev.Raw)
	}
	miss := a.Next()
	if miss.Event != "pusher:cache_miss" || miss.Channel != "cache-prices" {
		t.Fatalf("want cache_miss, got %s", miss.Raw)
	}
	ts.trigger(t, "cache-prices", "price", `{"v":1}`)
	ts.trigger(t, "cache-prices", "price", `{"v":2}`)
	a.WaitEvent("price", "cache-prices")
	last := a.WaitEvent("price", "cache-prices")

	b := ts.connect(t)
	b.SubscribeMsg("cache-prices", "", "")
	if ev := b.Next(); ev.Event != "pusher_internal:subscription_succeeded" {
		t.Fatalf("first %s", ev.Raw)
	}
	replay := b.Next()
	if string(replay.Raw) != string(last.Raw) {
		t.Errorf("replay %s, want the last event %s", replay.Raw, last.Raw)
	}
	if replay.DataString(t) != `{"v":2}` {
		t.Errorf("replayed data %q", replay.DataString(t))
	}

	// private-cache needs auth and replays too.
	ts.trigger(t, "private-cache-x", "e", "d")
	c := ts.connect(t)
	ts.subscribePrivate(c, "private-cache-x")
	if ev := c.Next(); ev.Event != "e" || ev.DataString(t) != "d" {
		t.Errorf("private-cache replay %s", ev.Raw)
	}
}

// A client that never reads is cut off once its queue passes MaxQueueBytes, while the
// other subscribers keep receiving.
func TestSlowConsumerDisconnected(t *testing.T) {
	ts := newServer(t, withOptions(func(o *Options) { o.MaxQueueBytes = 64 << 10 }))
	good := ts.connect(t)
	good.Subscribe("firehose")

	slow := rawDial(t, ts.ts.Listener.Addr().String(), "/app/"+ts.app.Key+"?protocol=7")
	slow.writeText(t, `{"event":"pusher:subscribe","data":{"channel":"firehose"}}`)
	testutil.WaitFor(t, "slow client subscribed", func() bool {
		return ts.s.Registry().SubscriptionCount(testAppID, "firehose") == 2
	})

	good.CountOnly.Store(true)
	base := good.Count.Load() // connection_established and subscription_succeeded

	payload := []byte(`"` + strings.Repeat("x", 8000) + `"`)
	deadline := time.Now().Add(20 * time.Second)
	sent := 0
	for ts.s.Registry().SubscriptionCount(testAppID, "firehose") == 2 {
		if time.Now().After(deadline) {
			t.Fatalf("slow consumer still subscribed after %d events (%d MB)", sent, sent*len(payload)>>20)
		}
		if err := ts.s.Publish(testAppID, "firehose", "big", payload); err != nil {
			t.Fatal(err)
		}
		sent++
		// Pace the flood to the good reader (it must never be the slow one): at most a few
		// events in flight for it, far below MaxQueueBytes.
		for good.Count.Load() < base+int64(sent-4) && !good.IsClosed() && time.Now().Before(deadline) {
			time.Sleep(100 * time.Microsecond)
		}
		if good.IsClosed() {
			t.Fatalf("good client disconnected after %d events (read %d, base %d): %v", sent, good.Count.Load(), base, good.ReadErr())
		}
	}
	t.Logf("slow consumer cut off after %d events of %d bytes", sent, len(payload))
	testutil.WaitFor(t, "slow connection released", func() bool { return ts.s.ConnectionCount(testAppID) == 1 })

	// The good client was not cut off and gets everything, including what follows.
	testutil.WaitFor(t, "good client drained the flood", func() bool { return good.Count.Load() >= base+int64(sent) })
	good.CountOnly.Store(false)
	ts.trigger(t, "firehose", "after", "still here")
	if ev := good.WaitEvent("after", "firehose"); ev.DataString(t) != "still here" {
		t.Errorf("data %q", ev.DataString(t))
	}
	if good.IsClosed() {
		t.Fatal("good client was disconnected")
	}
}

func TestShutdownSends4200(t *testing.T) {
	ts := newServer(t)
	clients := []*client{ts.connect(t), ts.connect(t), ts.connect(t)}
	clients[0].Subscribe("a")
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := ts.s.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	for i, c := range clients {
		if code, _ := c.WaitError(); code != 4200 {
			t.Errorf("client %d: pusher:error %d, want 4200", i, code)
		}
		if code := c.WaitClose(); code != 4200 {
			t.Errorf("client %d: close code %d, want 4200", i, code)
		}
	}
	if n := ts.s.ConnectionCount(testAppID); n != 0 {
		t.Errorf("ConnectionCount = %d after Shutdown", n)
	}
	// New connections are refused with 4200 while draining.
	c, err := dial(t, ts.wsURL(ts.app.Key, "protocol=7"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if code, _ := c.WaitError(); code != 4200 {
		t.Errorf("late connection: %d, want 4200", code)
	}
	if code := c.WaitClose(); code != 4200 {
		t.Errorf("late connection close %d, want 4200", code)
	}
}

func TestClientCloseIsAnswered(t *testing.T) {
	ts := newServer(t)
	c := ts.connect(t)
	c.Subscribe("a")
	msg := websocket.FormatCloseMessage(websocket.CloseNormalClosure, "bye")
	if err := c.WS.WriteControl(websocket.CloseMessage, msg, time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if code := c.WaitClose(); code != websocket.CloseNormalClosure {
		t.Errorf("close reply %d, want 1000", code)
	}
	testutil.WaitFor(t, "socket cleaned up", func() bool {
		return ts.s.ConnectionCount(testAppID) == 0 && ts.s.Registry().SubscriptionCount(testAppID, "a") == 0
	})

}

func TestEventFramesDropEmptyFields(t *testing.T) {
	raw := EventFrame("pusher:connection_established", "", "{}")
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw[2:], &m); err != nil {
		t.Fatal(err)
	}
	if _, ok := m["channel"]; ok {
		t.Errorf("empty channel encoded: %s", raw[2:])
	}
	if got := string(eventFrameNoData("pusher:cache_miss", "cache-a")[2:]); got != `{"event":"pusher:cache_miss","channel":"cache-a"}` {
		t.Errorf("cache_miss frame %s", got)
	}
}

// Over TLS there is no raw socket: every write goes through the blocking writer goroutine.
func TestTLSConnection(t *testing.T) {
	ts := newServer(t, withTLS(), withOptions(func(o *Options) { o.MaxQueueBytes = 64 << 10 }))
	a, b := ts.connect(t), ts.connect(t)
	if !strings.HasPrefix(ts.ts.URL, "https:") {
		t.Fatalf("server URL %s", ts.ts.URL)
	}
	a.Subscribe("tls")
	ts.subscribePrivate(b, "private-tls")
	ts.subscribePrivate(a, "private-tls")
	for i := 0; i < 50; i++ {
		ts.trigger(t, "tls", "n", strconv.Itoa(i))
	}
	for i := 0; i < 50; i++ {
		if d := a.WaitEvent("n", "tls").DataString(t); d != strconv.Itoa(i) {
			t.Fatalf("event %d data %q: out of order", i, d)
		}
	}
	b.Send(map[string]any{"event": "client-x", "channel": "private-tls", "data": "hi"})
	a.WaitEvent("client-x", "private-tls")
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := ts.s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*client{a, b} {
		if code, _ := c.WaitError(); code != 4200 {
			t.Errorf("pusher:error %d, want 4200", code)
		}
		if code := c.WaitClose(); code != 4200 {
			t.Errorf("close %d, want 4200", code)
		}
	}
}

// Frames reach every subscriber in publish order, however the writer batches them.
func TestFramesArriveInOrder(t *testing.T) {
	ts := newServer(t)
	clients := []*client{ts.connect(t), ts.connect(t), ts.connect(t)}
	for _, c := range clients {
		c.Subscribe("seq")
	}
	const n = 3000
	go func() {
		for i := 0; i < n; i++ {
			_ = ts.s.Publish(testAppID, "seq", "n", []byte(strconv.Itoa(i)))
		}
	}()
	for ci, c := range clients {
		for i := 0; i < n; i++ {
			ev := c.WaitEvent("n", "seq")
			if d := ev.DataString(t); d != strconv.Itoa(i) {
				t.Fatalf("client %d: event %d has data %q", ci, i, d)
			}
		}
	}
}

// The reason recorded for logs and metrics is the real one, not client_gone.
func TestCloseReasonRecorded(t *testing.T) {
	ts := newServer(t)
	tests := []struct {
		name string
		act  func(c *client)
		want CloseReason
	}{
		{"message too big", func(c *client) { c.SendRaw(strings.Repeat(" ", ts.app.MaxMessageSize+1)) }, CloseMessageTooBig},
		{"client close", func(c *client) { _ = c.WS.Close() }, CloseClientGone},
		{"terminated", func(c *client) {
			ts.signin(c, `{"id":"r1"}`)
			_ = ts.s.TerminateUser(context.Background(), testAppID, "r1")
		}, CloseTerminated},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := ts.connect(t)
			conn := ts.s.sockets.get(c.SocketID)
			tc.act(c)
			testutil.WaitFor(t, "socket released", func() bool { return ts.s.sockets.get(c.SocketID) == nil })
			if got := conn.closeReason(); got != tc.want {
				t.Errorf("close reason %s, want %s", got, tc.want)
			}
		})
	}
}

// TestNodeCapFreesOnClose: a connection the node's cap refused finds room again once another
// closed.
func TestNodeCapFreesOnClose(t *testing.T) {
	ts := newServer(t, withOptions(func(o *Options) { o.MaxConnections = 2 }))
	first := ts.connect(t)
	ts.connect(t)
	c, err := dial(t, ts.wsURL(ts.app.Key, "protocol=7"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if ev := c.Next(); ev.Event != "pusher:error" || ev.ErrorCode(t) != 4100 {
		t.Fatalf("third connection: %s, want pusher:error 4100", ev.Raw)
	}
	_ = first.WS.Close()
	testutil.WaitFor(t, "the closed connection to leave the count", func() bool { return ts.s.ConnectionCount(testAppID) == 1 })
	again, err := dial(t, ts.wsURL(ts.app.Key, "protocol=7"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if ev := again.Next(); ev.Event != "pusher:connection_established" {
		t.Fatalf("after a close: %s, want pusher:connection_established", ev.Raw)
	}
}
