package pusher

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/reverbgo/reverbgo/auth"
	"github.com/reverbgo/reverbgo/channels"
	"github.com/reverbgo/reverbgo/ws"
)

// Presence limits (Pusher's).
const (
	maxUserIDLength = 128
	maxUserInfoSize = 1024
)

// handle dispatches one client frame. Bad input gets a pusher:error; the socket stays open.
// It runs on the goroutine that reads the socket (a poller, or readLoop): what may wait on
// Redis is handed to the connection's task goroutine (tasks.go), and while that has work,
// every request (a ping too) waits behind it, so requests take effect in the order sent
// and a pong proves that everything before the ping was handled.
func (c *Conn) handle(raw []byte) {
	c.app.stats.clientMessages.Add(1)
	if c.app.cfg().RateLimiting.Enabled && !c.withinRateLimit() {
		return
	}
	m, err := DecodeClientMessage(raw)
	if err != nil {
		c.sendError(ErrInvalidMessage)
		return
	}
	if m.Event == "pusher:pong" {
		return // activity was recorded by the read loop
	}
	if (c.srv.remote || c.srv.history != nil) && c.tasksBusy() { // a replay may be queued (recovery.go)
		cp := append([]byte(nil), raw...) // raw is the reader's buffer, valid during this call
		if !c.enqueue(func(t onTask) {
			if m, err := DecodeClientMessage(cp); err == nil && !c.isClosing() {
				c.dispatch(t, m)
			}
		}, false) {
			c.srv.tasksRefused.Add(1)
			c.sendError(ErrBusy)
		}
		return
	}
	c.dispatch(onReader{}, m)
}

// dispatch handles a decoded request, on the reading goroutine (onReader) or on the task
// goroutine (onTask, with its deadline) while earlier work is queued there.
func (c *Conn) dispatch(at runsOn, m ClientMessage) {
	switch m.Event {
	case "pusher:ping":
		c.Send(pongFrame)
	case "pusher:subscribe":
		c.subscribe(at, m.Data)
	case "pusher:unsubscribe":
		d, err := DecodeSubscribe(m.Data)
		if err != nil {
			c.sendError(ErrInvalidMessage)
			return
		}
		c.unsubscribe(at, d.Channel)
	case "pusher:signin":
		c.signin(at, m.Data)
	default:
		if strings.HasPrefix(m.Event, "client-") {
			c.clientEvent(m)
			return
		}
		if strings.HasPrefix(m.Event, "pusher:") || strings.HasPrefix(m.Event, "pusher_internal:") {
			c.sendError(ErrInvalidMessage)
			return
		}
		c.sendError(ErrClientEventPrefix)
	}
}

var pongFrame = eventFrameNoData("pusher:pong", "")

func (c *Conn) sendError(e ProtoError) {
	c.Send(e.frame())
}

// sendErrorDetail sends e with detail appended to its message ("<message>: <detail>").
func (c *Conn) sendErrorDetail(e ProtoError, detail string) {
	c.Send(errorFrame(e.Code(), e.Message()+": "+detail))
}

// presenceData is the channel_data of a presence subscription.
type presenceData struct {
	UserID   json.RawMessage `json:"user_id"`
	UserInfo json.RawMessage `json:"user_info"`
}

// userIDString accepts a JSON string or number, as Laravel sends either.
func userIDString(raw json.RawMessage) (string, bool) {
	if len(raw) == 0 {
		return "", false
	}
	var s string
	if raw[0] == '"' {
		if json.Unmarshal(raw, &s) != nil {
			return "", false
		}
	} else {
		var n json.Number
		if json.Unmarshal(raw, &n) != nil {
			return "", false
		}
		s = n.String()
	}
	return s, s != "" && len(s) <= maxUserIDLength
}

func (c *Conn) subscribe(at runsOn, data json.RawMessage) {
	d, err := DecodeSubscribe(data)
	if err != nil {
		c.sendError(ErrInvalidMessage)
		return
	}
	name := d.Channel
	if !channels.ValidName(name) {
		c.sendError(ErrInvalidChannelName)
		return
	}
	res, rerr := decodeResume(data) // recovery.go
	if rerr != nil && rerr != errNoResume {
		c.sendErrorDetail(ErrInvalidResume, rerr.Error())
		return
	}
	var resume *resumeRequest
	if rerr == nil {
		r := res // only a resume escapes: res itself stays on the stack (issue 25)
		resume = &r
	}
	cfg := c.app.cfg()
	kind := channels.KindOf(name)
	var member channels.Member
	switch {
	case kind == channels.ServerToUser:
		c.subsMu.RLock()
		user := c.userID
		c.subsMu.RUnlock()
		if user == "" || name != channels.ServerToUserPrefix+user {
			c.sendError(ErrUnauthorized)
			return
		}
	case kind.NeedsAuth():
		channelData := ""
		if kind.IsPresence() {
			channelData = d.ChannelData
		}
		if !auth.VerifyChannel(cfg.Key, cfg.Secret, c.socketID, name, channelData, d.Auth) {
			c.sendError(ErrUnauthorized)
			return
		}
		if kind.IsPresence() {
			var pd presenceData
			if json.Unmarshal([]byte(d.ChannelData), &pd) != nil {
				c.sendError(ErrInvalidChannelData)
				return
			}
			uid, ok := userIDString(pd.UserID)
			if !ok || len(pd.UserInfo) > maxUserInfoSize {
				c.sendError(ErrInvalidPresenceMember)
				return
			}
			if len(pd.UserInfo) == 0 || string(pd.UserInfo) == "null" {
				pd.UserInfo = json.RawMessage("{}")
			}
			member = channels.Member{UserID: uid, Info: pd.UserInfo}
		}
	}
	if kind.IsPresence() {
		if resume != nil && c.srv.history != nil { // a replay runs on the task queue, never the reader
			c.enqueueOrBusy(func(t onTask) { c.subscribePresence(t, name, member, resume) })
			return
		}
		at.await(c, func(t onTask) { c.subscribePresence(t, name, member, resume) })
		return
	}
	if _, again := c.subscribed(name); again {
		// The socket has the channel: answer as before, without a replay or a round trip
		// (a flood of repeats costs nothing but the answers).
		c.resubscribed(name)
		return
	}
	// The cluster socket index is written before the answer, and with scaling a cache
	// channel's last event is read from Redis: both wait, so they run as tasks.
	if resume != nil && c.srv.history != nil { // a replay runs on the task queue, never the reader
		c.enqueueOrBusy(func(t onTask) {
			if _, again := c.subscribed(name); again {
				c.resubscribed(name)
				return
			}
			c.subscribeChannel(t, name, kind, resume)
		})
		return
	}
	// With scaling a recovery channel's position is read from Redis: a task too.
	if c.srv.reg.SubscribeWaits(name) || (c.srv.remote && (kind.IsCache() || c.srv.recoveryOf(c.app.cfg().ID, name) != nil)) {
		at.await(c, func(t onTask) {
			if _, again := c.subscribed(name); again { // a repeat queued behind the first
				c.resubscribed(name)
				return
			}
			c.subscribeChannel(t, name, kind, resume)
		})
		return
	}
	c.subscribeChannel(c.localTask(), name, kind, resume)
}

// resubscribed answers a subscribe to a channel the socket already has: the page token
// it was issued, if any, and subscription_succeeded, with no replay.
func (c *Conn) resubscribed(name string) {
	if c.isClosing() {
		return
	}
	if _, session := c.pageSession(name); session != nil {
		c.Send(session)
	}
	c.Send(subscribedFrame(name, "{}"))
}

// subscribeChannel subscribes to a channel that is not presence and answers; t is a task's
// when the subscribe or the cache replay waits on Redis (see subscribe).
func (c *Conn) subscribeChannel(t onTask, name string, kind channels.Kind, resume *resumeRequest) {
	if c.isClosing() {
		return
	}
	cfg := c.app.cfg()
	sub, session := c.pageSession(name) // toolmark.session goes just before subscription_succeeded
	b := c.holdWrites()
	to, rsub, rec := c.recoverySubscriber(name, resume) // recovery.go
	count, added := c.srv.reg.Subscribe(cfg.ID, name, to)
	c.addSub(name, sub)
	if rec != nil && c.srv.remote && !c.recoveryRouted(t, name) {
		c.refuseSubscribe(name, b)
		return
	}
	frames := c.answerFrames(t, name, "{}", rec, rsub, resume)
	if session != nil {
		frames = append([][]byte{session}, frames...)
	}
	if kind.IsCache() {
		// On the connection's task goroutine (bounded, issue 20 fault 3): once this node's
		// Redis subscription to the channel is confirmed (interest routing: an event
		// published after the read below reaches this node), the last event is read; the
		// barrier keeps subscription_succeeded and the replay ahead of later events.
		ctx, cancel := context.WithTimeout(t.ctx, cacheReplayTimeout)
		_ = c.srv.reg.AwaitRouted(ctx, cfg.ID, name)
		cancel()
		frames = append(frames, c.cacheReplay(t, name))
		b.Release(frames...)
	} else if !c.srv.reg.Routes() {
		b.Release(frames...) // every publish is local: no confirmation, no closure (issue 25)
	} else {
		// Under interest routing the answer waits (in the barrier, not on this goroutine) until
		// this node's Redis subscription to the channel is confirmed: no lost first event. A
		// socket that unsubscribed meanwhile gets no answer, only its barrier released.
		c.srv.reg.WhenRouted(cfg.ID, name, func(routed bool) {
			if routed {
				b.Release(frames...)
			} else {
				b.Release()
			}
		})
	}
	// added: a repeated subscribe by a channel's only subscriber occupies nothing anew.
	if added && count == 1 && c.srv.wants(cfg.ID, "channel_occupied") {
		c.srv.emit(cfg.ID, map[string]any{"name": "channel_occupied", "channel": name})
	}
	if added {
		c.srv.emitCount(cfg.ID, name)
	}
}

// subscribePresence joins a presence channel; it may wait on Redis, so it runs as a task
// (see runsOn). A store that fails or misses the task's deadline gets the client a
// pusher:error (4100) to retry.
func (c *Conn) subscribePresence(t onTask, name string, m channels.Member, resume *resumeRequest) {
	s := c.srv
	cfg := c.app.cfg()
	ctx := t.ctx
	if c.isClosing() {
		return
	}
	// Re-subscribing as another user leaves the old membership first: leave only knows the
	// subscription's newest userID, so the old one would stay a ghost member for ever.
	old, again := c.subscribed(name)
	if again && old.userID != m.UserID {
		c.unsubscribe(t, name)
		again = false
	}
	members, err := s.reg.Presence().Members(ctx, cfg.ID, name)
	if err != nil {
		c.sendError(ErrPresenceUnavailable)
		return
	}
	if cfg.MaxPresenceMembers > 0 && len(members) >= cfg.MaxPresenceMembers && !hasMember(members, m.UserID) {
		c.sendError(ErrPresenceFull)
		return
	}
	first, err := s.reg.Presence().Join(ctx, cfg.ID, name, c.socketID, m)
	if err != nil {
		c.sendError(ErrPresenceUnavailable)
		return
	}
	b := c.holdWrites()
	to, rsub, rec := c.recoverySubscriber(name, resume) // recovery.go
	count, added := s.reg.Subscribe(cfg.ID, name, to)
	c.addSub(name, subscription{userID: m.UserID})
	s.sockets.bindUser(cfg.ID, m.UserID, c)
	if rec != nil && added && !c.recoveryRouted(t, name) { // a repeat keeps its subscription
		c.refuseSubscribe(name, b)
		c.leaveRefused(t, name, m)
		return
	}
	_ = s.reg.AwaitRouted(ctx, cfg.ID, name) // member_added of later joiners reaches this node
	// The member list is read after Subscribe: a concurrent join is then in the list or
	// arrives as member_added after subscription_succeeded (at worst both; clients treat a
	// repeated member_added as a no-op). Read before, a user joining in between would be
	// in neither and stay invisible to this socket.
	if members, err = s.reg.Presence().Members(ctx, cfg.ID, name); err != nil {
		members = []channels.Member{m}
	}
	s.reg.SeedAnnounced(cfg.ID, name, members, cfg.MaxPresenceMembers) // presence_reconcile.go
	frames := c.answerFrames(t, name, presencePayload(members), rec, rsub, resume)
	if channels.KindOf(name).IsCache() && !again { // a repeat answers without a replay
		frames = append(frames, c.cacheReplay(t, name))
	}
	// member_added goes out before this socket's subscription_succeeded can leave: a client
	// that sees the joiner subscribed and subscribes itself must not then get a member_added
	// for a member already in its own list.
	if first {
		_ = s.reg.PublishNoWait(memberAdded(cfg.ID, name, m.UserID, m.Info, c.socketID))
	}
	b.Release(frames...)
	// added: a repeated subscribe by a channel's only subscriber occupies nothing anew.
	if added && count == 1 && s.wants(cfg.ID, "channel_occupied") {
		s.emit(cfg.ID, map[string]any{"name": "channel_occupied", "channel": name})
	}
	if first && s.wants(cfg.ID, "member_added") {
		s.emit(cfg.ID, map[string]any{"name": "member_added", "channel": name, "user_id": m.UserID})
	}
	if added {
		s.emitCount(cfg.ID, name)
	}
}

func hasMember(ms []channels.Member, id string) bool {
	for _, m := range ms {
		if m.UserID == id {
			return true
		}
	}
	return false
}

// presencePayload encodes {"presence":{"count","ids","hash"}} with hash always an object.
func presencePayload(ms []channels.Member) string {
	b := []byte(`{"presence":{"count":`)
	b = strconv.AppendInt(b, int64(len(ms)), 10)
	b = append(b, `,"ids":[`...)
	for i, m := range ms {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, m.UserID)
	}
	b = append(b, `],"hash":{`...)
	for i, m := range ms {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, m.UserID)
		b = append(b, ':')
		b = append(b, m.Info...)
	}
	return string(append(b, "}}}"...))
}

func subscribedFrame(name, data string) []byte {
	return EventFrame("pusher_internal:subscription_succeeded", name, data)
}

// cacheReplayTimeout bounds the cluster read of a cache channel's last event; when Redis
// cannot answer in time the node's own copy decides.
const cacheReplayTimeout = time.Second

func (c *Conn) cacheReplay(t onTask, name string) []byte {
	ctx, cancel := context.WithTimeout(t.ctx, cacheReplayTimeout)
	f, ok, _ := c.srv.reg.LastEvent(ctx, c.app.cfg().ID, name)
	cancel()
	if ok {
		return f
	}
	if c.srv.wants(c.app.cfg().ID, "cache_miss") {
		c.srv.emit(c.app.cfg().ID, map[string]any{"name": "cache_miss", "channel": name})
	}
	return eventFrameNoData("pusher:cache_miss", name)
}

func (c *Conn) addSub(name string, sub subscription) {
	c.subsMu.Lock()
	c.subs.set(name, sub)
	c.subsMu.Unlock()
	c.observeSub(name, true)
}

// unsubscribe leaves a channel; a presence channel's or an indexed channel's leave may wait
// on Redis and runs as a task.
func (c *Conn) unsubscribe(at runsOn, name string) {
	sub, ok := c.subscribed(name)
	if !ok {
		return
	}
	if sub.userID != "" || c.srv.reg.SubscribeWaits(name) {
		at.await(c, func(t onTask) { c.unsubscribeNow(t, name) })
		return
	}
	c.unsubscribeNow(c.localTask(), name)
}

func (c *Conn) unsubscribeNow(t onTask, name string) {
	c.subsMu.Lock()
	sub, ok := c.subs.del(name)
	c.subsMu.Unlock()
	if ok {
		c.leave(t, name, sub)
		// Unbind here: cleanup only unbinds the users of the subscriptions left at close,
		// so a binding kept after an unsubscribe would pin the *Conn in the socket table.
		if sub.userID != "" {
			c.unbindIfUnused(sub.userID)
		}
	}
}

// unbindIfUnused drops the socket's binding to user unless the socket still is that user,
// signed in or in another presence channel. Called from the reader goroutine or the
// connection's task goroutine, never both at once (tasks.go).
func (c *Conn) unbindIfUnused(user string) {
	c.subsMu.RLock()
	used := c.userID == user
	for _, sub := range c.subs.all() {
		used = used || sub.userID == user
	}
	c.subsMu.RUnlock()
	if !used {
		c.srv.sockets.unbindUser(c.app.cfg().ID, user, c)
	}
}

// leave removes the socket from a channel, announcing member_removed on a user's last
// socket and channel_vacated on the channel's last one. With scaling on, a presence or
// indexed channel's leave waits on Redis: it takes a task's t.
func (c *Conn) leave(t onTask, name string, sub subscription) {
	s := c.srv
	appID := c.app.cfg().ID
	remaining, removed := s.reg.Unsubscribe(appID, name, c.socketID)
	c.observeSub(name, false)
	if sub.userID != "" {
		last, err := s.reg.Presence().Leave(t.ctx, appID, name, c.socketID, sub.userID)
		if err == nil && last {
			_ = s.reg.PublishNoWait(memberRemoved(appID, name, sub.userID, c.socketID))
			if s.wants(appID, "member_removed") {
				s.emit(appID, map[string]any{"name": "member_removed", "channel": name, "user_id": sub.userID})
			}
		}
	}
	if remaining == 0 && s.wants(appID, "channel_vacated") {
		s.emit(appID, map[string]any{"name": "channel_vacated", "channel": name})
	}
	if removed {
		s.emitCount(appID, name)
	}
}

func (c *Conn) subscribed(name string) (subscription, bool) {
	c.subsMu.RLock()
	defer c.subsMu.RUnlock()
	return c.subs.get(name)
}

// clientEvent relays a client- event to the channel's other subscribers.
func (c *Conn) clientEvent(m ClientMessage) {
	cfg := c.app.cfg()
	if cfg.AcceptClientEventsFrom == "none" {
		c.sendError(ErrClientEventsDisabled)
		return
	}
	kind := channels.KindOf(m.Channel)
	if m.Channel == "" || !channels.ValidName(m.Channel) {
		c.sendError(ErrClientEventChannel)
		return
	}
	if !kind.AllowsClientEvents() && !(cfg.AcceptClientEventsFrom == "all" && kind == channels.Public) {
		c.sendError(ErrClientEventsNotAllowed)
		return
	}
	sub, member := c.subscribed(m.Channel)
	if !member && cfg.AcceptClientEventsFrom != "all" {
		c.sendError(ErrClientEventNotSubscribed)
		return
	}
	if limit := cfg.ClientEventsPerSecond(); limit > 0 {
		sec := c.srv.now().Unix()
		if sec != c.rateWindow {
			c.rateWindow, c.rateCount = sec, 0
		}
		c.rateCount++
		if c.rateCount > limit {
			c.app.stats.rateLimited.Add(1)
			c.sendError(ErrClientEventRate)
			return
		}
	}
	data := clientEventData(m.Data)
	buf := make([]byte, ws.TextHeaderRoom, ws.TextHeaderRoom+len(m.Event)+len(m.Channel)+len(data)+len(sub.userID)+64)
	frame := Frame(ws.TextFrameInPlace(AppendEvent(buf, m.Event, m.Channel, data, sub.userID, true)))
	c.app.stats.published.Add(1)
	// Local subscribers get it at once; other nodes through the broker's queue: the reading
	// goroutine never waits for Redis.
	_ = c.srv.reg.PublishNoWait(channels.Message{AppID: cfg.ID, Channel: m.Channel, Frame: frame, Except: c.socketID})
	c.observeClientEvent(m.Channel, m.Event, data) // the console taps it whether or not a webhook wants it
	if !c.srv.wants(cfg.ID, "client_event") {
		return
	}
	ev := map[string]any{"name": "client_event", "channel": m.Channel, "event": m.Event, "data": data, "socket_id": c.socketID}
	if sub.userID != "" {
		ev["user_id"] = sub.userID
	}
	c.srv.emit(cfg.ID, ev)
}

// signin handles pusher:signin (user authentication).
func (c *Conn) signin(at runsOn, data json.RawMessage) {
	cfg := c.app.cfg()
	if !cfg.UserAuthentication() {
		c.sendError(ErrUserAuthDisabled)
		return
	}
	d, err := DecodeSignin(data)
	if err != nil {
		c.sendError(ErrInvalidMessage)
		return
	}
	if !auth.VerifySignin(cfg.Key, cfg.Secret, c.socketID, d.UserData, d.Auth) {
		c.sendError(ErrInvalidSignin)
		return
	}
	var ud struct {
		ID        json.RawMessage `json:"id"`
		Watchlist json.RawMessage `json:"watchlist"`
	}
	if json.Unmarshal([]byte(d.UserData), &ud) != nil {
		c.sendError(ErrInvalidUserData)
		return
	}
	id, ok := userIDString(ud.ID)
	if !ok {
		c.sendError(ErrUserDataNoID)
		return
	}
	watch, err := parseWatchlist(ud.Watchlist)
	if err != nil {
		c.sendErrorDetail(ErrInvalidUserData, err.Error())
		return
	}
	c.subsMu.Lock()
	prev := c.userID
	c.userID = id
	c.subsMu.Unlock()
	if prev != "" && prev != id {
		// The previous user's own channel is theirs alone: signing in as someone else
		// leaves it, so the socket stops receiving the old user's messages.
		c.unsubscribe(at, channels.ServerToUserPrefix+prev)
		// Not an unconditional unbind: a presence membership under the previous id
		// still binds the socket to it.
		c.unbindIfUnused(prev)
	}
	c.srv.sockets.bindUser(cfg.ID, id, c)
	c.Send(EventFrame("pusher:signin_success", "", `{"user_data":`+string(appendJSONString(nil, d.UserData))+`}`))
	c.srv.watch.signedIn(at, c, id, watch) // online state and watchlist (watchlist.go)
}

// emit hands a webhook event to the dispatcher, if any; it never blocks.
func (s *Server) emit(appID string, ev map[string]any) {
	if s.hooks != nil {
		s.hooks.Emit(appID, ev)
	}
}
