package pusher

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/reverbgo/reverbgo/channels"
	"github.com/reverbgo/reverbgo/config"
	"github.com/reverbgo/reverbgo/ws"
)

// Recovery (issue 23, apps[].recovery): on a recovery channel every HTTP API event gets
// the channel's next serial as a top-level "serial" (assigned by the History, encoded once
// and the same bytes to every subscriber and in the history), subscription_succeeded
// carries the channel's position ("serial", "epoch"), and a subscribe with
// data.resume = {"epoch","serial"[,"socket_id"]} gets the events it missed, or
// pusher:resume_failed. Off (no app enables it) the server has no History and nothing
// here runs: one nil check on the API publish path.

// Resume failure reasons (the contract: tests outside this repository use them).
const (
	resumeEpochChanged = "epoch_changed"
	resumeTooOld       = "too_old"
	resumeNotEnabled   = "not_enabled"
)

// Resume input bounds.
const (
	maxResumeEpoch    = 64
	maxResumeSocketID = 64
)

// resumeRequest is a validated data.resume.
type resumeRequest struct {
	Epoch    string
	Serial   uint64
	SocketID string
}

var errNoResume = errors.New("no resume")

// decodeResume reads data.resume of a pusher:subscribe strictly: an object with a string
// epoch (at most 64 bytes), a non-negative integer serial and an optional string socket_id
// (at most 64 bytes). errNoResume when data has none (the usual case, found without a parse).
func decodeResume(data json.RawMessage) (resumeRequest, error) {
	var r resumeRequest
	if !bytes.Contains(data, []byte(`resume`)) {
		return r, errNoResume
	}
	d, err := unwrapData(data)
	if err != nil {
		return r, errMalformed
	}
	var outer struct {
		Resume json.RawMessage `json:"resume"`
	}
	if json.Unmarshal(d, &outer) != nil {
		return r, errMalformed
	}
	if len(outer.Resume) == 0 || string(outer.Resume) == "null" {
		return r, errNoResume
	}
	var in struct {
		Epoch    *string          `json:"epoch"`
		Serial   json.RawMessage  `json:"serial"`
		SocketID *json.RawMessage `json:"socket_id"`
	}
	if outer.Resume[0] != '{' || json.Unmarshal(outer.Resume, &in) != nil {
		return r, errors.New("resume must be an object")
	}
	if in.Epoch == nil || *in.Epoch == "" || len(*in.Epoch) > maxResumeEpoch {
		return r, errors.New("resume.epoch must be a non-empty string of at most 64 bytes")
	}
	// The raw token, not a json.Number: that would take the string "1" too.
	n, err := strconv.ParseUint(string(in.Serial), 10, 64)
	if err != nil || n > math.MaxInt64 {
		return r, errors.New("resume.serial must be a non-negative integer")
	}
	r.Epoch, r.Serial = *in.Epoch, n
	if in.SocketID != nil && string(*in.SocketID) != "null" {
		var s string
		if json.Unmarshal(*in.SocketID, &s) != nil || len(s) > maxResumeSocketID {
			return r, errors.New("resume.socket_id must be a string of at most 64 bytes")
		}
		r.SocketID = s
	}
	return r, nil
}

// newHistory is the server's History: opts.History when given (the cluster's, wired by
// cmd/reverbgo), a MemoryHistory on one node when an app enables recovery, else nil.
func newHistory(cfg *config.Config, h channels.History, remote bool) channels.History {
	if h != nil {
		return h
	}
	for i := range cfg.Apps {
		if cfg.Apps[i].Recovery.Enabled && !remote {
			return channels.NewMemoryHistory()
		}
	}
	return nil
}

// warnRecoveryOff logs, once at start, apps whose recovery cannot run: with scaling the
// History is the cluster's (opts.History, fed by the broker's writer), and a server built
// with a remote registry but none answers resumes not_enabled.
func (s *Server) warnRecoveryOff() {
	if s.history != nil {
		return
	}
	for i := range s.cfg.Apps {
		if s.cfg.Apps[i].Recovery.Enabled {
			s.log.Warn("apps[].recovery is not served with scaling yet: resumes get not_enabled", "app", s.cfg.Apps[i].ID)
		}
	}
}

func historyLimits(r *config.Recovery) channels.HistoryLimits {
	return channels.HistoryLimits{Size: r.HistorySize, TTL: time.Duration(r.HistoryTTL) * time.Second}
}

// recoveryOf is the app's recovery config when ch is one of its recovery channels, else nil.
func (s *Server) recoveryOf(appID, ch string) *config.Recovery {
	if s.history == nil {
		return nil
	}
	a := s.appByID(appID)
	if a == nil || !a.cfg().Recovery.Channel(ch) {
		return nil
	}
	return &a.cfg().Recovery
}

// publishRecovered publishes the messages of one API request, those for recovery channels
// marked with their history's bounds: the broker gives each its serial where it enters the
// channel's order (the Redis script with scaling, the memory broker's History on one node),
// in one publish that stays all or nothing.
func (s *Server) publishRecovered(ctx context.Context, ms []channels.Message) error {
	for i := range ms {
		if ms[i].Cacheable && s.recoveryOf(ms[i].AppID, ms[i].Channel) != nil {
			ms[i].Recovery = &s.appByID(ms[i].AppID).hist
		}
	}
	return s.publishAcked(ctx, ms)
}

// RecoveryLimits is the history bounds of ch when its app enables recovery for it: the
// cluster broker reads a channel's gaps from the history with them (cluster.RedisBroker.
// SetRecovery).
func (s *Server) RecoveryLimits(appID, ch string) (channels.HistoryLimits, bool) {
	r := s.recoveryOf(appID, ch)
	if r == nil {
		return channels.HistoryLimits{}, false
	}
	return historyLimits(r), true
}

// ToldGap tells this node's subscribers of a recovery channel that the events before
// (epoch, serial) could not all be delivered (reason epoch_changed or too_old): a live
// pusher:resume_failed, followed by the events after serial.
func (s *Server) ToldGap(appID, ch, reason, epoch string, serial uint64) {
	s.reg.DeliverLocal(channels.Message{AppID: appID, Channel: ch, Frame: resumeFailedFrame(ch, reason, channels.Position{Epoch: epoch, Serial: serial})})
}

// recoverySub is a recovery channel's subscriber: it drops live frames with a serial at
// or below the position the subscription was answered with (they raced the subscribe and
// are in its replay, or before its position), and holds what arrives before that position
// is known. Once a frame above it passed, it only forwards (one atomic load).
type recoverySub struct {
	c    *Conn
	prev string // the resume's socket_id: events published excluding it skip this one too
	open atomic.Bool
	mu   sync.Mutex
	set  bool
	pos  uint64
	held [][]byte
}

func (r *recoverySub) SocketID() string { return r.c.socketID }

// PreviousSocketID implements channels.Resumed: an event published toOthers() by the
// socket this one resumed from does not reach it live either (it raced the resume).
func (r *recoverySub) PreviousSocketID() string { return r.prev }

// Send implements channels.Subscriber (not channels.Deflating: Conn.Send compresses a
// frame for this socket alone when it negotiated compression).
func (r *recoverySub) Send(frame []byte) {
	if r.open.Load() {
		r.c.Send(frame)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.set {
		r.held = append(r.held, frame)
		return
	}
	if r.pass(frame) {
		r.open.Store(true) // after the send: a later frame cannot overtake it
	}
}

// pass sends frame unless its serial is at or below pos (mu held). A live resume_failed
// (the node told a gap or a new epoch) opens the filter: the serials that follow it are
// counted from the position it names, not from pos.
// It reports whether the filter may open now (the caller opens it once nothing it holds
// is left to send).
func (r *recoverySub) pass(frame []byte) bool {
	s := channels.SerialOf(frame)
	if s != 0 && s <= r.pos {
		return false
	}
	r.c.Send(frame)
	return s > r.pos || (s == 0 && isResumeFailed(frame))
}

// isResumeFailed reports whether frame is a pusher:resume_failed (ToldGap's frame).
func isResumeFailed(frame []byte) bool {
	const ev = `{"event":"pusher:resume_failed"`
	i := bytes.IndexByte(frame, '{')
	return i >= 0 && bytes.HasPrefix(frame[i:], []byte(ev))
}

// position sets the answered position and sends what was held behind it.
func (r *recoverySub) position(serial uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.set, r.pos = true, serial
	open := false
	for _, f := range r.held {
		open = r.pass(f) || open
	}
	r.held = nil
	if open {
		// Only now: a frame delivered meanwhile waited for mu instead of overtaking the
		// held ones.
		r.open.Store(true)
	}
}

// positionFrame is subscription_succeeded with the channel's position as top-level fields.
func positionFrame(name, data string, pos channels.Position) []byte {
	buf := make([]byte, ws.TextHeaderRoom, ws.TextHeaderRoom+len(name)+2*len(data)+len(pos.Epoch)+112)
	buf = AppendEvent(buf, "pusher_internal:subscription_succeeded", name, data, "", true)
	buf = buf[:len(buf)-1]
	buf = append(buf, `,"serial":`...)
	buf = strconv.AppendUint(buf, pos.Serial, 10)
	buf = append(buf, `,"epoch":`...)
	buf = appendJSONString(buf, pos.Epoch)
	return ws.TextFrameInPlace(append(buf, '}'))
}

// resumeFailedFrame is pusher:resume_failed with the position the events that follow it
// start after: data {"reason","epoch","serial"}.
func resumeFailedFrame(name, reason string, pos channels.Position) []byte {
	data := make([]byte, 0, 48+len(reason)+len(pos.Epoch))
	data = append(data, `{"reason":`...)
	data = appendJSONString(data, reason)
	data = append(data, `,"epoch":`...)
	data = appendJSONString(data, pos.Epoch)
	data = append(data, `,"serial":`...)
	data = strconv.AppendUint(data, pos.Serial, 10)
	data = append(data, '}')
	return EventFrame("pusher:resume_failed", name, string(data))
}

// recoverySubscriber is who the registry delivers (app, name) to for c: c itself, or on a
// recovery channel a filter (the second result, nil otherwise) that knows res's socket id.
func (c *Conn) recoverySubscriber(name string, res *resumeRequest) (channels.Subscriber, *recoverySub, *config.Recovery) {
	rec := c.srv.recoveryOf(c.app.cfg().ID, name)
	if rec == nil {
		return c, nil, nil
	}
	rs := &recoverySub{c: c}
	if res != nil && res.SocketID != c.socketID {
		rs.prev = res.SocketID
	}
	return rs, rs, rec
}

// answerFrames is subscription_succeeded (with data) for c's subscription to name, and
// what follows it under recovery (recoveryFrames) or for a resume on a channel without it.
func (c *Conn) answerFrames(t onTask, name, data string, rec *config.Recovery, rs *recoverySub, res *resumeRequest) [][]byte {
	switch {
	case rec != nil:
		return c.recoveryFrames(t, name, data, rec, rs, res)
	case res != nil:
		return [][]byte{subscribedFrame(name, data), EventFrame("pusher:resume_failed", name, `{"reason":"`+resumeNotEnabled+`"}`)}
	}
	return [][]byte{subscribedFrame(name, data)}
}

// recoveryFrames is what a subscription to a recovery channel is answered with, after sub
// was registered: subscription_succeeded at the position, then (resume) the missed events
// or resume_failed. It sets sub's position, so later live frames follow without a gap.
func (c *Conn) recoveryFrames(t onTask, name, data string, r *config.Recovery, sub *recoverySub, res *resumeRequest) [][]byte {
	h, lim := c.srv.history, historyLimits(r)
	app := c.app.cfg().ID
	if res == nil {
		pos, err := h.Position(t.ctx, app, name, lim)
		sub.position(pos.Serial)
		if err != nil {
			return [][]byte{subscribedFrame(name, data)}
		}
		c.srv.reg.SeedPosition(app, name, pos)
		return [][]byte{positionFrame(name, data, pos)}
	}
	pos, evs, complete, err := h.Since(t.ctx, app, name, lim, res.Serial)
	sub.position(pos.Serial)
	if err != nil {
		return [][]byte{subscribedFrame(name, data), resumeFailedFrame(name, resumeEpochChanged, pos)}
	}
	c.srv.reg.SeedPosition(app, name, pos)
	frames := [][]byte{positionFrame(name, data, pos)}
	switch {
	case pos.Epoch != res.Epoch:
		// Another epoch: the client's events are not this history's. Its events are new to
		// the client: told from where the history holds them, then replayed up to pos.
		return append(frames, c.newEpochFrames(t, name, lim, pos)...)
	case res.Serial > pos.Serial:
		// A serial this epoch never gave (Redis lost appends it had answered).
		return append(frames, resumeFailedFrame(name, resumeEpochChanged, pos))
	case !complete:
		return append(frames, resumeFailedFrame(name, resumeTooOld, pos))
	}
	for _, ev := range evs {
		if ev.Except != "" && (ev.Except == res.SocketID || ev.Except == c.socketID) {
			continue // toOthers(): the sender never gets its own event back
		}
		frames = append(frames, ev.Frame)
	}
	return frames
}

// newEpochFrames is what a resume from another epoch gets after subscription_succeeded at
// pos: resume_failed epoch_changed at the position before the current epoch's first kept
// event, then its kept events up to pos (later ones arrive live), or, when the epoch's
// start is no longer kept, resume_failed at pos alone.
func (c *Conn) newEpochFrames(t onTask, name string, lim channels.HistoryLimits, pos channels.Position) [][]byte {
	p0, evs, complete, err := c.srv.history.Since(t.ctx, c.app.cfg().ID, name, lim, 0)
	if err != nil || !complete || p0.Epoch != pos.Epoch {
		return [][]byte{resumeFailedFrame(name, resumeEpochChanged, pos)}
	}
	out := [][]byte{resumeFailedFrame(name, resumeEpochChanged, channels.Position{Epoch: pos.Epoch})}
	for _, ev := range evs {
		if ev.Serial > pos.Serial {
			break
		}
		if ev.Except != "" && ev.Except == c.socketID {
			continue
		}
		out = append(out, ev.Frame)
	}
	return out
}

// historySweep is how often a memory history drops channels idle past their TTL.
const historySweep = 30 * time.Second

// startHistorySweep bounds a MemoryHistory: channels that stopped publishing are dropped
// after the longest history_ttl of the apps (a channel still published is reset by its
// own TTL as it is met).
func (s *Server) startHistorySweep() {
	mh, ok := s.history.(*channels.MemoryHistory)
	if !ok {
		return
	}
	ttl := 0
	for i := range s.cfg.Apps {
		ttl = max(ttl, s.cfg.Apps[i].Recovery.HistoryTTL)
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t := time.NewTicker(historySweep)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-t.C:
				mh.Sweep(time.Duration(ttl) * time.Second)
			}
		}
	}()
}

// enqueueOrBusy queues fn on the connection's task goroutine, or answers 4100 when full.
func (c *Conn) enqueueOrBusy(fn func(onTask)) {
	if !c.enqueue(fn, false) {
		c.srv.tasksRefused.Add(1)
		c.sendError(ErrBusy)
	}
}

// recoveryRouteTimeout bounds how long a recovery channel's subscribe waits for this node's
// route to the channel (its Redis subscription) to be in effect.
const recoveryRouteTimeout = 2500 * time.Millisecond

// recoveryRouted waits (on the task goroutine) until publishes of a recovery channel made on
// any node reach this node, and reports whether they do: its position is read only then,
// so every later serial reaches the socket live. False when the route was not in effect in
// time (Redis stalled or unreachable): the subscribe is refused, never answered with a
// position a stalled route cannot honour.
func (c *Conn) recoveryRouted(t onTask, name string) bool {
	ctx, cancel := context.WithTimeout(t.ctx, recoveryRouteTimeout)
	defer cancel()
	return c.srv.reg.SubscribeRouted(ctx, c.app.cfg().ID, name)
}

// refuseSubscribe undoes a subscription that was registered but is not answered (nothing
// was announced for it yet) and tells the client to retry: pusher:error 4100, as a
// presence join is refused while Redis is unavailable.
func (c *Conn) refuseSubscribe(name string, b *ws.Barrier) {
	c.subsMu.Lock()
	c.subs.del(name)
	c.subsMu.Unlock()
	c.srv.reg.Unsubscribe(c.app.cfg().ID, name, c.socketID)
	c.observeSub(name, false)
	b.Release(ErrRedisUnavailable.frame())
}

// leaveRefused undoes a refused presence subscription's join (no member_added went out, so
// no member_removed either).
func (c *Conn) leaveRefused(t onTask, name string, m channels.Member) {
	if _, err := c.srv.reg.Presence().Leave(t.ctx, c.app.cfg().ID, name, c.socketID, m.UserID); err != nil {
		c.srv.log.Warn("a refused presence join could not be undone; presence repair removes it", "app", c.app.cfg().ID, "channel", name, "error", err)
	}
	c.unbindIfUnused(m.UserID)
}
