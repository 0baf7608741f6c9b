package pusher

import (
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/reverbgo/reverbgo/config"
	"github.com/reverbgo/reverbgo/internal/testutil"
)

// The behaviour under test is released Laravel Reverb's (v1.9.0 to v1.10.2, unchanged between
// them): src/Protocols/Pusher/Server.php, message() and ensureWithinRateLimit() (every
// message is an attempt, checked before it is parsed; tooManyAttempts before increment, so a
// refused message is not counted), src/Protocols/Pusher/Exceptions/RateLimitExceeded.php
// (4301 "Rate limit exceeded"), src/Connection.php terminate() and
// src/Servers/Reverb/Http/Connection.php close() (React's end(): no close frame, and the
// pusher:error written afterwards never leaves), and Reverb's own cases in
// tests/Unit/Protocols/Pusher/ServerTest.php ("rejects a message when the rate limit is
// exceeded", "terminates the connection when rate limit is exceeded ...").

// step is one message sent after advancing the clock, and what it must get back: "pong",
// "4301" (Rate limit exceeded), "4200" (invalid message), "end" (connection ended without a
// close frame and without a pusher:error), or "" for nothing (a control frame).
type step struct {
	advance time.Duration
	send    string // "ping", "bad" (not JSON), "control" (a WebSocket ping frame)
	want    string
}

func TestReverbRateLimiting(t *testing.T) {
	tests := []struct {
		name  string
		rl    config.RateLimiting
		steps []step
	}{
		{"disabled: unlimited", config.RateLimiting{MaxAttempts: 1, DecaySeconds: 60},
			[]step{{0, "ping", "pong"}, {0, "ping", "pong"}, {0, "ping", "pong"}}},
		{"max 3 then 4301, the connection stays open", config.RateLimiting{Enabled: true, MaxAttempts: 3, DecaySeconds: 60},
			[]step{{0, "ping", "pong"}, {0, "ping", "pong"}, {0, "ping", "pong"}, {0, "ping", "4301"}, {0, "ping", "4301"}}},
		{"invalid messages are attempts too", config.RateLimiting{Enabled: true, MaxAttempts: 2, DecaySeconds: 60},
			[]step{{0, "bad", "4200"}, {0, "ping", "pong"}, {0, "bad", "4301"}, {0, "ping", "4301"}}},
		{"control frames are not", config.RateLimiting{Enabled: true, MaxAttempts: 1, DecaySeconds: 60},
			[]step{{0, "control", ""}, {0, "control", ""}, {0, "ping", "pong"}, {0, "ping", "4301"}}},
		{"fixed window from the first message; refusals do not extend it", config.RateLimiting{Enabled: true, MaxAttempts: 1, DecaySeconds: 10},
			[]step{{0, "ping", "pong"}, {9 * time.Second, "ping", "4301"}, {time.Second - time.Millisecond, "ping", "4301"},
				{time.Millisecond, "ping", "pong"}, {time.Second, "ping", "4301"}}},
		{"terminate ends the socket without a close frame or error", config.RateLimiting{Enabled: true, MaxAttempts: 2, DecaySeconds: 60, TerminateOnLimit: true},
			[]step{{0, "ping", "pong"}, {0, "ping", "pong"}, {0, "ping", "end"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := newFakeClock(time.Now())
			ts := newServer(t,
				withApp(func(a *config.App) { a.RateLimiting = tt.rl }),
				withOptions(func(o *Options) { o.Now = clock.Now }))
			c := ts.connect(t)
			for i, s := range tt.steps {
				clock.Advance(s.advance)
				switch s.send {
				case "ping":
					c.SendRaw(`{"event":"pusher:ping","data":{}}`)
				case "bad":
					c.SendRaw(`not json`)
				case "control":
					if err := c.WS.WriteControl(websocket.PingMessage, nil, time.Now().Add(waitTimeout)); err != nil {
						t.Fatal(err)
					}
				}
				switch s.want {
				case "pong":
					if ev := c.Next(); ev.Event != "pusher:pong" {
						t.Fatalf("step %d: got %s, want a pong", i, ev.Raw)
					}
				case "4301", "4200":
					ev := c.Next()
					var d errorData
					if ev.Event == "pusher:error" {
						ev.DataInto(t, &d)
					}
					want := map[string]errorData{"4301": {Code: 4301, Message: "Rate limit exceeded"}, "4200": {Code: 4200, Message: "Invalid message format"}}[s.want]
					if d != want {
						t.Fatalf("step %d: got %s, want %+v", i, ev.Raw, want)
					}
				case "end":
					if ev, ok := c.TryNext(waitTimeout); ok {
						t.Fatalf("step %d: got %s before the end", i, ev.Raw)
					}
					if code := c.WaitClose(); code != websocket.CloseAbnormalClosure {
						t.Fatalf("step %d: close code %d, want 1006 (no close frame)", i, code)
					}
				}
			}
			if last := tt.steps[len(tt.steps)-1].want; last != "end" {
				// Still open: once the window has passed, messages are handled again.
				clock.Advance(time.Duration(tt.rl.DecaySeconds) * time.Second)
				c.Ping()
			}
		})
	}
}

// TestReverbRateLimitCounted: refusals and terminations are counted where operators look.
func TestReverbRateLimitCounted(t *testing.T) {
	ts := newServer(t, withApp(func(a *config.App) {
		a.RateLimiting = config.RateLimiting{Enabled: true, MaxAttempts: 1, DecaySeconds: 60, TerminateOnLimit: true}
	}))
	c := ts.connect(t)
	c.Ping()
	c.SendRaw(`{"event":"pusher:ping","data":{}}`)
	c.WaitClose()
	st := &ts.s.appByID(testAppID).stats
	testutil.WaitFor(t, "rate_limited close counted", func() bool { return st.closed[CloseRateLimited].Load() == 1 })
	if n := st.messagesLimited.Load(); n != 1 {
		t.Errorf("messagesLimited %d, want 1", n)
	}
}

// TestReverbRateLimitBeforeClientEventLimit: both limits apply; a message Reverb's limit
// refuses is not counted by client_event_rate_limit.
func TestReverbRateLimitBeforeClientEventLimit(t *testing.T) {
	clock := newFakeClock(time.Now())
	ts := newServer(t, withApp(func(a *config.App) {
		a.ClientEventRateLimit = intPtr(2)
		a.RateLimiting = config.RateLimiting{Enabled: true, MaxAttempts: 4, DecaySeconds: 60}
	}), withOptions(func(o *Options) { o.Now = clock.Now }))
	a, b := ts.connect(t), ts.connect(t)
	clock.Advance(-time.Minute) // the subscribes below are not counted in the window under test
	ts.subscribePrivate(a, "private-both")
	ts.subscribePrivate(b, "private-both")
	clock.Advance(time.Minute)
	ev := func(n string) { a.Send(map[string]any{"event": "client-" + n, "channel": "private-both", "data": n}) }
	ev("1")
	ev("2")
	ev("3") // third client event this second: client_event_rate_limit
	if code, msg := a.WaitError(); code != 4301 || msg != "Client event rate limit exceeded" {
		t.Fatalf("got %d %q", code, msg)
	}
	clock.Advance(time.Second)
	ev("4") // the fourth attempt in Reverb's window: allowed by both
	b.WaitEvent("client-1", "")
	b.WaitEvent("client-2", "")
	b.WaitEvent("client-4", "")
	ev("5") // the fifth: Reverb's limit
	if code, msg := a.WaitError(); code != 4301 || msg != "Rate limit exceeded" {
		t.Fatalf("got %d %q", code, msg)
	}
	b.ExpectNone("client-5", "")
}

// TestReverbRateLimitAllocs: counting a message against rate_limiting allocates nothing: a
// ping costs the same with the limit enabled (and not reached) as with it off.
func TestReverbRateLimitAllocs(t *testing.T) {
	testutil.SkipUnderRace(t)
	ping := maskedText(`{"event":"pusher:ping","data":{}}`)
	counts := map[bool]float64{}
	for _, enabled := range []bool{false, true} {
		ts := newServer(t, withApp(func(a *config.App) {
			a.RateLimiting = config.RateLimiting{Enabled: enabled, MaxAttempts: 1 << 30, DecaySeconds: 60}
		}))
		a := allocDial(t, ts)
		a.socketID(t)
		f := func() {
			a.write(t, ping)
			if p := a.read(t); !containsAll(p, "pusher:pong") {
				t.Fatalf("ping: %s", p)
			}
		}
		f()
		counts[enabled] = testing.AllocsPerRun(300, f)
	}
	t.Logf("allocations per ping: %v off, %v on", counts[false], counts[true])
	if counts[true] > counts[false] {
		t.Errorf("rate_limiting adds allocations to a ping: %v, off %v", counts[true], counts[false])
	}
}
