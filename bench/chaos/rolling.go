package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// The rolling-restart run (issue 23, bench/rolling.sh): --clients subscribers of --channels
// private channels spread over three nodes, --rate events/s through the HTTP API, and every
// node in turn SIGTERMed (its sockets get 4200 and reconnect to the others) and restarted.
// With --recovery the nodes keep history and the clients resume as the recovery client
// module does (resume with the last epoch, serial and socket id; drop a serial already
// seen); without, they resubscribe plainly. At the end every client's events are compared
// with what was published to its channel after it first subscribed: lost and duplicated.

// roller is one rolling-run subscriber.
type roller struct {
	ch string

	mu         sync.Mutex
	seen       map[int]int // event number → times the app got it
	raw        int         // frames that repeated a serial already seen (dropped, as the module does)
	epoch      string
	serial     uint64
	socket     string
	have       bool
	failed     map[string]int // resume_failed reasons
	reconnects int
	next       uint64 // a resumed subscription's position, taken on resume_failed
	nextEpoch  string
}

type rollPub struct {
	mu        sync.Mutex
	published map[string][]int // channel → event numbers answered 200
	uncertain map[string]map[int]bool
	errors    atomic.Int64
}

func (s *chaos) rolling(parent context.Context) (bool, error) {
	o := s.o
	s.logf("rolling: %d clients on %d channels, %d events/s, recovery %v; logs in %s", o.clients, o.channels, o.rate, o.recovery, o.out)
	cleanup, err := s.startCluster(parent)
	if err != nil {
		return false, err
	}
	defer cleanup()
	ctx, stop := context.WithCancel(parent)
	defer stop()
	rollers := make([]*roller, o.clients)
	var subscribed atomic.Int64
	var wg sync.WaitGroup
	for i := range rollers {
		r := &roller{ch: "private-roll-" + strconv.Itoa(i%o.channels), seen: map[int]int{}, failed: map[string]int{}}
		rollers[i] = r
		wg.Add(1)
		go func() { defer wg.Done(); s.runRoller(ctx, r, &subscribed) }()
	}
	for subscribed.Load() < int64(o.clients) {
		if !sleepCtx(ctx, 100*time.Millisecond) {
			return false, ctx.Err()
		}
	}
	s.logf("rolling: %d clients subscribed", o.clients)
	pub := &rollPub{published: map[string][]int{}, uncertain: map[string]map[int]bool{}}
	pctx, pstop := context.WithCancel(ctx)
	defer pstop()
	var pwg sync.WaitGroup
	const workers = 4
	for w := range workers {
		pwg.Add(1)
		go func() { defer pwg.Done(); s.rollPublish(pctx, pub, w, workers) }()
	}
	sleepCtx(ctx, 5*time.Second)
	began := time.Now()
	for _, n := range s.cl.nodes {
		n.setUp(false)
		n.signal(syscall.SIGTERM)
		if !n.waitExit(time.Duration(20+o.drainDelay+o.drainPeriod) * time.Second) {
			return false, fmt.Errorf("node %d did not stop on SIGTERM", n.i)
		}
		if err := n.start(o.bin); err != nil {
			return false, err
		}
		if err := n.waitUp(ctx, 15*time.Second); err != nil {
			return false, err
		}
		s.logf("rolling: node %d restarted", n.i)
		sleepCtx(ctx, 5*time.Second)
	}
	roll := time.Since(began)
	pstop()
	pwg.Wait()
	sleepCtx(ctx, 3*time.Second) // deliveries in flight
	stop()
	wg.Wait()
	return s.rollVerdict(rollers, pub, roll), nil
}

// runRoller keeps r subscribed through restarts: a dropped socket reconnects to a node
// that is up and (with recovery) resumes.
func (s *chaos) runRoller(ctx context.Context, r *roller, subscribed *atomic.Int64) {
	first := true
	for ctx.Err() == nil {
		n := s.cl.pick()
		if n == nil {
			sleepCtx(ctx, 100*time.Millisecond)
			continue
		}
		c, err := dialNode(ctx, n)
		if err != nil {
			sleepCtx(ctx, 200*time.Millisecond)
			continue
		}
		var extra map[string]any
		r.mu.Lock()
		if s.o.recovery && r.have {
			extra = map[string]any{"resume": map[string]any{"epoch": r.epoch, "serial": r.serial, "socket_id": r.socket}}
		}
		r.mu.Unlock()
		frames, err := c.SubscribeWith(chaosApp, r.ch, "", extra)
		if err != nil {
			c.Close()
			sleepCtx(ctx, 200*time.Millisecond)
			continue
		}
		r.mu.Lock()
		for _, f := range frames {
			if f.Event == "pusher_internal:subscription_succeeded" && f.Serial != nil && (!r.have || extra == nil) {
				r.epoch, r.serial, r.have = f.Epoch, *f.Serial, true
			}
			if f.Event == "pusher_internal:subscription_succeeded" && extra != nil && f.Serial != nil {
				r.pending(f)
			}
		}
		r.socket = c.ID
		if !first {
			r.reconnects++
		}
		r.mu.Unlock()
		if first {
			first = false
			subscribed.Add(1)
		}
		done := make(chan struct{})
		go func() {
			select {
			case <-ctx.Done():
				c.Close()
			case <-done:
			}
		}()
		for {
			f, err := c.Read()
			if err != nil {
				break
			}
			r.take(f)
		}
		close(done)
		c.Close()
	}
}

// pending notes a resumed subscription's new position: on resume_failed the client starts
// over from it (the app refetches).
func (r *roller) pending(f frame) { r.next = *f.Serial; r.nextEpoch = f.Epoch }

// take is one frame read by the client.
func (r *roller) take(f frame) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case f.Event == "pusher:resume_failed" && f.Channel == r.ch:
		// data {reason, epoch, serial}: the events that follow are those after (epoch,
		// serial), after a resume or live; without a position, the subscription's answer.
		var d struct {
			Reason string  `json:"reason"`
			Epoch  string  `json:"epoch"`
			Serial *uint64 `json:"serial"`
		}
		if json.Unmarshal([]byte(f.Str()), &d) != nil || d.Reason == "" {
			d.Reason = f.Str()
		}
		r.failed[d.Reason]++
		r.epoch, r.serial = r.nextEpoch, r.next
		if d.Epoch != "" && d.Serial != nil {
			r.epoch, r.serial, r.have = d.Epoch, *d.Serial, true
		}
	case f.Event == "seq" && f.Channel == r.ch:
		if f.Serial != nil {
			if r.have && *f.Serial <= r.serial {
				r.raw++ // the module drops a serial it has seen
				return
			}
			r.serial = *f.Serial
		}
		k, _ := strconv.Atoi(f.Str())
		r.seen[k]++
	}
}

// rollPublish publishes worker w's share of the channels (one worker per channel, so a
// channel's events are published in order) at its share of the rate.
func (s *chaos) rollPublish(ctx context.Context, p *rollPub, w, workers int) {
	o := s.o
	var mine []string
	for i := w; i < o.channels; i += workers {
		mine = append(mine, "private-roll-"+strconv.Itoa(i))
	}
	if len(mine) == 0 {
		return
	}
	every := time.Duration(float64(time.Second) * float64(workers) / float64(o.rate))
	t := time.NewTicker(every)
	defer t.Stop()
	next := map[string]int{}
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ch := mine[i%len(mine)]
		k := next[ch]
		next[ch]++
		n := s.cl.pick()
		if n == nil {
			continue
		}
		err := trigger(ctx, n, ch, "seq", strconv.Itoa(k))
		p.mu.Lock()
		if err != nil {
			p.errors.Add(1)
			if p.uncertain[ch] == nil {
				p.uncertain[ch] = map[int]bool{}
			}
			p.uncertain[ch][k] = true // refused or unanswered: counted neither way
		} else {
			p.published[ch] = append(p.published[ch], k)
		}
		p.mu.Unlock()
	}
}

func (s *chaos) rollVerdict(rollers []*roller, p *rollPub, roll time.Duration) bool {
	var expected, lost, dup, raw, reconnects int
	failed := map[string]int{}
	for _, r := range rollers {
		r.mu.Lock()
		for _, k := range p.published[r.ch] {
			expected++
			if r.seen[k] == 0 {
				lost++
			}
		}
		for k, c := range r.seen {
			if c > 1 && !p.uncertain[r.ch][k] {
				dup += c - 1
			}
		}
		raw += r.raw
		reconnects += r.reconnects
		for k, v := range r.failed {
			failed[k] += v
		}
		r.mu.Unlock()
	}
	var published int
	for _, ks := range p.published {
		published += len(ks)
	}
	ok := lost == 0 && dup == 0
	verdict := "PASS"
	switch {
	case !s.o.recovery:
		verdict, ok = "recorded (without recovery the loss is what a Pusher app sees)", true
	case !ok:
		verdict = "FAIL"
	}
	s.logf("rolling: recovery %v, roll of 3 nodes took %s: published %d (%d refused or unanswered), deliveries expected %d, lost %d, duplicated %d, repeated serials dropped by the client %d, reconnects %d, resume_failed %v: %s",
		s.o.recovery, roll.Round(time.Millisecond), published, p.errors.Load(), expected, lost, dup, raw, reconnects, failed, verdict)
	return ok
}
