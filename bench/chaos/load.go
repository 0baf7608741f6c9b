package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/reverbgo/reverbgo/internal/pusherclient"
)

// truth is what the clients hold: the presence members and fan-out subscriptions that the
// HTTP API and the observers must agree with once a fault has settled.
type truth struct {
	// gate freezes churn for a check: every transition (a join, a leave, a subscribe, a
	// noticed close) holds it for reading; the checker takes it for writing.
	gate sync.RWMutex

	mu      sync.Mutex
	members map[string]map[string]int // channel -> user -> connections
	fanSubs map[string]int            // channel -> subscribers
	joins   []join                    // every join that succeeded, for the webhook check
	windows []window                  // outages: events published in them may be lost
	wipes   []time.Time               // when Redis restarted empty
}

func (t *truth) wiped(at time.Time) { t.mu.Lock(); t.wipes = append(t.wipes, at); t.mu.Unlock() }

func (t *truth) lastWipe() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.wipes) == 0 {
		return time.Time{}
	}
	return t.wipes[len(t.wipes)-1]
}

type join struct {
	channel, user string
	at            time.Time
}

type window struct{ from, to time.Time } // to is zero while the outage lasts

func newTruth() *truth {
	return &truth{members: map[string]map[string]int{}, fanSubs: map[string]int{}}
}

func (t *truth) add(channel, user string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.members[channel]
	if m == nil {
		m = map[string]int{}
		t.members[channel] = m
	}
	m[user]++
	t.joins = append(t.joins, join{channel, user, time.Now()})
}

func (t *truth) remove(channel, user string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if m := t.members[channel]; m != nil {
		if m[user]--; m[user] <= 0 {
			delete(m, user)
		}
	}
}

func (t *truth) usersOf(channel string) map[string]bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[string]bool{}
	for u := range t.members[channel] {
		out[u] = true
	}
	return out
}

func (t *truth) fan(channel string, d int) { t.mu.Lock(); t.fanSubs[channel] += d; t.mu.Unlock() }

func (t *truth) openWindow(from time.Time) {
	t.mu.Lock()
	t.windows = append(t.windows, window{from: from})
	t.mu.Unlock()
}

func (t *truth) closeWindow(to time.Time) {
	t.mu.Lock()
	if n := len(t.windows); n > 0 && t.windows[n-1].to.IsZero() {
		t.windows[n-1].to = to
	}
	t.mu.Unlock()
}

// inOutage reports whether at falls in an outage widened by before and after.
func (t *truth) inOutage(at time.Time, before, after time.Duration) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, w := range t.windows {
		if at.After(w.from.Add(-before)) && (w.to.IsZero() || at.Before(w.to.Add(after))) {
			return true
		}
	}
	return false
}

// cluster is the set of nodes the load spreads over.
type cluster struct{ nodes []*node }

// pick returns a random running node (nil when none is).
func (c *cluster) pick() *node {
	var up []*node
	for _, n := range c.nodes {
		if n.isUp() {
			up = append(up, n)
		}
	}
	if len(up) == 0 {
		return nil
	}
	return up[rand.IntN(len(up))]
}

// watch reads c until it fails, then calls gone once under the gate.
func (t *truth) watch(c *conn, onFrame func(frame), gone func()) {
	go func() {
		for {
			f, err := c.Read()
			if err != nil {
				break
			}
			if onFrame != nil {
				onFrame(f)
			}
		}
		t.gate.RLock()
		gone()
		t.gate.RUnlock()
	}()
}

// joiner joins a random presence room as a fresh user, holds it a while and leaves, until
// ctx ends. A connection closed by a fault is noticed and counted as left.
func (s *chaos) joiner(ctx context.Context, g int) {
	for gen := 0; ctx.Err() == nil; gen++ {
		n := s.cl.pick()
		if n == nil {
			sleepCtx(ctx, time.Second)
			continue
		}
		room := "presence-room-" + strconv.Itoa(rand.IntN(s.o.rooms))
		user := fmt.Sprintf("u%d-%d", g, gen)
		s.t.gate.RLock()
		c, err := dialNode(ctx, n)
		if err == nil {
			err = c.subscribe(room, user)
			if err != nil {
				c.WS.Close()
			}
		}
		if err != nil {
			s.t.gate.RUnlock()
			s.stats.joinErrors.Add(1)
			sleepCtx(ctx, time.Second)
			continue
		}
		s.t.add(room, user)
		dead := make(chan struct{})
		var once sync.Once
		leave := func() { once.Do(func() { s.t.remove(room, user); close(dead) }) }
		s.t.watch(c, nil, leave)
		s.t.gate.RUnlock()
		s.stats.joins.Add(1)
		select {
		case <-dead:
		case <-ctx.Done():
		case <-time.After(time.Duration(3+rand.IntN(15)) * time.Second):
		}
		s.t.gate.RLock()
		c.WS.Close()
		leave()
		s.t.gate.RUnlock()
	}
}

// observer is one member of a room per node that tracks the member list the way pusher-js
// does (subscription_succeeded, member_added, member_removed): after a fault it must equal
// the truth, which catches a member re-added without member_added.
type observer struct {
	room, user string
	mu         sync.Mutex
	members    map[string]bool
	alive      bool
}

func (o *observer) snapshot() (map[string]bool, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make(map[string]bool, len(o.members))
	for u := range o.members {
		out[u] = true
	}
	return out, o.alive
}

func (o *observer) onFrame(f frame) {
	o.mu.Lock()
	defer o.mu.Unlock()
	switch f.Event {
	case "pusher_internal:subscription_succeeded":
		var d struct {
			Presence struct {
				IDs []string `json:"ids"`
			} `json:"presence"`
		}
		_ = json.Unmarshal([]byte(f.Str()), &d)
		o.members = map[string]bool{}
		for _, id := range d.Presence.IDs {
			o.members[id] = true
		}
		o.alive = true
	case "pusher_internal:member_added":
		var d struct {
			UserID string `json:"user_id"`
		}
		_ = json.Unmarshal([]byte(f.Str()), &d)
		o.members[d.UserID] = true
	case "pusher_internal:member_removed":
		var d struct {
			UserID string `json:"user_id"`
		}
		_ = json.Unmarshal([]byte(f.Str()), &d)
		delete(o.members, d.UserID)
	}
}

// runObserver keeps o joined to its room on node n (reconnecting when a fault closes it).
func (s *chaos) runObserver(ctx context.Context, o *observer, n *node) {
	for gen := 0; ctx.Err() == nil; gen++ {
		if !n.isUp() {
			sleepCtx(ctx, 500*time.Millisecond)
			continue
		}
		s.t.gate.RLock()
		c, err := dialNode(ctx, n)
		if err != nil {
			s.t.gate.RUnlock()
			sleepCtx(ctx, time.Second)
			continue
		}
		dead := make(chan struct{})
		var once sync.Once
		o.mu.Lock()
		o.alive, o.members = false, nil
		o.mu.Unlock()
		// The read loop feeds onFrame from the start: subscription_succeeded is read by it.
		if err := c.Send(pusherclient.SubscribeMessage(chaosApp, c.ID, o.room, pusherclient.MemberData(o.user), nil)); err != nil {
			c.WS.Close()
			s.t.gate.RUnlock()
			continue
		}
		s.t.add(o.room, o.user)
		s.t.watch(c, o.onFrame, func() {
			once.Do(func() {
				s.t.remove(o.room, o.user)
				o.mu.Lock()
				o.alive = false
				o.mu.Unlock()
				close(dead)
			})
		})
		s.t.gate.RUnlock()
		select {
		case <-dead:
		case <-ctx.Done():
			c.WS.Close()
			return
		}
	}
}

// fanSub is one fan-out subscriber: every event published to its channel while it stayed
// connected, outside an outage, must reach it.
type fanSub struct {
	channel string
	event   string // "seq" for HTTP API publishes, "client-seq" for client events
	mu      sync.Mutex
	epoch   time.Time // when the current connection's subscription succeeded (zero: none)
	seen    map[int]bool
	checked time.Time // publishes before this were already accounted for
	lost    int
	dup     int
	rec     *resumer // --recovery: resumes, judged over the whole run (resume.go)
}

type pub struct {
	seq int
	at  time.Time
}

type publisher struct {
	mu   sync.Mutex
	pubs map[string][]pub // channel -> acknowledged publishes
	seq  atomic.Int64
}

func (s *chaos) runFanSub(ctx context.Context, f *fanSub) {
	for ctx.Err() == nil {
		n := s.cl.pick()
		if n == nil {
			sleepCtx(ctx, time.Second)
			continue
		}
		s.t.gate.RLock()
		c, err := dialNode(ctx, n)
		if err == nil {
			var extra map[string]any
			if res := f.rec.resume(); res != nil {
				extra = map[string]any{"resume": res}
			}
			var frames []frame
			if frames, err = c.SubscribeWith(chaosApp, f.channel, "", extra); err != nil {
				c.WS.Close()
			}
			for _, fr := range frames {
				if err == nil && f.rec != nil && fr.Event == "pusher_internal:subscription_succeeded" {
					f.rec.answered(fr, c.ID, extra != nil, time.Now())
				}
			}
		}
		if err != nil {
			s.t.gate.RUnlock()
			sleepCtx(ctx, time.Second)
			continue
		}
		if f.event == "seq" {
			s.t.fan(f.channel, 1)
		}
		f.mu.Lock()
		f.epoch, f.seen, f.checked = time.Now(), map[int]bool{}, time.Time{}
		f.mu.Unlock()
		dead := make(chan struct{})
		s.t.watch(c, func(fr frame) {
			if f.rec != nil && !f.rec.take(fr, f.event, time.Now()) {
				return // a serial already seen: the client drops it
			}
			if fr.Event != f.event {
				return
			}
			n, _ := strconv.Atoi(fr.Str())
			f.mu.Lock()
			if f.seen[n] {
				f.dup++
			}
			f.seen[n] = true
			f.mu.Unlock()
		}, func() {
			if f.event == "seq" {
				s.t.fan(f.channel, -1)
			}
			s.account(f, time.Now())
			f.mu.Lock()
			f.epoch = time.Time{}
			f.mu.Unlock()
			close(dead)
		})
		s.t.gate.RUnlock()
		select {
		case <-dead:
		case <-ctx.Done():
			c.WS.Close()
			return
		}
	}
}

// account counts the publishes f should have received up to until (less a delivery grace)
// and has not.
func (s *chaos) account(f *fanSub, until time.Time) {
	s.pub.mu.Lock()
	pubs := s.pub.pubs[f.channel]
	s.pub.mu.Unlock()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.epoch.IsZero() {
		return
	}
	from := f.epoch.Add(500 * time.Millisecond)
	if f.checked.After(from) {
		from = f.checked
	}
	to := until.Add(-3 * time.Second)
	for _, p := range pubs {
		if !p.at.After(from) || !p.at.Before(to) || f.seen[p.seq] {
			continue
		}
		if s.t.inOutage(p.at, time.Second, 3*time.Second) {
			continue
		}
		f.lost++
		if f.lost <= 5 {
			s.logf("lost: %s seq %d published %s", f.channel, p.seq, p.at.Format("15:04:05.000"))
		}
	}
	if to.After(f.checked) {
		f.checked = to
	}
}

// publish triggers one numbered event per fan channel through a random node, every period.
func (s *chaos) publish(ctx context.Context, period time.Duration) {
	tick := time.NewTicker(period)
	defer tick.Stop()
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if s.pubQuiet.Load() {
			continue
		}
		for k := 0; k < s.o.fanChannels; k++ {
			n := s.cl.pick()
			if n == nil {
				continue
			}
			ch := "fan-" + strconv.Itoa(k)
			seq := int(s.pub.seq.Add(1))
			at := time.Now()
			if err := trigger(ctx, n, ch, "seq", strconv.Itoa(seq)); err != nil {
				s.stats.pubErrors.Add(1)
				continue
			}
			s.pub.mu.Lock()
			s.pub.pubs[ch] = append(s.pub.pubs[ch], pub{seq, at})
			s.pub.mu.Unlock()
			s.stats.pubs.Add(1)
		}
	}
}

// sender sends a numbered client event on channel every period from a connection of its
// own (reconnecting after a fault); the fanSub of the same channel on another node checks it.
func (s *chaos) sender(ctx context.Context, channel string, period time.Duration) {
	for ctx.Err() == nil {
		n := s.cl.pick()
		if n == nil {
			sleepCtx(ctx, time.Second)
			continue
		}
		c, err := dialNode(ctx, n)
		if err == nil {
			if err = c.subscribe(channel, ""); err != nil {
				c.WS.Close()
			}
		}
		if err != nil {
			sleepCtx(ctx, time.Second)
			continue
		}
		go func() { // pings and anything else
			for {
				if _, err := c.Read(); err != nil {
					return
				}
			}
		}()
		tick := time.NewTicker(period)
		for ctx.Err() == nil {
			<-tick.C
			seq := int(s.pub.seq.Add(1))
			at := time.Now()
			if err := c.Send(map[string]any{"event": "client-seq", "channel": channel, "data": strconv.Itoa(seq)}); err != nil {
				break
			}
			s.pub.mu.Lock()
			s.pub.pubs[channel] = append(s.pub.pubs[channel], pub{seq, at})
			s.pub.mu.Unlock()
			s.stats.clientEvents.Add(1)
		}
		tick.Stop()
		c.WS.Close()
	}
}
