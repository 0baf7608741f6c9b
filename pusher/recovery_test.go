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
	if err := json.Unmarshal(e.Raw, &p); err != nil {
		t.Fatalf("frame %s: %v", e.Raw, err)
	}
	return p
}

func subscribeResume(c *client, channel string, resume any) {
	c.Send(map[string]any{"event": "pusher:subscribe", "data": map[string]any{"channel": channel, "resume": resume}})
}

func TestRecoverySerials(t *testing.T) {
	ts := newServer(t, withRecovery(100, "orders*"))
	c := ts.connect(t)
	ok := c.Subscribe("orders")
	p := positionOf(t, ok)
	if p.Serial == nil || *p.Serial != 0 || p.Epoch == "" {
		t.Fatalf("subscription_succeeded %s: want serial 0 and an epoch", ok.Raw)
	}
	plain := c.Subscribe("news")
	if bytes.Contains(plain.Raw, []byte("serial")) || bytes.Contains(plain.Raw, []byte("epoch")) {
		t.Fatalf("non-recovery channel got a position: %s", plain.Raw)
	}
	for i := 1; i <= 3; i++ {
		ts.apiPublish(t, "orders", "e", strconv.Itoa(i), "")
		ev := c.WaitEvent("e", "orders")
		want := `{"event":"e","channel":"orders","data":"` + strconv.Itoa(i) + `","serial":` + strconv.Itoa(i) + `}`
		if string(ev.Raw) != want {
			t.Fatalf("frame %d = %s, want %s", i, ev.Raw, want)
		}
	}
	ts.apiPublish(t, "news", "e", "x", "")
	if ev := c.WaitEvent("e", "news"); string(ev.Raw) != `{"event":"e","channel":"news","data":"x"}` {
		t.Fatalf("non-recovery frame = %s", ev.Raw)
	}
	// A client event on a recovery channel gets no serial and is not kept.
	c2 := ts.connect(t)
	if p := positionOf(t, c2.Subscribe("orders")); *p.Serial != 3 || p.Epoch != positionOf(t, ok).Epoch {
		t.Fatalf("second subscriber's position = %+v", p)
	}
}

func TestRecoveryOffAddsNothing(t *testing.T) {
	ts := newServer(t)
	if ts.s.history != nil {
		t.Fatal("a server without recovery has a History")
	}
	c := ts.connect(t)
	if ok := c.Subscribe("orders"); string(ok.Raw) != `{"event":"pusher_internal:subscription_succeeded","channel":"orders","data":"{}"}` {
		t.Fatalf("subscription_succeeded = %s", ok.Raw)
	}
	ts.apiPublish(t, "orders", "e", "1", "")
	if ev := c.WaitEvent("e", "orders"); string(ev.Raw) != `{"event":"e","channel":"orders","data":"1"}` {
		t.Fatalf("frame = %s", ev.Raw)
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
		{"success skips the old socket's own event", func(e string) any { return map[string]any{"epoch": e, "serial": 2, "socket_id": old.SocketID} }, []string{"3", "4", "6"}, ""},
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
			epoch := positionOf(t, watcher.Subscribe(ch)).Epoch
			for n := 1; n <= 6; n++ { // history keeps 3..6
				except := ""
				if n == 5 {
					except = old.SocketID // published toOthers() by the old socket
				}
				ts.apiPublish(t, ch, "e", strconv.Itoa(n), except)
			}
			c := ts.connect(t)
			subscribeResume(c, ch, tc.resume(epoch))
			ok := c.WaitEvent("pusher_internal:subscription_succeeded", ch)
			if p := positionOf(t, ok); p.Serial == nil || *p.Serial != 6 || p.Epoch != epoch {
				t.Fatalf("subscription_succeeded = %s", ok.Raw)
			}
			for _, want := range tc.replay {
				ev := c.Next()
				if ev.Event != "e" || ev.DataString(t) != want {
					t.Fatalf("replayed %s, want data %s", ev.Raw, want)
				}
				if s := positionOf(t, ev); strconv.FormatUint(*s.Serial, 10) != want {
					t.Fatalf("replayed %s with the wrong serial", ev.Raw)
				}
			}
			if tc.reason != "" {
				ev := c.Next()
				// The position the events that follow start after (issue 31).
				want := `{"event":"pusher:resume_failed","channel":"` + ch + `","data":"{\"reason\":\"` + tc.reason +
					`\",\"epoch\":\"` + epoch + `\",\"serial\":6}"}`
				if string(ev.Raw) != want {
					t.Fatalf("got %s, want %s", ev.Raw, want)
				}
			}
			ts.apiPublish(t, ch, "live", "x", "")
			if ev := c.Next(); ev.Event != "live" || *positionOf(t, ev).Serial != 7 {
				t.Fatalf("after the resume got %s, want the live event 7", ev.Raw)
			}
		})
	}
}

func TestRecoveryResumeNotEnabled(t *testing.T) {
	ts := newServer(t, withRecovery(10, "orders"))
	c := ts.connect(t)
	subscribeResume(c, "news", map[string]any{"epoch": "e", "serial": 1})
	c.WaitEvent("pusher_internal:subscription_succeeded", "news")
	if ev := c.Next(); string(ev.Raw) != `{"event":"pusher:resume_failed","channel":"news","data":"{\"reason\":\"not_enabled\"}"}` {
		t.Fatalf("got %s", ev.Raw)
	}
	off := newServer(t) // no app has recovery: still told, not ignored
	c = off.connect(t)
	subscribeResume(c, "news", map[string]any{"epoch": "e", "serial": 1})
	c.WaitEvent("pusher_internal:subscription_succeeded", "news")
	if ev := c.Next(); ev.Event != "pusher:resume_failed" {
		t.Fatalf("recovery off: got %s", ev.Raw)
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
		c.SendRaw(`{"event":"pusher:subscribe","data":{"channel":"orders","resume":` + resume + `}}`)
		ev := c.Next()
		if ev.Event != "pusher:error" || ev.ErrorCode(t) != codeInvalidMessage || !bytes.Contains(ev.Raw, []byte("Invalid resume")) {
			t.Fatalf("resume %s: got %s", resume, ev.Raw)
		}
	}
	c.Ping() // the socket is still served
}

// TestRecoveryNoDuplicateOnRace publishes while resuming subscribers join: every
// subscriber sees each serial after its position exactly once, in order, and the replay
// joins the live stream without a gap.
func TestRecoveryNoDuplicateOnRace(t *testing.T) {
	ts := newServer(t, withRecovery(1000, "*"))
	c0 := ts.connect(t)
	epoch := positionOf(t, c0.Subscribe("orders")).Epoch
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
		subscribeResume(c, "orders", map[string]any{"epoch": epoch, "serial": 0})
		clients = append(clients, c)
		time.Sleep(time.Millisecond) // spread the joins over the publishes
	}
	<-done
	for i, c := range clients {
		c.WaitEvent("pusher_internal:subscription_succeeded", "orders")
		for want := uint64(1); want <= total; want++ {
			ev := c.Next()
			if p := positionOf(t, ev); ev.Event != "e" || p.Serial == nil || *p.Serial != want {
				t.Fatalf("client %d: got %s, want serial %d", i, ev.Raw, want)
			}
		}
		c.ExpectNone("e", "orders")
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
	subscribeResume(c, "orders", map[string]any{"epoch": "unknown", "serial": 0})
	ok := c.WaitEvent("pusher_internal:subscription_succeeded", "orders")
	if p := positionOf(t, ok); *p.Serial != 1 {
		t.Fatalf("position %s, want serial 1", ok.Raw)
	}
	if ev := c.Next(); ev.Event != "pusher:resume_failed" {
		t.Fatalf("got %s", ev.Raw)
	}
	for want := uint64(1); want <= 2; want++ {
		if ev := c.Next(); ev.Event != "e" || *positionOf(t, ev).Serial != want {
			t.Fatalf("got %s, want serial %d", ev.Raw, want)
		}
	}
	c.ExpectNone("e", "orders")
	c2 := ts.connect(t)
	pos, _ := h.Position(t.Context(), ts.app.ID, "orders", channels.HistoryLimits{Size: 100, TTL: time.Minute})
	subscribeResume(c2, "orders", map[string]any{"epoch": pos.Epoch, "serial": 0})
	ok = c2.WaitEvent("pusher_internal:subscription_succeeded", "orders")
	if p := positionOf(t, ok); *p.Serial != 3 {
		t.Fatalf("position %s, want serial 3", ok.Raw)
	}
	for want := uint64(1); want <= 3; want++ {
		if ev := c2.Next(); *positionOf(t, ev).Serial != want {
			t.Fatalf("got %s, want serial %d", ev.Raw, want)
		}
	}
	ts.apiPublish(t, "orders", "live", "x", "")
	if ev := c2.Next(); ev.Event != "live" {
		t.Fatalf("got %s after the replay, want the live event (the raced one twice?)", ev.Raw)
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
	if epoch == "" || !bytes.Contains(ok.Raw, []byte(`\"presence\"`)) {
		t.Fatalf("subscription_succeeded = %s", ok.Raw)
	}
	for i := 1; i <= 3; i++ {
		ts.apiPublish(t, room, "e", strconv.Itoa(i), "")
	}
	b := ts.connect(t)
	cd := `{"user_id":"b"}`
	b.Send(map[string]any{"event": "pusher:subscribe", "data": map[string]any{
		"channel": room, "auth": presenceAuth(ts.app.Key, ts.app.Secret, b.SocketID, room, cd), "channel_data": cd,
		"resume": map[string]any{"epoch": epoch, "serial": 1},
	}})
	ok = b.WaitEvent("pusher_internal:subscription_succeeded", room)
	if p := positionOf(t, ok); *p.Serial != 3 || p.Epoch != epoch || !bytes.Contains(ok.Raw, []byte(`\"count\":2`)) {
		t.Fatalf("subscription_succeeded = %s", ok.Raw)
	}
	for _, want := range []string{"2", "3"} {
		if ev := b.Next(); ev.Event != "e" || ev.DataString(t) != want {
			t.Fatalf("replayed %s, want %s", ev.Raw, want)
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
	epoch := positionOf(t, old.Subscribe("orders")).Epoch
	other := ts.connect(t)
	other.Subscribe("orders")
	c := ts.connect(t)
	subscribeResume(c, "orders", map[string]any{"epoch": epoch, "serial": 0, "socket_id": old.SocketID})
	c.WaitEvent("pusher_internal:subscription_succeeded", "orders")
	ts.apiPublish(t, "orders", "own", "x", old.SocketID)
	ts.apiPublish(t, "orders", "e", "y", "")
	other.WaitEvent("own", "orders")
	if ev := c.Next(); ev.Event != "e" {
		t.Fatalf("the resumed socket got %s, want only the event of someone else", ev.Raw)
	}
}
