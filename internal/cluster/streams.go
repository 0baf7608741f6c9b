package cluster

import (
	"context"
	"errors"
	"hash/maphash"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/reverbgo/reverbgo/channels"
)

var errNoLimits = errors.New("the channel's app no longer enables recovery")

// Told is how a node tells the subscribers of a recovery channel that it could not deliver
// every event in serial order (issue 31): reason is channels.ResumeEpochChanged or
// channels.ResumeTooOld, and the events that follow are those after (epoch, serial).
type Told func(app, ch, reason, epoch string, serial uint64)

// Stream bounds: how long a gap may be filled from the history (a Redis that does not
// answer is retried until then, then the gap is told), how many live frames a channel
// holds meanwhile (more is told), how many history reads run at once (a restored
// subscription checks every local recovery channel).
const (
	fillBound    = 5 * time.Second
	fillTimeout  = 2 * time.Second
	maxHeld      = 4096
	fillParallel = 8
	recentFrames = 16
)

var frameSeed = maphash.MakeSeed()

// recentFrame is a delivered frame's serial and hash.
type recentFrame struct{ serial, hash uint64 }

// remember records a frame delivered under serial (st.mu held).
func (st *stream) remember(serial uint64, frame []byte) {
	st.recent[serial%recentFrames] = recentFrame{serial, maphash.Bytes(frameSeed, frame)}
}

// reuses reports whether frame is another event than the one delivered here under serial
// (false when that one is not among the recent ones: unknown is not proof).
func (st *stream) reuses(serial uint64, frame []byte) bool {
	r := st.recent[serial%recentFrames]
	return r.serial == serial && r.hash != maphash.Bytes(frameSeed, frame)
}

// streams puts the recovery events this node receives in serial order, per channel with a
// local subscriber (Seed, on its first subscribe; dropped by Unwant): an event whose serial
// is not the next one is held while the missed ones are read from the history and
// delivered first; a new epoch is delivered from its first kept event; what the history no
// longer has is told (Told), never skipped in silence. check re-reads every channel's
// position after a subscription connection was re-made, since pub/sub has no replay.
type streams struct {
	hist    *RedisHistory
	limits  func(app, ch string) (channels.HistoryLimits, bool)
	told    Told
	log     *slog.Logger
	deliver func(channels.Message) int
	sem     chan struct{}

	mu sync.Mutex
	m  map[key]*stream
}

// stream is one channel's position on this node.
type stream struct {
	app, ch string
	mu      sync.Mutex
	epoch   string
	last    uint64   // the serial delivered last under epoch
	retired []string // epochs the channel left (newest last, a few): their late frames are dropped
	// recent are the hashes of the last delivered frames by serial%len: a serial at or below
	// last whose frame differs was given to a second event (reused).
	recent  [recentFrames]recentFrame
	reused  bool // a reuse was seen: fill rotates the epoch first
	filling bool // a history read is in flight; live frames wait in held
	held    []heldFrame
	// seeded: the stream has a position (its first subscriber's, or its first event's).
	seeded bool
	// dead: the channel lost its last local subscriber (drop, under the registry's channel
	// lock, so atomic): a fill still running delivers nothing more.
	dead atomic.Bool
}

type heldFrame struct {
	m     channels.Message
	epoch string
	at    time.Time // when it was held
}

func newStreams(h *RedisHistory, limits func(app, ch string) (channels.HistoryLimits, bool), told Told, log *slog.Logger, deliver func(channels.Message) int) *streams {
	return &streams{hist: h, limits: limits, told: told, log: log, deliver: deliver, sem: make(chan struct{}, fillParallel), m: map[key]*stream{}}
}

// want starts a recovery channel's stream, without a position yet, when it gets its first
// local subscriber (Want, under the registry's channel lock, before any of its events can
// reach this node): from then on every recovery event of the channel goes through it, so
// none is delivered twice or out of order, and drop ends it.
func (s *streams) want(app, ch string) {
	if _, ok := s.limits(app, ch); !ok {
		return
	}
	s.mu.Lock()
	if s.m[key{app, ch}] == nil {
		s.m[key{app, ch}] = &stream{app: app, ch: ch}
	}
	s.mu.Unlock()
}

// Seed gives a channel's stream the position its first local subscriber was answered with
// (read once this node's subscription to it was in effect). A stream that has a position
// keeps it: what it received since is newer than any read.
func (s *streams) Seed(app, ch string, pos channels.Position) {
	st := s.get(app, ch)
	if st == nil {
		return
	}
	st.mu.Lock()
	if !st.seeded {
		st.seeded, st.epoch, st.last = true, pos.Epoch, pos.Serial
	}
	st.mu.Unlock()
}

// drop ends the stream of a channel that lost its last local subscriber.
func (s *streams) drop(app, ch string) {
	s.mu.Lock()
	if st := s.m[key{app, ch}]; st != nil {
		st.dead.Store(true)
		delete(s.m, key{app, ch})
	}
	s.mu.Unlock()
}

// Known is the channel's position on this node (false when it has none).
func (s *streams) Known(app, ch string) (channels.Position, bool) {
	s.mu.Lock()
	st := s.m[key{app, ch}]
	s.mu.Unlock()
	if st == nil {
		return channels.Position{}, false
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	return channels.Position{Epoch: st.epoch, Serial: st.last}, st.seeded
}

func (s *streams) get(app, ch string) *stream {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[key{app, ch}]
}

// receive takes one recovery event from Redis (the subscription's goroutine).
func (s *streams) receive(m channels.Message, epoch string) {
	st := s.get(m.AppID, m.Channel)
	if st == nil {
		s.deliver(m) // no local subscriber (broadcast routing brings every channel)
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.seeded {
		// Its first event here, before its first subscriber's position was read: a
		// subscriber waiting for its answer holds it; the stream continues from it.
		st.seeded, st.epoch, st.last = true, epoch, channels.SerialOf(m.Frame)
		st.remember(st.last, m.Frame)
		s.send(st, m)
		return
	}
	s.step(st, m, epoch)
}

// send delivers m unless the stream ended (st.mu held).
func (s *streams) send(st *stream, m channels.Message) {
	if !st.dead.Load() {
		s.deliver(m)
	}
}

// tell tells the channel's sockets, unless the stream ended (st.mu held).
func (s *streams) tell(st *stream, reason, epoch string, serial uint64) {
	if !st.dead.Load() {
		s.told(st.app, st.ch, reason, epoch, serial)
	}
}

// step delivers m when it is the next serial, drops it when it was delivered, and else
// holds it behind a history read (st.mu held).
func (s *streams) step(st *stream, m channels.Message, epoch string) {
	if st.filling {
		if len(st.held) < maxHeld {
			st.held = append(st.held, heldFrame{m, epoch, time.Now()})
		}
		return // beyond the bound: fill tells the gap it leaves
	}
	serial := channels.SerialOf(m.Frame)
	switch {
	case slices.Contains(st.retired, epoch):
		// a late frame of an epoch the channel left: its loss was told
	case epoch == st.epoch && serial == st.last+1:
		st.last = serial
		st.remember(serial, m.Frame)
		s.send(st, m)
	case epoch == st.epoch && serial <= st.last && !st.reuses(serial, m.Frame):
		// delivered already (it raced a history read)
	case epoch == st.epoch && serial <= st.last:
		// Another event under a serial delivered here: Redis lost appends it had answered
		// and a publisher that could not know gave their serials out again. The epoch
		// must change (fill rotates it) and what follows is told from the new one.
		st.reused, st.filling = true, true
		go s.fill(st)
	default: // a gap, or a new epoch: read the history first
		st.filling = true
		st.held = append(st.held, heldFrame{m, epoch, time.Now()})
		go s.fill(st)
	}
}

// check re-reads the position of every channel (a subscription connection was re-made:
// what it missed is in the history).
func (s *streams) check() {
	s.mu.Lock()
	all := make([]*stream, 0, len(s.m))
	for _, st := range s.m {
		all = append(all, st)
	}
	s.mu.Unlock()
	for _, st := range all {
		st.mu.Lock()
		if st.seeded && !st.filling && !st.dead.Load() {
			st.filling = true
			go s.fill(st)
		}
		st.mu.Unlock()
	}
}

// fill reads what st missed from the history and delivers it in order, then what was held;
// a gap the history cannot fill is told.
func (s *streams) fill(st *stream) {
	deadline := time.Now().Add(fillBound) // the bound counts the wait for a slot too
	s.sem <- struct{}{}
	defer func() { <-s.sem }()
	lim, ok := s.limits(st.app, st.ch)
	st.mu.Lock()
	epoch, after, reused := st.epoch, st.last, st.reused
	st.reused = false
	st.mu.Unlock()
	if reused && ok {
		ctx, cancel := context.WithTimeout(context.Background(), fillTimeout)
		if _, err := s.hist.Rotate(ctx, st.app, st.ch, lim, epoch); err != nil {
			s.log.Warn("recovery: a reused serial's epoch could not be rotated", "app", st.app, "channel", st.ch, "error", err)
		}
		cancel()
	}
	var (
		pos      channels.Position
		evs      []channels.HistoryEvent
		complete bool
		err      error = errNoLimits
		readAt   time.Time
	)
	for backoff := 50 * time.Millisecond; ok && !st.dead.Load(); backoff = min(2*backoff, time.Second) {
		readAt = time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), min(fillTimeout, max(time.Until(deadline), 100*time.Millisecond)))
		pos, evs, complete, err = s.hist.Since(ctx, st.app, st.ch, lim, after)
		if err == nil && pos.Epoch != epoch {
			// A new epoch: its events are new to every subscriber here, from its first one.
			pos, evs, complete, err = s.hist.Since(ctx, st.app, st.ch, lim, 0)
		}
		cancel()
		if err == nil || time.Now().Add(backoff).After(deadline) {
			break
		}
		time.Sleep(backoff)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	switch {
	case err != nil:
		// The history cannot be read: what was held is delivered after the gap, told.
		s.log.Warn("recovery: a gap could not be read from the history; told to the channel's sockets",
			"app", st.app, "channel", st.ch, "error", err)
		if len(st.held) > 0 {
			h := st.held[0]
			st.moveTo(h.epoch, max(channels.SerialOf(h.m.Frame), 1)-1)
		}
		s.tell(st, channels.ResumeTooOld, st.epoch, st.last)
	case pos.Epoch != epoch:
		first := pos.Serial
		if complete && len(evs) > 0 {
			first = evs[0].Serial - 1
		} else if complete {
			first = pos.Serial
		}
		st.moveTo(pos.Epoch, first)
		s.tell(st, channels.ResumeEpochChanged, pos.Epoch, first)
		s.replay(st, evs)
	case !complete:
		st.last = pos.Serial
		s.tell(st, channels.ResumeTooOld, pos.Epoch, pos.Serial)
	default:
		s.replay(st, evs)
	}
	held := st.held
	st.held, st.filling = nil, false
	for i, h := range held {
		if st.filling {
			st.held = append(st.held, held[i:]...)
			break
		}
		if err == nil && h.epoch != st.epoch && h.at.Before(readAt) && !slices.Contains(st.retired, h.epoch) {
			// Held before the read that found the channel at st.epoch: an epoch it left
			// (its loss was told), not a newer one.
			st.retire(h.epoch)
			continue
		}
		s.step(st, h.m, h.epoch)
	}
	if len(held) >= maxHeld && !st.filling {
		// Frames past the bound were not kept: the next live one reads them again.
		st.filling = true
		go s.fill(st)
	}
}

// moveTo sets the position, retiring the epoch it leaves (st.mu held). The frames kept
// for telling a reused serial are the old epoch's: forgotten.
func (st *stream) moveTo(epoch string, serial uint64) {
	if epoch != st.epoch {
		st.retire(st.epoch)
		st.recent = [recentFrames]recentFrame{}
	}
	st.epoch, st.last = epoch, serial
}

// retire records an epoch the channel left (the last few).
func (st *stream) retire(epoch string) {
	if epoch == "" {
		return
	}
	st.retired = append(st.retired, epoch)
	if len(st.retired) > 4 {
		st.retired = st.retired[1:]
	}
}

// replay delivers the history's events above st.last in order (st.mu held).
func (s *streams) replay(st *stream, evs []channels.HistoryEvent) {
	for _, ev := range evs {
		if ev.Serial != st.last+1 {
			continue
		}
		st.last = ev.Serial
		st.remember(ev.Serial, ev.Frame)
		s.send(st, channels.Message{AppID: st.app, Channel: st.ch, Frame: ev.Frame, Except: ev.Except, Recovery: &serialled})
	}
}
