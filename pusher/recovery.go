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

// publishRecovered publishes the messages of one API request. With scaling, those for
// recovery channels are marked and the broker's writer gives each its serial where it
// enters Redis, atomically with its publish (one round trip; the request stays all or
// nothing). On one node they get their serial from the History, which keeps them and
// delivers each under the channel's serial order; the rest go to the broker as before.
func (s *Server) publishRecovered(ctx context.Context, ms []channels.Message) error {
	plain := ms[:0:0]
	for _, m := range ms {
		if m.Cacheable && s.recoveryOf(m.AppID, m.Channel) == nil {
			plain = append(plain, m)
		}
	}
	if len(plain) == len(ms) {
		return s.reg.PublishAll(ctx, ms)
	}
	if s.brokerSerials {
		for i := range ms {
			if ms[i].Cacheable && s.recoveryOf(ms[i].AppID, ms[i].Channel) != nil {
				ms[i].Recovery = &s.appByID(ms[i].AppID).hist
			}
		}
		return s.reg.PublishAll(ctx, ms)
	}
	for _, m := range ms {
		r := s.recoveryOf(m.AppID, m.Channel)
		if r == nil || !m.Cacheable {
			if err := s.reg.Publish(ctx, m); err != nil {
				return err
			}
			continue
		}
		var perr error
		_, _, err := s.history.Append(ctx, m.AppID, m.Channel, historyLimits(r), m.Except, m.Frame, func(_ uint64, frame []byte) {
			m.Frame = frame
			perr = s.reg.Publish(ctx, m) // MemoryBroker: delivered in serial order
		})
		if err != nil {
			return err
		}
		if perr != nil {
			return perr
		}
	}
	return nil
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
	r.pass(frame)
}

// pass sends frame unless its serial is at or below pos (mu held).
func (r *recoverySub) pass(frame []byte) {
	s := channels.SerialOf(frame)
	if s != 0 && s <= r.pos {
		return
	}
	if s > r.pos {
		r.open.Store(true)
	}
	r.c.Send(frame)
}

// position sets the answered position and sends what was held behind it.
func (r *recoverySub) position(serial uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.set, r.pos = true, serial
	for _, f := range r.held {
		r.pass(f)
	}
	r.held = nil
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

func resumeFailedFrame(name, reason string) []byte {
	return EventFrame("pusher:resume_failed", name, `{"reason":"`+reason+`"}`)
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
		return [][]byte{subscribedFrame(name, data), resumeFailedFrame(name, resumeNotEnabled)}
	}
	return [][]byte{subscribedFrame(name, data)}
}

// recoveryFrames is what a subscription to a recovery channel is answered with, after sub
// was registered: subscription_succeeded at the position, then (resume) the missed events
// or resume_failed. It sets sub's position, so later live frames follow without a gap.
func (c *Conn) recoveryFrames(t onTask, name, data string, r *config.Recovery, sub *recoverySub, res *resumeRequest) [][]byte {
	h, lim := c.srv.history, historyLimits(r)
	if res == nil {
		pos, err := h.Position(t.ctx, c.app.cfg().ID, name, lim)
		sub.position(pos.Serial)
		if err != nil {
			return [][]byte{subscribedFrame(name, data)}
		}
		return [][]byte{positionFrame(name, data, pos)}
	}
	pos, evs, complete, err := h.Since(t.ctx, c.app.cfg().ID, name, lim, res.Serial)
	sub.position(pos.Serial)
	if err != nil {
		return [][]byte{subscribedFrame(name, data), resumeFailedFrame(name, resumeEpochChanged)}
	}
	frames := [][]byte{positionFrame(name, data, pos)}
	switch {
	case pos.Epoch != res.Epoch:
		return append(frames, resumeFailedFrame(name, resumeEpochChanged))
	case !complete:
		return append(frames, resumeFailedFrame(name, resumeTooOld))
	}
	for _, ev := range evs {
		if ev.Except != "" && (ev.Except == res.SocketID || ev.Except == c.socketID) {
			continue // toOthers(): the sender never gets its own event back
		}
		frames = append(frames, ev.Frame)
	}
	return frames
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
		c.sendError(codeOverCapacity, "Server is busy, try again")
	}
}
