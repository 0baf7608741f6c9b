package pusher

import (
	"fmt"
	"github.com/reverbgo/reverbgo/internal/testutil"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// recorder is an Emitter that keeps every webhook event.
type recorder struct {
	mu     sync.Mutex
	events []map[string]any
}

func (r *recorder) Emit(appID string, ev map[string]any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cp := map[string]any{"app": appID}
	for k, v := range ev {
		cp[k] = v
	}
	r.events = append(r.events, cp)
}

// names lists "name:channel[:user_id]" of the events so far.
func (r *recorder) names() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.events))
	for _, ev := range r.events {
		s := fmt.Sprintf("%v:%v", ev["name"], ev["channel"])
		if u, ok := ev["user_id"]; ok {
			s += fmt.Sprintf(":%v", u)
		}
		out = append(out, s)
	}
	return out
}

func (r *recorder) count(name string) int {
	n := 0
	for _, s := range r.names() {
		if s == name {
			n++
		}
	}
	return n
}

func TestWebhookEvents(t *testing.T) {
	rec := &recorder{}
	ts := newServer(t, withOptions(func(o *Options) { o.Webhooks = rec }))
	a, b := ts.connect(t), ts.connect(t)

	a.Subscribe("room")
	a.Subscribe("room") // repeated subscribe: still one channel_occupied
	b.Subscribe("room")
	a.Ping() // a socket's requests are handled in order: its emits are done
	b.Ping()
	if n := rec.count("channel_occupied:room"); n != 1 {
		t.Errorf("channel_occupied:room emitted %d times: %v", n, rec.names())
	}

	ts.subscribePresence(a, "presence-p", `{"user_id":"u1"}`)
	ts.subscribePresence(b, "presence-p", `{"user_id":"u1"}`)
	a.Ping()
	b.Ping()
	if n := rec.count("member_added:presence-p:u1"); n != 1 {
		t.Errorf("member_added emitted %d times: %v", n, rec.names())
	}

	ts.subscribePrivate(b, "private-c")
	ts.subscribePrivate(a, "private-c")
	a.Send(map[string]any{"event": "client-hi", "channel": "private-c", "data": map[string]any{"x": 1}})
	b.WaitEvent("client-hi", "private-c")
	testutil.WaitFor(t, "client_event webhook", func() bool { return rec.count("client_event:private-c") == 1 })
	rec.mu.Lock()
	for _, ev := range rec.events {
		if ev["name"] == "client_event" && (ev["event"] != "client-hi" || ev["data"] != `{"x":1}` || ev["socket_id"] != a.SocketID) {
			t.Errorf("client_event webhook %v", ev)
		}
	}
	rec.mu.Unlock()

	b.Subscribe("cache-c")
	b.Ping()
	if n := rec.count("cache_miss:cache-c"); n != 1 {
		t.Errorf("cache_miss emitted %d times", n)
	}

	_ = a.WS.Close()
	_ = b.WS.Close()
	testutil.WaitFor(t, "vacated and removed", func() bool {
		return rec.count("channel_vacated:room") == 1 && rec.count("member_removed:presence-p:u1") == 1 &&
			rec.count("channel_vacated:presence-p") == 1
	})

}

func TestServerPingAndPongTimeout(t *testing.T) {
	clock := newFakeClock(time.Now())
	ts := newServer(t, withOptions(func(o *Options) { o.Now = clock.Now }))
	c := ts.connect(t)

	// Idle for ping_interval: the server pings (the sweep runs once a second).
	clock.Advance(61 * time.Second)
	c.WaitEvent("pusher:ping", "")
	c.SendRaw(`{"event":"pusher:pong","data":{}}`)
	ts.waitPongHandled(t, c)
	clock.Advance(31 * time.Second)
	c.ExpectNone("pusher:error", "")

	// Idle again and silent: after activity_timeout without a pong, 4201.
	clock.Advance(30 * time.Second)
	c.WaitEvent("pusher:ping", "")
	clock.Advance(31 * time.Second)
	if code, _ := c.WaitError(); code != 4201 {
		t.Errorf("pusher:error %d, want 4201", code)
	}
	if code := c.WaitClose(); code != 4201 {
		t.Errorf("close %d, want 4201", code)
	}
}

func TestServerControlPingForControlFrameClients(t *testing.T) {
	clock := newFakeClock(time.Now())
	ts := newServer(t, withOptions(func(o *Options) { o.Now = clock.Now }))
	c := ts.connect(t)
	pings := make(chan struct{}, 4)
	c.WS.SetPingHandler(func(s string) error {
		err := c.WS.WriteControl(websocket.PongMessage, []byte(s), time.Now().Add(time.Second))
		pings <- struct{}{}
		return err
	})
	if err := c.WS.WriteControl(websocket.PingMessage, nil, time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	<-c.Pongs
	clock.Advance(61 * time.Second)
	select {
	case <-pings:
	case <-time.After(waitTimeout):
		t.Fatal("no control ping from the server")
	}
	c.ExpectNone("pusher:ping", "")
	// The pong frame counts as activity: no timeout.
	ts.waitPongHandled(t, c)
	clock.Advance(31 * time.Second)
	c.ExpectNone("pusher:error", "")
	c.Ping()
}

// waitPongHandled waits until the server has seen activity since its last ping to c.
func (ts *tserver) waitPongHandled(t *testing.T, c *client) {
	t.Helper()
	conn := ts.s.sockets.get(c.SocketID)
	if conn == nil {
		t.Fatal("socket not found")
	}
	testutil.WaitFor(t, "pong handled", func() bool { return conn.pingSentAt.Load() == 0 })
}

// picky is a recorder that wants only some event names.
type picky struct {
	recorder
	want map[string]bool
}

func (p *picky) Wants(_, name string) bool { return p.want[name] }

// TestWebhookWants: events no webhook wants are never built or emitted; a changed
// subscription count is reported when wanted.
func TestWebhookWants(t *testing.T) {
	rec := &picky{want: map[string]bool{"channel_occupied": true, "subscription_count": true}}
	ts := newServer(t, withOptions(func(o *Options) { o.Webhooks = rec }))
	a, b := ts.connect(t), ts.connect(t)
	a.Subscribe("room")
	b.Subscribe("room")
	ts.subscribePresence(a, "presence-p", `{"user_id":"u1"}`)
	ts.subscribePrivate(b, "private-c")
	ts.subscribePrivate(a, "private-c")
	a.Send(map[string]any{"event": "client-hi", "channel": "private-c", "data": map[string]any{"x": 1}})
	b.WaitEvent("client-hi", "private-c")
	b.Subscribe("cache-c")
	_ = a.WS.Close()
	b.Ping()
	testutil.WaitFor(t, "a's leaves counted", func() bool { return rec.count("subscription_count:room") == 3 })
	for _, n := range rec.names() {
		name, _, _ := strings.Cut(n, ":")
		if !rec.want[name] {
			t.Errorf("emitted %s, which is not wanted", n)
		}
	}
	if rec.count("channel_occupied:room") != 1 || rec.count("subscription_count:cache-c") != 1 || rec.count("subscription_count:presence-p") != 0 {
		t.Errorf("events: %v", rec.names())
	}
}
