package pusher

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reverbgo/reverbgo/channels"
	"github.com/reverbgo/reverbgo/config"
)

func withRecovery(size int, patterns ...string) serverOpt {
	return withApp(func(a *config.App) {
		a.Recovery = config.Recovery{Enabled: true, HistorySize: size, HistoryTTL: 300, Channels: patterns}
	})
}

// apiPublish publishes as the HTTP API's events endpoint does (EventMessage, PublishAll).
func (ts *tserver) apiPublish(t testing.TB, channel, event, data, except string) {
	t.Helper()
	m := ts.s.EventMessage(ts.app.ID, channel, event, data, except)
	if err := ts.s.PublishAll(t.Context(), []channels.Message{m}); err != nil {
		t.Fatal(err)
	}
}

// position is the top-level serial and epoch of a frame.
type position struct {
	Serial *uint64 `json:"serial"`
	Epoch  string  `json:"epoch"`
}

func positionOf(t testing.TB, e event) position {
	t.Helper()
	var p position
	if err := json.Unmarshal(e.raw, &p); err != nil {
		t.Fatalf("frame %s: %v", e.raw, err)
	}
	return p
}

func (c *client) subscribeResume(channel string, resume any) {
	c.send(map[string]any{"event": "pusher:subscribe", "data": map[string]any{"channel": channel, "resume": resume}})
}

func TestRecoverySerials(t *testing.T) {
	ts := newServer(t, withRecovery(100, "orders*"))
	c := ts.connect(t)
	ok := c.subscribe("orders")
	p := positionOf(t, ok)
	if p.Serial == nil || *p.Serial != 0 || p.Epoch == "" {
		t.Fatalf("subscription_succeeded %s: want serial 0 and an epoch", ok.raw)
	}
	plain := c.subscribe("news")
	if bytes.Contains(plain.raw, []byte("serial")) || bytes.Contains(plain.raw, []byte("epoch")) {
		t.Fatalf("non-recovery channel got a position: %s", plain.raw)
	}
	for i := 1; i <= 3; i++ {
		ts.apiPublish(t, "orders", "e", strconv.Itoa(i), "")
		ev := c.waitEvent("e", "orders")
		want := `{"event":"e","channel":"orders","data":"` + strconv.Itoa(i) + `","serial":` + strconv.Itoa(i) + `}`
		if string(ev.raw) != want {
			t.Fatalf("frame %d = %s, want %s", i, ev.raw, want)
		}
	}
	ts.apiPublish(t, "news", "e", "x", "")
	if ev := c.waitEvent("e", "news"); string(ev.raw) != `{"event":"e","channel":"news","data":"x"}` {
		t.Fatalf("non-recovery frame = %s", ev.raw)
	}
	// A client event on a recovery channel gets no serial and is not kept.
	c2 := ts.connect(t)
	if p := positionOf(t, c2.subscribe("orders")); *p.Serial != 3 || p.Epoch != positionOf(t, ok).Epoch {
		t.Fatalf("second subscriber's position = %+v", p)
	}
}

func TestRecoveryOffAddsNothing(t *testing.T) {
	ts := newServer(t)
	if ts.s.history != nil {
		t.Fatal("a server without recovery has a History")
	}
	c := ts.connect(t)
	if ok := c.subscribe("orders"); string(ok.raw) != `{"event":"pusher_internal:subscription_succeeded","channel":"orders","data":"{}"}` {
		t.Fatalf("subscription_succeeded = %s", ok.raw)
	}
	ts.apiPublish(t, "orders", "e", "1", "")
	if ev := c.waitEvent("e", "orders"); string(ev.raw) != `{"event":"e","channel":"orders","data":"1"}` {
		t.Fatalf("frame = %s", ev.raw)
	}
}

func TestRecoveryResume(t *testing.T) {
	ts := newServer(t, withRecovery(4, "*"))
	old := ts.connect(t) // the socket a resuming client had before its reconnect
	for i, tc := range []struct {
		name   string
		resume func(epoch string) any
		replay []string // data of the replayed events
		reason string   // resume_failed reason, "" = none
	}{
		{"success skips the old socket's own event", func(e string) any { return map[string]any{"epoch": e, "serial": 2, "socket_id": old.socketID} }, []string{"3", "4", "6"}, ""},
		{"success without socket_id", func(e string) any { return map[string]any{"epoch": e, "serial": 4} }, []string{"5", "6"}, ""},
		{"N = S", func(e string) any { return map[string]any{"epoch": e, "serial": 6} }, nil, ""},
		// A serial this epoch never gave: the client's events are not this history's.
		{"N > S", func(e string) any { return map[string]any{"epoch": e, "serial": 60} }, nil, "epoch_changed"},
		{"epoch changed", func(string) any { return map[string]any{"epoch": "other", "serial": 2} }, nil, "epoch_changed"},
		{"too old", func(e string) any { return map[string]any{"epoch": e, "serial": 1} }, nil, "too_old"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ch := "orders-" + strconv.Itoa(i)
			watcher := ts.connect(t)
			epoch := positionOf(t, watcher.subscribe(ch)).Epoch
			for n := 1; n <= 6; n++ { // history keeps 3..6
				except := ""
				if n == 5 {
					except = old.socketID // published toOthers() by the old socket
				}
				ts.apiPublish(t, ch, "e", strconv.Itoa(n), except)
			}
			c := ts.connect(t)
			c.subscribeResume(ch, tc.resume(epoch))
			ok := c.waitEvent("pusher_internal:subscription_succeeded", ch)
			if p := positionOf(t, ok); p.Serial == nil || *p.Serial != 6 || p.Epoch != epoch {
				t.Fatalf("subscription_succeeded = %s", ok.raw)
			}
			for _, want := range tc.replay {
				ev := c.next()
				if ev.Event != "e" || ev.dataString(t) != want {
					t.Fatalf("replayed %s, want data %s", ev.raw, want)
				}
				if s := positionOf(t, ev); strconv.FormatUint(*s.Serial, 10) != want {
					t.Fatalf("replayed %s with the wrong serial", ev.raw)
				}
			}
			if tc.reason != "" {
				ev := c.next()
				// The position the events that follow start after (issue 31).
				want := `{"event":"pusher:resume_failed","channel":"` + ch + `","data":"{\"reason\":\"` + tc.reason +
					`\",\"epoch\":\"` + epoch + `\",\"serial\":6}"}`
				if string(ev.raw) != want {
					t.Fatalf("got %s, want %s", ev.raw, want)
				}
			}
			ts.apiPublish(t, ch, "live", "x", "")
			if ev := c.next(); ev.Event != "live" || *positionOf(t, ev).Serial != 7 {
				t.Fatalf("after the resume got %s, want the live event 7", ev.raw)
			}
		})
	}
}

func TestRecoveryResumeNotEnabled(t *testing.T) {
	ts := newServer(t, withRecovery(10, "orders"))
	c := ts.connect(t)
	c.subscribeResume("news", map[string]any{"epoch": "e", "serial": 1})
	c.waitEvent("pusher_internal:subscription_succeeded", "news")
	if ev := c.next(); string(ev.raw) != `{"event":"pusher:resume_failed","channel":"news","data":"{\"reason\":\"not_enabled\"}"}` {
		t.Fatalf("got %s", ev.raw)
	}
	off := newServer(t) // no app has recovery: still told, not ignored
	c = off.connect(t)
	c.subscribeResume("news", map[string]any{"epoch": "e", "serial": 1})
	c.waitEvent("pusher_internal:subscription_succeeded", "news")
	if ev := c.next(); ev.Event != "pusher:resume_failed" {
		t.Fatalf("recovery off: got %s", ev.raw)
	}
}

func TestRecoveryResumeInvalid(t *testing.T) {
	ts := newServer(t, withRecovery(10, "*"))
	c := ts.connect(t)
	for _, resume := range []string{
		`"x"`, `[]`, `{}`, `{"epoch":1,"serial":1}`, `{"epoch":"e"}`, `{"epoch":"e","serial":-1}`,
		`{"epoch":"e","serial":1.5}`, `{"epoch":"e","serial":"1"}`, `{"epoch":"` + string(bytes.Repeat([]byte("e"), 65)) + `","serial":1}`,
		`{"epoch":"e","serial":1,"socket_id":7}`, `{"epoch":"e","serial":99999999999999999999}`,
	} {
		c.sendRaw(`{"event":"pusher:subscribe","data":{"channel":"orders","resume":` + resume + `}}`)
		ev := c.next()
		if ev.Event != "pusher:error" || ev.errorCode(t) != codeInvalidMessage || !bytes.Contains(ev.raw, []byte("Invalid resume")) {
			t.Fatalf("resume %s: got %s", resume, ev.raw)
		}
	}
	c.ping() // the socket is still served
}

// TestRecoveryNoDuplicateOnRace publishes while resuming subscribers join: every
// subscriber sees each serial after its position exactly once, in order, and the replay
// joins the live stream without a gap.
func TestRecoveryNoDuplicateOnRace(t *testing.T) {
	ts := newServer(t, withRecovery(1000, "*"))
	c0 := ts.connect(t)
	epoch := positionOf(t, c0.subscribe("orders")).Epoch
	const total = 300
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 1; i <= total; i++ {
			ts.apiPublish(t, "orders", "e", strconv.Itoa(i), "")
		}
	}()
	var clients []*client
	for i := 0; i < 8; i++ {
		c := ts.connect(t)
		c.subscribeResume("orders", map[string]any{"epoch": epoch, "serial": 0})
		clients = append(clients, c)
		time.Sleep(time.Millisecond) // spread the joins over the publishes
	}
	<-done
	for i, c := range clients {
		c.waitEvent("pusher_internal:subscription_succeeded", "orders")
		for want := uint64(1); want <= total; want++ {
			ev := c.next()
			if p := positionOf(t, ev); ev.Event != "e" || p.Serial == nil || *p.Serial != want {
				t.Fatalf("client %d: got %s, want serial %d", i, ev.raw, want)
			}
		}
		c.expectNone("e", "orders")
	}
}

// racingHistory publishes (through the server, as a concurrent API request would) just
// before each Since: the event reaches the new subscriber live AND is in its replay.
type racingHistory struct {
	*channels.MemoryHistory
	before func()
}

func (h racingHistory) Since(ctx context.Context, app, ch string, lim channels.HistoryLimits, after uint64) (channels.Position, []channels.HistoryEvent, bool, error) {
	h.before()
	return h.MemoryHistory.Since(ctx, app, ch, lim, after)
}

func TestRecoveryRacingPublishNotDuplicated(t *testing.T) {
	var srv atomic.Pointer[tserver] // set before any Since; read on the task goroutine
	var n atomic.Int64
	h := racingHistory{MemoryHistory: channels.NewMemoryHistory(), before: func() {
		srv.Load().apiPublish(t, "orders", "e", "raced-"+strconv.FormatInt(n.Add(1), 10), "")
	}}
	ts := newServer(t, withRecovery(100, "*"), withOptions(func(o *Options) { o.History = h }))
	srv.Store(ts)
	c := ts.connect(t)
	// A first Since (epoch changed), then the new epoch's replay from 0 (a second Since):
	// raced-1 is at the position and replayed, raced-2 comes after it, live; each once.
	c.subscribeResume("orders", map[string]any{"epoch": "unknown", "serial": 0})
	ok := c.waitEvent("pusher_internal:subscription_succeeded", "orders")
	if p := positionOf(t, ok); *p.Serial != 1 {
		t.Fatalf("position %s, want serial 1", ok.raw)
	}
	if ev := c.next(); ev.Event != "pusher:resume_failed" {
		t.Fatalf("got %s", ev.raw)
	}
	for want := uint64(1); want <= 2; want++ {
		if ev := c.next(); ev.Event != "e" || *positionOf(t, ev).Serial != want {
			t.Fatalf("got %s, want serial %d", ev.raw, want)
		}
	}
	c.expectNone("e", "orders")
	c2 := ts.connect(t)
	pos, _ := h.Position(t.Context(), ts.app.ID, "orders", channels.HistoryLimits{Size: 100, TTL: time.Minute})
	c2.subscribeResume("orders", map[string]any{"epoch": pos.Epoch, "serial": 0})
	ok = c2.waitEvent("pusher_internal:subscription_succeeded", "orders")
	if p := positionOf(t, ok); *p.Serial != 3 {
		t.Fatalf("position %s, want serial 3", ok.raw)
	}
	for want := uint64(1); want <= 3; want++ {
		if ev := c2.next(); *positionOf(t, ev).Serial != want {
			t.Fatalf("got %s, want serial %d", ev.raw, want)
		}
	}
	ts.apiPublish(t, "orders", "live", "x", "")
	if ev := c2.next(); ev.Event != "live" {
		t.Fatalf("got %s after the replay, want the live event (the raced one twice?)", ev.raw)
	}
}

// TestRecoveryPresenceResume: Echo's join() channels resume too; subscription_succeeded
// keeps its presence data and gains the position.
func TestRecoveryPresenceResume(t *testing.T) {
	ts := newServer(t, withRecovery(10, "presence-*"))
	const room = "presence-room"
	a := ts.connect(t)
	ok := ts.subscribePresence(a, room, `{"user_id":"a"}`)
	epoch := positionOf(t, ok).Epoch
	if epoch == "" || !bytes.Contains(ok.raw, []byte(`\"presence\"`)) {
		t.Fatalf("subscription_succeeded = %s", ok.raw)
	}
	for i := 1; i <= 3; i++ {
		ts.apiPublish(t, room, "e", strconv.Itoa(i), "")
	}
	b := ts.connect(t)
	cd := `{"user_id":"b"}`
	b.send(map[string]any{"event": "pusher:subscribe", "data": map[string]any{
		"channel": room, "auth": presenceAuth(ts.app.Key, ts.app.Secret, b.socketID, room, cd), "channel_data": cd,
		"resume": map[string]any{"epoch": epoch, "serial": 1},
	}})
	ok = b.waitEvent("pusher_internal:subscription_succeeded", room)
	if p := positionOf(t, ok); *p.Serial != 3 || p.Epoch != epoch || !bytes.Contains(ok.raw, []byte(`\"count\":2`)) {
		t.Fatalf("subscription_succeeded = %s", ok.raw)
	}
	for _, want := range []string{"2", "3"} {
		if ev := b.next(); ev.Event != "e" || ev.dataString(t) != want {
			t.Fatalf("replayed %s, want %s", ev.raw, want)
		}
	}
}

// TestRecoveryResumedSocketSkipsItsOldSocketsEvents: an event the old socket published
// toOthers() that reaches the channel only after the resume (its API request raced the
// reconnect) is not delivered to the socket that resumed from it: a sender never gets its
// own event back. Every other subscriber still gets it.
func TestRecoveryResumedSocketSkipsItsOldSocketsEvents(t *testing.T) {
	ts := newServer(t, withRecovery(10, "*"))
	old := ts.connect(t)
	epoch := positionOf(t, old.subscribe("orders")).Epoch
	other := ts.connect(t)
	other.subscribe("orders")
	c := ts.connect(t)
	c.subscribeResume("orders", map[string]any{"epoch": epoch, "serial": 0, "socket_id": old.socketID})
	c.waitEvent("pusher_internal:subscription_succeeded", "orders")
	ts.apiPublish(t, "orders", "own", "x", old.socketID)
	ts.apiPublish(t, "orders", "e", "y", "")
	other.waitEvent("own", "orders")
	if ev := c.next(); ev.Event != "e" {
		t.Fatalf("the resumed socket got %s, want only the event of someone else", ev.raw)
	}
}
