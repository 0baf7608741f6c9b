package pusher

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/reverbgo/reverbgo/internal/testutil"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/reverbgo/reverbgo/channels"
	"github.com/reverbgo/reverbgo/config"
)

func TestPrivateChannelAuth(t *testing.T) {
	ts := newServer(t)
	other := ts.connect(t)
	tests := []struct {
		name string
		auth func(socketID string) string
	}{
		{"no auth", func(string) string { return "" }},
		{"garbage", func(string) string { return "nonsense" }},
		{"wrong key", func(s string) string {
			return "other:" + privateAuth(testKey, testSecret, s, "private-a")[len(testKey)+1:]
		}},
		{"wrong secret", func(s string) string { return privateAuth(testKey, "nope", s, "private-a") }},
		{"other socket's signature", func(string) string { return privateAuth(testKey, testSecret, other.SocketID, "private-a") }},
		{"other channel's signature", func(s string) string { return privateAuth(testKey, testSecret, s, "private-b") }},
		{"presence formula", func(s string) string { return presenceAuth(testKey, testSecret, s, "private-a", "{}") }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := ts.connect(t)
			c.SubscribeMsg("private-a", tc.auth(c.SocketID), "")
			if code, msg := c.WaitError(); code != 4009 {
				t.Fatalf("code %d (%s), want 4009", code, msg)
			}
			ts.trigger(t, "private-a", "secret", "x")
			c.ExpectNone("", "private-a") // neither succeeded nor events
			c.Ping()                      // connection stays open
		})
	}
	t.Run("valid", func(t *testing.T) {
		c := ts.connect(t)
		ev := ts.subscribePrivate(c, "private-a")
		if ev.DataString(t) != "{}" {
			t.Errorf("data %s", ev.Data)
		}
		ts.trigger(t, "private-a", "secret", "x")
		c.WaitEvent("secret", "private-a")
	})
	t.Run("encrypted channel relays ciphertext", func(t *testing.T) {
		c := ts.connect(t)
		ts.subscribePrivate(c, "private-encrypted-a")
		payload := `{"nonce":"bm9uY2U=","ciphertext":"Y2lwaGVy"}`
		ts.trigger(t, "private-encrypted-a", "enc", payload)
		if d := c.WaitEvent("enc", "private-encrypted-a").DataString(t); d != payload {
			t.Errorf("data %q", d)
		}
	})
}

type presenceInfo struct {
	Presence struct {
		Count int                        `json:"count"`
		IDs   []string                   `json:"ids"`
		Hash  map[string]json.RawMessage `json:"hash"`
	} `json:"presence"`
}

func TestPresenceMembership(t *testing.T) {
	ts := newServer(t)
	const room = "presence-room"
	infoA := `{"name":"Ann","tags":["x","y"],"uni":"é😀\"q\""}`
	a := ts.connect(t)
	var p presenceInfo
	ts.subscribePresence(a, room, `{"user_id":"1","user_info":`+infoA+`}`).DataInto(t, &p)
	if p.Presence.Count != 1 || len(p.Presence.IDs) != 1 || p.Presence.IDs[0] != "1" || string(p.Presence.Hash["1"]) != infoA {
		t.Fatalf("first member's view: %+v", p)
	}

	// B joins: A sees member_added with user_info intact, B sees both.
	b1 := ts.connect(t)
	ts.subscribePresence(b1, room, `{"user_id":"2","user_info":{"name":"Bob"}}`).DataInto(t, &p)
	if p.Presence.Count != 2 || len(p.Presence.Hash) != 2 || string(p.Presence.Hash["1"]) != infoA {
		t.Errorf("second member's view: %+v", p)
	}
	var added struct {
		UserID   string          `json:"user_id"`
		UserInfo json.RawMessage `json:"user_info"`
	}
	a.WaitEvent("pusher_internal:member_added", room).DataInto(t, &added)
	if added.UserID != "2" || string(added.UserInfo) != `{"name":"Bob"}` {
		t.Errorf("member_added %+v", added)
	}
	b1.ExpectNone("pusher_internal:member_added", "") // never to the joiner itself

	// Same user on a second socket: no second member_added, members de-duplicated.
	b2 := ts.connect(t)
	ts.subscribePresence(b2, room, `{"user_id":"2","user_info":{"name":"Bob"}}`).DataInto(t, &p)
	if p.Presence.Count != 2 || len(p.Presence.IDs) != 2 {
		t.Errorf("duplicate user counted: %+v", p)
	}
	a.ExpectNone("pusher_internal:member_added", "")

	// One of B's sockets leaves: B is still there.
	_ = b1.WS.Close()
	testutil.WaitFor(t, "b1 gone", func() bool { return ts.s.Registry().SubscriptionCount(testAppID, room) == 2 })
	a.ExpectNone("pusher_internal:member_removed", "")

	// The last one leaves (by unsubscribing): member_removed once.
	b2.SendRaw(`{"event":"pusher:unsubscribe","data":{"channel":"` + room + `"}}`)
	var removed map[string]any
	a.WaitEvent("pusher_internal:member_removed", room).DataInto(t, &removed)
	if removed["user_id"] != "2" || len(removed) != 1 {
		t.Errorf("member_removed %v", removed)
	}
	a.ExpectNone("pusher_internal:member_removed", "")
	if ids := memberIDs(t, ts.s, room); !slices.Equal(ids, []string{"1"}) {
		t.Errorf("members after leave: %v", ids)
	}
}

func TestPresenceNumericUserID(t *testing.T) {
	ts := newServer(t)
	a := ts.connect(t)
	ts.subscribePresence(a, "presence-foobar", `{"user_id":"watcher"}`)
	b := ts.connect(t)
	var p presenceInfo
	ts.subscribePresence(b, "presence-foobar", `{"user_id":10,"user_info":{"name":"Mr. Channels"}}`).DataInto(t, &p)
	if p.Presence.Count != 2 || string(p.Presence.Hash["10"]) != `{"name":"Mr. Channels"}` {
		t.Errorf("numeric id view: %+v", p)
	}
	if string(p.Presence.Hash["watcher"]) != "{}" {
		t.Errorf("missing user_info should be {}: %s", p.Presence.Hash["watcher"])
	}
	var added map[string]any
	a.WaitEvent("pusher_internal:member_added", "presence-foobar").DataInto(t, &added)
	if added["user_id"] != "10" {
		t.Errorf("member_added user_id %#v, want \"10\"", added["user_id"])
	}
	// An empty channel's first member still gets hash as an object.
	c := ts.connect(t)
	ev := ts.subscribePresence(c, "presence-empty", `{"user_id":"solo"}`)
	if want := `{"presence":{"count":1,"ids":["solo"],"hash":{"solo":{}}}}`; ev.DataString(t) != want {
		t.Errorf("solo view %s, want %s", ev.DataString(t), want)
	}
}

func TestPresenceRejected(t *testing.T) {
	ts := newServer(t, withApp(func(a *config.App) { a.MaxPresenceMembers = 2 }))
	const room = "presence-r"
	watcher := ts.connect(t)
	ts.subscribePresence(watcher, room, `{"user_id":"w"}`)
	tests := []struct {
		name        string
		channelData string
		badSig      bool
		code        int
	}{
		{"bad signature", `{"user_id":"x"}`, true, 4009},
		{"no channel_data", ``, false, 4009},
		{"channel_data not JSON", `{user}`, false, 4009},
		{"no user_id", `{"user_info":{}}`, false, 4009},
		{"empty user_id", `{"user_id":""}`, false, 4009},
		{"user_id object", `{"user_id":{"a":1}}`, false, 4009},
		{"user_id too long", `{"user_id":"` + strings.Repeat("u", 129) + `"}`, false, 4009},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := ts.connect(t)
			sig := presenceAuth(testKey, testSecret, c.SocketID, room, tc.channelData)
			if tc.badSig {
				sig = presenceAuth(testKey, testSecret, c.SocketID, room, `{"user_id":"other"}`)
			}
			c.SubscribeMsg(room, sig, tc.channelData)
			if code, msg := c.WaitError(); code != tc.code {
				t.Errorf("code %d (%s), want %d", code, msg, tc.code)
			}
			c.ExpectNone("pusher_internal:subscription_succeeded", "")
			watcher.ExpectNone("pusher_internal:member_added", "")
			c.Ping()
		})
	}
	t.Run("over max_presence_members", func(t *testing.T) {
		c2 := ts.connect(t)
		ts.subscribePresence(c2, room, `{"user_id":"second"}`)
		c3 := ts.connect(t)
		c3.SubscribeMsg(room, presenceAuth(testKey, testSecret, c3.SocketID, room, `{"user_id":"third"}`), `{"user_id":"third"}`)
		if code, _ := c3.WaitError(); code != 4100 {
			t.Errorf("code %d, want 4100", code)
		}
		// An existing member may still add a socket.
		c4 := ts.connect(t)
		ts.subscribePresence(c4, room, `{"user_id":"second"}`)
	})
}

// Re-subscribing to a presence channel as another user must not leave the first user behind
// as a ghost member.
func TestPresenceResubscribeAsOtherUser(t *testing.T) {
	ts := newServer(t)
	const room = "presence-switch"
	watcher := ts.connect(t)
	ts.subscribePresence(watcher, room, `{"user_id":"w"}`)
	c := ts.connect(t)
	ts.subscribePresence(c, room, `{"user_id":"old"}`)
	watcher.WaitEvent("pusher_internal:member_added", room)
	ts.subscribePresence(c, room, `{"user_id":"new"}`)
	_ = c.WS.Close()
	testutil.WaitFor(t, "socket left", func() bool { return ts.s.Registry().SubscriptionCount(testAppID, room) == 1 })
	if ids := memberIDs(t, ts.s, room); !slices.Equal(ids, []string{"w"}) {
		t.Errorf("members after the socket left: %v", ids)
	}
}

// hookedPresence calls hook right after the nth Members call (once), then behaves as the
// store it wraps.
type hookedPresence struct {
	channels.PresenceStore
	calls atomic.Int32
	n     atomic.Int32
	hook  func()
}

func (h *hookedPresence) Members(ctx context.Context, app, channel string) ([]channels.Member, error) {
	ms, err := h.PresenceStore.Members(ctx, app, channel)
	if n := h.n.Load(); n > 0 && h.calls.Add(1) == n {
		h.n.Store(0)
		h.hook() // after the read: the caller holds a list that misses what the hook does
	}
	return ms, err
}

// A member who joins while another socket's subscription is being set up is seen by that
// socket, either in its member list or as a member_added after subscription_succeeded.
func TestPresenceConcurrentJoinIsNotMissed(t *testing.T) {
	const room = "presence-race"
	for call := int32(1); call <= 2; call++ {
		t.Run(fmt.Sprintf("join during Members call %d", call), func(t *testing.T) {
			store := &hookedPresence{PresenceStore: channels.NewMemoryPresence()}
			reg := channels.NewRegistry(channels.Options{Presence: store})
			ts := newServer(t, withOptions(func(o *Options) { o.Registry = reg }))
			a, b := ts.connect(t), ts.connect(t)
			joined := make(chan struct{})
			// The hook runs on a's reader, in the middle of a's subscribe. It must not wait on
			// another socket's reader (with epoll pollers both may share one goroutine), so it
			// plays b's join as another node would: store join, then member_added published.
			store.hook = func() {
				ctx := context.Background()
				if _, err := store.PresenceStore.Join(ctx, testAppID, room, b.SocketID, channels.Member{UserID: "b", Info: []byte(`{}`)}); err != nil {
					t.Error(err)
				}
				frame := EventFrame("pusher_internal:member_added", room, `{"user_id":"b","user_info":{}}`)
				if err := reg.Publish(ctx, channels.Message{AppID: testAppID, Channel: room, Frame: frame}); err != nil {
					t.Error(err)
				}
				close(joined)
			}
			store.calls.Store(0)
			store.n.Store(call)
			var p presenceInfo
			ts.subscribePresence(a, room, `{"user_id":"a"}`).DataInto(t, &p)
			<-joined
			if _, ok := p.Presence.Hash["b"]; ok {
				return
			}
			ev := a.WaitEvent("pusher_internal:member_added", room)
			var added map[string]any
			ev.DataInto(t, &added)
			if added["user_id"] != "b" {
				t.Errorf("member_added %v", added)
			}
		})
	}
}

// memberIDs lists a presence channel's user ids, as GET .../users answers them.
func memberIDs(t *testing.T, s *Server, channel string) []string {
	t.Helper()
	ms, err := s.Members(context.Background(), testAppID, channel)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, len(ms))
	for i, m := range ms {
		ids[i] = m.UserID
	}
	return ids
}
