// These tests run without -race: nbio v1.6.8 hands each accepted connection from its listener
// goroutine to its poller through epoll, which the race detector cannot see, so it reports
// races inside nbio (nbhttp.(*Conn).RemoteAddr, net.(*TCPAddr).String) on every run.
package main

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// client is one gorilla connection to the server under test (a different RFC 6455 stack).
type client struct {
	t  *testing.T
	ws *websocket.Conn
}

func dial(t *testing.T, addr, key string) *client {
	t.Helper()
	ws, resp, err := websocket.DefaultDialer.Dial("ws://"+addr+"/app/"+key, nil)
	if err != nil {
		if resp != nil {
			t.Fatalf("dial: %v (HTTP %d)", err, resp.StatusCode)
		}
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { ws.Close() })
	return &client{t, ws}
}

type msg struct {
	Event   string          `json:"event"`
	Channel string          `json:"channel"`
	Data    json.RawMessage `json:"data"`
}

func (c *client) read() msg {
	c.t.Helper()
	_ = c.ws.SetReadDeadline(time.Now().Add(5 * time.Second))
	mt, b, err := c.ws.ReadMessage()
	if err != nil || mt != websocket.TextMessage {
		c.t.Fatalf("read: type %d, %v", mt, err)
	}
	var m msg
	if err := json.Unmarshal(b, &m); err != nil {
		c.t.Fatalf("read %q: %v", b, err)
	}
	return m
}

func (c *client) send(s string) {
	c.t.Helper()
	if err := c.ws.WriteMessage(websocket.TextMessage, []byte(s)); err != nil {
		c.t.Fatal(err)
	}
}

func trigger(t *testing.T, addr, body string) int {
	t.Helper()
	resp, err := http.Post("http://"+addr+"/apps/app-id/events", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestProtocolSubset drives the subset the shared load tool uses, in both write modes:
// connection_established, subscribe (object and string data), events to several
// subscribers of one frame (small and one needing a 64-bit length), ping, private refusal,
// unsubscribe, and the HTTP API's refusals.
func TestProtocolSubset(t *testing.T) {
	for _, mode := range []string{"frame", "message"} {
		t.Run(mode, func(t *testing.T) {
			s, err := start(config{host: "127.0.0.1", appID: "app-id", key: "app-key", lifetime: time.Minute, writeMode: mode, pollers: 1})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close("test end") })
			if resp, err := http.Get("http://" + s.addr + "/app/wrong-key"); err != nil || resp.StatusCode != http.StatusNotFound {
				t.Fatalf("unknown key: %v %v", resp, err)
			}
			subs := []*client{dial(t, s.addr, "app-key"), dial(t, s.addr, "app-key"), dial(t, s.addr, "app-key")}
			for i, c := range subs {
				est := c.read()
				var d struct {
					SocketID        string `json:"socket_id"`
					ActivityTimeout int    `json:"activity_timeout"`
				}
				var str string
				if est.Event != "pusher:connection_established" || json.Unmarshal(est.Data, &str) != nil ||
					json.Unmarshal([]byte(str), &d) != nil || d.SocketID == "" || d.ActivityTimeout != 30 {
					t.Fatalf("connection_established: %+v", est)
				}
				if i == 2 {
					c.send(`{"event":"pusher:subscribe","data":"{\"channel\":\"bench-a\"}"}`) // data as a JSON string
				} else {
					c.send(`{"event":"pusher:subscribe","data":{"auth":"","channel":"bench-a"}}`)
				}
				if m := c.read(); m.Event != "pusher_internal:subscription_succeeded" || m.Channel != "bench-a" {
					t.Fatalf("subscribe: %+v", m)
				}
			}
			big := strings.Repeat("x", 70000)
			for _, data := range []string{`"pbx:1:0:123"`, strconv.Quote(big)} {
				if code := trigger(t, s.addr, `{"name":"ev","channels":["bench-a","nobody"],"data":`+data+`}`); code != 200 {
					t.Fatalf("trigger: %d", code)
				}
				for _, c := range subs {
					if m := c.read(); m.Event != "ev" || m.Channel != "bench-a" || string(m.Data) != data {
						t.Fatalf("delivery: %.200s", m.Data)
					}
				}
			}
			c := subs[0]
			c.send(`{"event":"pusher:ping","data":{}}`)
			if m := c.read(); m.Event != "pusher:pong" {
				t.Fatalf("ping: %+v", m)
			}
			c.send(`{"event":"pusher:subscribe","data":{"channel":"private-x","auth":"k:s"}}`)
			if m := c.read(); m.Event != "pusher:subscription_error" || m.Channel != "private-x" {
				t.Fatalf("private: %+v", m)
			}
			c.send(`{"event":"pusher:unsubscribe","data":{"channel":"bench-a"}}`)
			c.send(`{"event":"pusher:ping","data":{}}`) // the unsubscribe is done once the pong is back
			if m := c.read(); m.Event != "pusher:pong" {
				t.Fatalf("ping: %+v", m)
			}
			trigger(t, s.addr, `{"name":"after","channel":"bench-a","data":{"k":1}}`)
			if m := subs[1].read(); m.Event != "after" || string(m.Data) != `"{\"k\":1}"` {
				t.Fatalf("object data: %+v", m)
			}
			c.send(`{"event":"pusher:ping","data":{}}`)
			if m := c.read(); m.Event != "pusher:pong" { // not "after": it left the channel
				t.Fatalf("after unsubscribe: %+v", m)
			}
			for body, want := range map[string]int{`{"name":"x"}`: 400, `not json`: 400} {
				if code := trigger(t, s.addr, body); code != want {
					t.Errorf("%s: %d, want %d", body, code, want)
				}
			}
			if resp, err := http.Post("http://"+s.addr+"/apps/other/events", "application/json", strings.NewReader(`{}`)); err != nil || resp.StatusCode != 404 {
				t.Fatalf("unknown app id: %v %v", resp, err)
			}
			s.Close("test end")
			if got := s.Wait(); got != "test end" {
				t.Fatalf("stop reason %q", got)
			}
			if s.deliveries.Load() != 8 || s.accepted.Load() != 3 {
				t.Fatalf("counters: %d deliveries, %d accepted", s.deliveries.Load(), s.accepted.Load())
			}
		})
	}
}

func TestRefusesNonLoopback(t *testing.T) {
	if _, err := start(config{host: "0.0.0.0", appID: "a", key: "k", lifetime: time.Minute, writeMode: "frame", pollers: 1}); err == nil {
		t.Fatal("listened on a non-loopback address")
	}
}
