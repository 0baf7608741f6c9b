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
)

// counters are every figure the soak reports; loss and errors decide the verdict.
type counters struct {
	churn, churnErr       atomic.Int64
	fanPub, fanPubErr     atomic.Int64
	fanRecv, fanDisorder  atomic.Int64
	ceSent, ceRecv, ceErr atomic.Int64
	presJoin, presErr     atomic.Int64
	callOK, callFail      atomic.Int64
	subErr                atomic.Int64 // a long-lived socket of the soak ended early
	slowBody, slowSigned  atomic.Int64 // abusive cycles (each ends with the server cutting it,
	slowLoris, bad        atomic.Int64 // or the soak giving up after maxAbuseCycle)
}

// sleepCtx waits d or until ctx ends; false when ctx ended.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// every runs fn every d until ctx ends.
func every(ctx context.Context, d time.Duration, fn func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}

// churn connects, subscribes to a public channel and disconnects, in a loop.
func (s *soak) churn(ctx context.Context, i int) {
	for n := 0; ctx.Err() == nil; n++ {
		c, err := s.dial(ctx)
		if err != nil {
			if ctx.Err() == nil {
				s.c.churnErr.Add(1)
				s.sample("churn dial: %v", err)
				sleepCtx(ctx, 100*time.Millisecond)
			}
			continue
		}
		if _, err := s.subscribe(c, fmt.Sprintf("soak-churn-%d-%d", i, n%50), ""); err != nil && ctx.Err() == nil {
			s.c.churnErr.Add(1)
			s.sample("churn subscribe: %v", err)
		} else {
			s.c.churn.Add(1)
		}
		c.WS.Close()
		sleepCtx(ctx, time.Duration(rand.IntN(50))*time.Millisecond)
	}
}

// subscriber holds one long-lived socket on ch and counts the frames of event name on it
// (data = a sequence number, expected in order) until stop.
type subscriber struct {
	c    *sock
	got  atomic.Int64
	last atomic.Int64
}

// listen reads until the socket ends; onEvent sees every other frame. A socket that ends
// before stop is an error of the soak (it must stay connected).
func (s *soak) listen(sub *subscriber, name string, stop <-chan struct{}, onEvent func(event)) {
	s.longMu.Lock()
	s.long = append(s.long, sub.c)
	s.longMu.Unlock()
	for {
		ev, err := sub.c.Read()
		if err != nil {
			select {
			case <-stop:
			default:
				s.c.subErr.Add(1)
				s.sample("long-lived socket %s ended: %v", sub.c.ID, err)
			}
			return
		}
		switch ev.Event {
		case name:
			n, _ := strconv.ParseInt(ev.Str(), 10, 64)
			if n != sub.last.Load()+1 {
				s.c.fanDisorder.Add(1)
			}
			sub.last.Store(n)
			sub.got.Add(1)
		case "pusher:ping":
			_ = sub.c.Send(map[string]any{"event": "pusher:pong", "data": map[string]any{}})
		default:
			if onEvent != nil {
				onEvent(ev)
			}
		}
	}
}

// fanout: subs long-lived subscribers of one channel, a publisher triggering numbered
// events through the HTTP API at rate per second. Returns the subscribers, to count loss.
func (s *soak) fanout(ctx context.Context, subs int, rate float64, stop <-chan struct{}) ([]*subscriber, error) {
	const ch = "soak-fan"
	out := make([]*subscriber, subs)
	for i := range out {
		c, err := s.dial(ctx)
		if err != nil {
			return nil, fmt.Errorf("fan-out subscriber %d: %w", i, err)
		}
		if _, err := s.subscribe(c, ch, ""); err != nil {
			return nil, fmt.Errorf("fan-out subscriber %d: %w", i, err)
		}
		out[i] = &subscriber{c: c}
		go s.listen(out[i], "fan", stop, nil)
	}
	go func() {
		seq := int64(0)
		every(ctx, time.Duration(float64(time.Second)/rate), func() {
			seq++
			body, _ := json.Marshal(map[string]any{"name": "fan", "channel": ch, "data": strconv.FormatInt(seq, 10)})
			st, b, err := s.api(ctx, "POST", "/apps/"+s.appID+"/events", body)
			if err != nil || st != 200 {
				if ctx.Err() == nil {
					s.c.fanPubErr.Add(1)
					s.sample("fan-out trigger: %d %s %v", st, b, err)
				}
				return
			}
			s.c.fanPub.Add(1)
		})
	}()
	return out, nil
}

// clientEvents: pairs of sockets on a private channel, one sending numbered client events at
// rate per second (under the default limit of 10/s), the other counting them.
func (s *soak) clientEvents(ctx context.Context, pairs int, rate float64, stop <-chan struct{}) ([]*subscriber, error) {
	out := make([]*subscriber, pairs)
	for i := range out {
		ch := fmt.Sprintf("private-soak-ce-%d", i)
		snd, err := s.dial(ctx)
		if err != nil {
			return nil, err
		}
		rcv, err := s.dial(ctx)
		if err != nil {
			return nil, err
		}
		for _, c := range []*sock{snd, rcv} {
			if _, err := s.subscribe(c, ch, ""); err != nil {
				return nil, fmt.Errorf("client events %d: %w", i, err)
			}
		}
		out[i] = &subscriber{c: rcv}
		go s.listen(out[i], "client-soak", stop, nil)
		sender := &subscriber{c: snd}
		go s.listen(sender, "-", stop, func(ev event) {
			if ev.Event == "pusher:error" {
				s.c.ceErr.Add(1)
				s.sample("client event refused: %s", ev.Data)
			}
		})
		go func() {
			seq := int64(0)
			every(ctx, time.Duration(float64(time.Second)/rate), func() {
				seq++
				if snd.Send(map[string]any{"event": "client-soak", "channel": ch, "data": strconv.FormatInt(seq, 10)}) != nil {
					if ctx.Err() == nil {
						s.c.ceErr.Add(1)
					}
					return
				}
				s.c.ceSent.Add(1)
			})
		}()
	}
	return out, nil
}

// presence: an observer on a presence channel tracks its members from member_added and
// member_removed while joiners join and leave in a loop. When the joiners have stopped, the
// observer must see itself alone (members returns its view).
func (s *soak) presence(ctx context.Context, joiners int, stop <-chan struct{}) (members func() map[string]bool, err error) {
	const ch = "presence-soak"
	obs, err := s.dial(ctx)
	if err != nil {
		return nil, err
	}
	frames, err := s.subscribe(obs, ch, "observer")
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex
	set := map[string]bool{}
	var d struct {
		Presence struct {
			IDs []string `json:"ids"`
		} `json:"presence"`
	}
	_ = json.Unmarshal([]byte(frames[len(frames)-1].Str()), &d)
	for _, id := range d.Presence.IDs {
		set[id] = true
	}
	go s.listen(&subscriber{c: obs}, "-", stop, func(ev event) {
		var m struct {
			UserID string `json:"user_id"`
		}
		_ = json.Unmarshal([]byte(ev.Str()), &m)
		mu.Lock()
		defer mu.Unlock()
		switch ev.Event {
		case "pusher_internal:member_added":
			set[m.UserID] = true
		case "pusher_internal:member_removed":
			delete(set, m.UserID)
		}
	})
	for i := 0; i < joiners; i++ {
		go func() {
			for ctx.Err() == nil {
				c, err := s.dial(ctx)
				if err != nil {
					if ctx.Err() == nil {
						s.c.presErr.Add(1)
						sleepCtx(ctx, 100*time.Millisecond)
					}
					continue
				}
				if _, err := s.subscribe(c, ch, fmt.Sprintf("joiner-%d", i)); err != nil {
					if ctx.Err() == nil {
						s.c.presErr.Add(1)
						s.sample("presence join: %v", err)
					}
				} else {
					s.c.presJoin.Add(1)
				}
				sleepCtx(ctx, time.Duration(200+rand.IntN(800))*time.Millisecond)
				c.WS.Close()
			}
		}()
	}
	return func() map[string]bool {
		mu.Lock()
		defer mu.Unlock()
		out := make(map[string]bool, len(set))
		for k := range set {
			out[k] = true
		}
		return out
	}, nil
}

// closeLong closes every long-lived socket once the run is over.
func (s *soak) closeLong() {
	s.longMu.Lock()
	defer s.longMu.Unlock()
	for _, c := range s.long {
		_ = c.WS.Close()
	}
}
