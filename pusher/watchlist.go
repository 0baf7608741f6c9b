package pusher

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/reverbgo/reverbgo/channels"
)

// Watchlist (Pusher user authentication): a signed-in socket whose user_data carries
// "watchlist": [ids] receives pusher_internal:watchlist_events with
// {"events":[{"name":"online","user_ids":[...]}]} for the watched users online when it signs
// in (nothing when none is), then {"name":"online"} when a watched user's first signed-in
// connection appears anywhere in the cluster and {"name":"offline"} when their last one
// closes, as pusher-js's WatchlistFacade reads them (pusher.user.watchlist.bind('online')).
//
// Who is online is the presence store's OnlineChannel (channels/online.go): a signed-in
// connection joins it, its close or a signin as someone else leaves it. A join that was the
// user's first, a leave that was their last, or a member the store removed itself (a dead
// node reaped, MemberGone) is announced to every node on WatchlistChannel. Each node reads
// the state of the announced users it has watchers for again, on one goroutine
// (watchlist.run) so reads and the events they cause stay in order, and sends each watcher
// an event only when that user's state differs from what the watcher was last told: once
// per transition, whatever the number of connections, duplicate announcements or the order
// in which announcements from different nodes arrive. The same goroutine answers new
// watchers, so an announcement racing a signin never yields a duplicate "online".

// maxWatchlist is Pusher's limit on a watchlist's length.
const maxWatchlist = 100

// watchlistEvent is the event pusher-js's WatchlistFacade listens for.
const watchlistEvent = "pusher_internal:watchlist_events"

var errWatchlist = errors.New("watchlist must be an array of at most 100 user ids")

// parseWatchlist reads user_data's watchlist: absent or null is none; otherwise an array of
// at most maxWatchlist valid user ids (strings or numbers), duplicates dropped.
func parseWatchlist(raw json.RawMessage) ([]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var items []json.RawMessage
	if json.Unmarshal(raw, &items) != nil || len(items) > maxWatchlist {
		return nil, errWatchlist
	}
	out := make([]string, 0, len(items))
	seen := make(map[string]bool, len(items))
	for _, it := range items {
		id, ok := userIDString(it)
		if !ok {
			return nil, errWatchlist
		}
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out, nil
}

// watcher is one socket's watchlist; known is what it was last told per user (nil until
// its first answer is sent).
type watcher struct {
	app   string
	users []string
	known map[string]bool
}

// watchlist is the node's watchers and the goroutine that tells them.
type watchlist struct {
	s    *Server
	wake chan struct{}

	mu       sync.Mutex
	watchers map[userKey]map[*Conn]struct{} // watched user -> watching sockets
	conns    map[*Conn]*watcher
	pending  map[*Conn]struct{} // watchers not yet answered
	online   map[*Conn]string   // the user each signed-in socket joined OnlineChannel as
	dirty    map[userKey]struct{}
}

func newWatchlist(s *Server) *watchlist {
	w := &watchlist{
		s: s, wake: make(chan struct{}, 1),
		watchers: map[userKey]map[*Conn]struct{}{}, conns: map[*Conn]*watcher{},
		pending: map[*Conn]struct{}{}, online: map[*Conn]string{}, dirty: map[userKey]struct{}{},
	}
	for id := range s.apps.Load().byID {
		s.reg.Subscribe(id, channels.WatchlistChannel, watchAnnouncements{w: w, app: id})
	}
	s.wg.Add(1)
	go w.run()
	return w
}

// watchAnnouncements is each app's subscriber to WatchlistChannel on this node.
type watchAnnouncements struct {
	w   *watchlist
	app string
}

func (a watchAnnouncements) SocketID() string { return "\x00watchlist" }

// Send marks the announced user for a fresh read if this node has watchers of them; it
// never blocks.
func (a watchAnnouncements) Send(frame []byte) {
	w := a.w
	k := userKey{a.app, string(frame)}
	w.mu.Lock()
	_, watched := w.watchers[k]
	if watched {
		w.dirty[k] = struct{}{}
	}
	w.mu.Unlock()
	if watched {
		w.poke()
	}
}

func (w *watchlist) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// announce tells every node that user's online state may have changed.
func (w *watchlist) announce(app, user string) {
	_ = w.s.reg.PublishNoWait(channels.Message{AppID: app, Channel: channels.WatchlistChannel, Frame: []byte(user)})
}

// signedIn records a successful signin of c as user with its watchlist: c counts as one of
// user's connections (leaving prev's when it signed in as someone else) and watches list
// (replacing an earlier list). The presence store may wait on Redis: off the poller.
func (w *watchlist) signedIn(at runsOn, c *Conn, user string, list []string) {
	app := c.app.cfg().ID
	at.await(c, func(t onTask) {
		ctx := t.ctx
		if c.isClosing() {
			return
		}
		store := w.s.reg.Presence()
		w.mu.Lock()
		prev := w.online[c]
		w.online[c] = user
		w.mu.Unlock()
		if prev != "" && prev != user {
			if last, err := store.Leave(ctx, app, channels.OnlineChannel, c.socketID, prev); err == nil && last {
				w.announce(app, prev)
			}
		}
		if first, err := store.Join(ctx, app, channels.OnlineChannel, c.socketID, channels.Member{UserID: user}); err != nil {
			w.s.log.Warn("watchlist: online state not recorded", "app", app, "error", err)
		} else if first {
			w.announce(app, user)
		}
		w.watch(c, app, list)
	})
}

// watch replaces c's watchlist; an empty list stops watching.
func (w *watchlist) watch(c *Conn, app string, list []string) {
	w.mu.Lock()
	w.unwatchLocked(c)
	if len(list) > 0 {
		w.conns[c] = &watcher{app: app, users: list}
		w.pending[c] = struct{}{}
		for _, u := range list {
			k := userKey{app, u}
			set := w.watchers[k]
			if set == nil {
				set = make(map[*Conn]struct{}, 1)
				w.watchers[k] = set
			}
			set[c] = struct{}{}
		}
	}
	w.mu.Unlock()
	if len(list) > 0 {
		w.poke()
	}
}

func (w *watchlist) unwatchLocked(c *Conn) {
	old := w.conns[c]
	if old == nil {
		return
	}
	for _, u := range old.users {
		k := userKey{old.app, u}
		if set := w.watchers[k]; set != nil {
			delete(set, c)
			if len(set) == 0 {
				delete(w.watchers, k)
				delete(w.dirty, k)
			}
		}
	}
	delete(w.conns, c)
	delete(w.pending, c)
}

// closed forgets a closed socket: it stops watching, and its user loses a connection (the
// last one is announced). Runs where leaveAll runs (the task goroutine when remote).
func (w *watchlist) closed(t onTask, c *Conn) {
	ctx := t.ctx
	w.mu.Lock()
	w.unwatchLocked(c)
	user, signed := w.online[c]
	delete(w.online, c)
	w.mu.Unlock()
	if !signed {
		return
	}
	app := c.app.cfg().ID
	// A failed leave is retried by the store, which then reports it through MemberGone.
	if last, err := w.s.reg.Presence().Leave(ctx, app, channels.OnlineChannel, c.socketID, user); err == nil && last {
		w.announce(app, user)
	}
}

// watchRetry is how long the goroutine waits after a failed read before trying again.
const watchRetry = time.Second

func (w *watchlist) run() {
	defer w.s.wg.Done()
	for {
		select {
		case <-w.s.stop:
			return
		case <-w.wake:
		}
		for !w.round() {
			select {
			case <-w.s.stop:
				return
			case <-time.After(watchRetry):
			}
		}
	}
}

// delivery is one frame for one socket, sent once the lock is released.
type delivery struct {
	c     *Conn
	frame []byte
}

// round reads the state of every dirty watched user and of every pending watcher's users,
// then tells the watchers what changed; it reports false when a read failed (the users
// stay dirty, the watchers pending).
func (w *watchlist) round() bool {
	w.mu.Lock()
	dirty := w.dirty
	w.dirty = map[userKey]struct{}{}
	read := map[string]map[string]struct{}{} // app -> users
	add := func(app, u string) {
		set := read[app]
		if set == nil {
			set = map[string]struct{}{}
			read[app] = set
		}
		set[u] = struct{}{}
	}
	for k := range dirty {
		add(k.app, k.user)
	}
	for c := range w.pending {
		wt := w.conns[c]
		for _, u := range wt.users {
			add(wt.app, u)
		}
	}
	w.mu.Unlock()
	if len(read) == 0 {
		return true
	}

	state := make(map[userKey]bool)
	ok := true
	for app, set := range read {
		users := make([]string, 0, len(set))
		for u := range set {
			users = append(users, u)
		}
		on, err := w.present(app, users)
		if err != nil {
			w.s.log.Warn("watchlist: online state unavailable", "app", app, "error", err)
			ok = false
			continue
		}
		for i, u := range users {
			state[userKey{app, u}] = on[i]
		}
	}

	var out []delivery
	frames := map[userKey][2][]byte{} // one frame per user and state, shared by every watcher
	frameOf := func(k userKey, on bool) []byte {
		f := frames[k]
		i := 0
		if on {
			i = 1
		}
		if f[i] == nil {
			f[i] = watchlistFrame(on, []string{k.user})
			frames[k] = f
		}
		return f[i]
	}
	w.mu.Lock()
	for k := range dirty {
		on, read := state[k]
		if !read {
			w.dirty[k] = struct{}{} // try again next round
			continue
		}
		for c := range w.watchers[k] {
			wt := w.conns[c]
			if wt.known == nil {
				continue // answered below with everything
			}
			if wt.known[k.user] != on {
				wt.known[k.user] = on
				out = append(out, delivery{c, frameOf(k, on)})
			}
		}
	}
	for c := range w.pending {
		wt := w.conns[c]
		known := make(map[string]bool, len(wt.users))
		var online []string
		complete := true
		for _, u := range wt.users {
			on, read := state[userKey{wt.app, u}]
			if !read {
				complete = false
				break
			}
			known[u] = on
			if on {
				online = append(online, u)
			}
		}
		if !complete {
			continue
		}
		wt.known = known
		delete(w.pending, c)
		if len(online) > 0 {
			out = append(out, delivery{c, watchlistFrame(true, online)})
		}
	}
	w.mu.Unlock()
	for _, d := range out {
		d.c.Send(d.frame)
	}
	return ok
}

// present reads the users' online state from the presence store.
func (w *watchlist) present(app string, users []string) ([]bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), remoteTimeout)
	defer cancel()
	store := w.s.reg.Presence()
	if l, ok := store.(channels.PresenceLookup); ok {
		return l.Present(ctx, app, channels.OnlineChannel, users)
	}
	members, err := store.Members(ctx, app, channels.OnlineChannel)
	if err != nil {
		return nil, err
	}
	out := make([]bool, len(users))
	for i, u := range users {
		out[i] = hasMember(members, u)
	}
	return out, nil
}

// watchlistFrame is pusher_internal:watchlist_events with one online or offline event.
func watchlistFrame(online bool, users []string) []byte {
	name := "offline"
	if online {
		name = "online"
	}
	ids := make([]json.RawMessage, len(users))
	for i, u := range users {
		ids[i] = appendJSONString(nil, u)
	}
	data := mustJSON(map[string]any{"events": []map[string]any{{"name": name, "user_ids": ids}}})
	return EventFrame(watchlistEvent, "", data)
}
