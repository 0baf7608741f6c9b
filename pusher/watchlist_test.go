package pusher

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/reverbgo/reverbgo/auth"
)

func TestParseWatchlist(t *testing.T) {
	many, ids := make([]string, 101), make([]string, 101)
	for i := range many {
		ids[i] = fmt.Sprint(i)
		many[i] = fmt.Sprintf("%q", ids[i])
	}
	tests := []struct {
		raw  string
		want []string
		err  bool
	}{
		{``, nil, false},
		{`null`, nil, false},
		{`[]`, []string{}, false},
		{`["a", 7, "a", "b"]`, []string{"a", "7", "b"}, false},
		{`[` + strings.Join(many[:100], ",") + `]`, ids[:100], false}, // exactly 100 is allowed
		{`[` + strings.Join(many, ",") + `]`, nil, true},
		{`"a"`, nil, true},
		{`[""]`, nil, true},
		{`[{"id":"a"}]`, nil, true},
		{`["` + strings.Repeat("x", 129) + `"]`, nil, true},
	}
	for _, tt := range tests {
		got, err := parseWatchlist(json.RawMessage(tt.raw))
		if (err != nil) != tt.err {
			t.Errorf("%.40s: error %v, want error %v", tt.raw, err, tt.err)
			continue
		}
		if tt.err {
			continue
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: %q, want %q", tt.raw, got, tt.want)
		}
	}
}

// watchEvents returns the events of the next pusher_internal:watchlist_events frame.
func watchEvents(t *testing.T, c *client) []map[string]any {
	t.Helper()
	var d struct {
		Events []map[string]any `json:"events"`
	}
	c.WaitEvent(watchlistEvent, "").DataInto(t, &d)
	return d.Events
}

func wantWatch(t *testing.T, c *client, name string, users ...string) {
	t.Helper()
	evs := watchEvents(t, c)
	var got []string
	if len(evs) == 1 && evs[0]["name"] == name {
		ids, _ := evs[0]["user_ids"].([]any)
		for _, id := range ids {
			got = append(got, fmt.Sprint(id))
		}
	}
	if !reflect.DeepEqual(got, users) {
		t.Fatalf("watchlist events %v, want one %q event with %q", evs, name, users)
	}
}

func TestWatchlistOnlineOffline(t *testing.T) {
	ts := newServer(t)
	w := ts.connect(t)
	ts.signin(w, `{"id":"w","watchlist":["b","c"]}`)
	w.ExpectNone(watchlistEvent, "") // nobody watched is online: no event at all

	b1, b2 := ts.connect(t), ts.connect(t)
	ts.signin(b1, `{"id":"b"}`)
	wantWatch(t, w, "online", "b")
	ts.signin(b2, `{"id":"b"}`) // a second connection of b: no transition
	ts.signin(b1, `{"id":"b"}`) // a repeated signin: none either
	w.ExpectNone(watchlistEvent, "")
	_ = b1.WS.Close()
	w.ExpectNone(watchlistEvent, "") // b is still online through b2
	_ = b2.WS.Close()
	wantWatch(t, w, "offline", "b")

	// A watcher signing in later is told who is online now, in one event.
	c := ts.connect(t)
	ts.signin(c, `{"id":"c"}`)
	wantWatch(t, w, "online", "c")
	late := ts.connect(t)
	ts.signin(late, `{"id":"late","watchlist":["b","c","nobody"]}`)
	wantWatch(t, late, "online", "c")

	// Signing in as someone else takes the old user offline (c's only connection).
	ts.signin(c, `{"id":"c2"}`)
	wantWatch(t, w, "offline", "c")
	wantWatch(t, late, "offline", "c")
}

func TestWatchlistRejected(t *testing.T) {
	ids := make([]string, 101)
	for i := range ids {
		ids[i] = fmt.Sprintf(`"u%d"`, i)
	}
	tests := []struct{ name, userData string }{
		{"101 ids", `{"id":"w","watchlist":[` + strings.Join(ids, ",") + `]}`},
		{"not an array", `{"id":"w","watchlist":"u1"}`},
		{"an empty id", `{"id":"w","watchlist":["u1",""]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := newServer(t)
			c := ts.connect(t)
			c.Send(map[string]any{"event": "pusher:signin", "data": map[string]any{
				"auth": ts.app.Key + ":" + auth.SigninSignature(ts.app.Secret, c.SocketID, tt.userData), "user_data": tt.userData,
			}})
			code, msg := c.WaitError()
			if code != 4009 || !strings.Contains(msg, "watchlist") {
				t.Fatalf("got %d %q, want 4009 about the watchlist", code, msg)
			}
			c.ExpectNone("pusher:signin_success", "")
			// Not signed in: the user's own channel stays closed.
			c.SubscribeMsg("#server-to-user-w", "", "")
			if code, _ := c.WaitError(); code != 4009 {
				t.Errorf("subscribe after a failed signin: %d", code)
			}
		})
	}
}

// FuzzParseWatchlist: no user_data watchlist makes the parser panic, and an accepted one is
// at most maxWatchlist distinct, valid user ids.
func FuzzParseWatchlist(f *testing.F) {
	for _, s := range []string{`["a",1,"a"]`, `[]`, `null`, `"a"`, `[""]`, `[[1]]`, `[1e400]`, `["\u0000"]`, `[` + strings.Repeat(`"x",`, 100) + `"y"]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ids, err := parseWatchlist(b)
		if err != nil {
			return
		}
		if len(ids) > maxWatchlist {
			t.Fatalf("%d ids accepted", len(ids))
		}
		seen := map[string]bool{}
		for _, id := range ids {
			if id == "" || len(id) > maxUserIDLength || seen[id] {
				t.Fatalf("bad or repeated id %q in %q", id, ids)
			}
			seen[id] = true
		}
	})
}
