package channels

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"sync"
	"time"

	"github.com/reverbgo/reverbgo/internal/wsframe"
)

// History is a recovery channel's serials and recent events (issue 23): per (app, channel)
// the next serial (1, 2, 3, ...), the last Limits.Size frames, and an epoch that changes
// whenever the history may have been lost (a new process, keys gone, TTL expiry), so a
// client holding an old (epoch, serial) is told instead of silently getting a gap.
type History interface {
	// Append gives frame (a complete server frame whose JSON payload ends with '}') the
	// channel's next serial, keeps the framed result (AppendSerial) with except, and returns
	// both. deliver, when not nil, runs with the new frame before any later Append of the
	// channel is assigned, so deliveries keep serial order.
	Append(ctx context.Context, app, ch string, lim HistoryLimits, except string, frame []byte, deliver func(serial uint64, frame []byte)) (uint64, []byte, error)
	// Position is the channel's current epoch and last serial (0 before any event).
	Position(ctx context.Context, app, ch string, lim HistoryLimits) (Position, error)
	// Since is the position and the kept events with a serial above after, in order;
	// complete is false when the history no longer holds every one of them.
	Since(ctx context.Context, app, ch string, lim HistoryLimits, after uint64) (pos Position, events []HistoryEvent, complete bool, err error)
}

// HistoryLimits are a channel's bounds (apps[].recovery).
type HistoryLimits struct {
	Size int           // events kept
	TTL  time.Duration // how long an idle channel's history is kept
}

// Position is where a channel's stream stands.
type Position struct {
	Epoch  string
	Serial uint64
}

// HistoryEvent is one kept event: its serial, the socket it was published excluding, and
// its frame, byte-identical to the live one.
type HistoryEvent struct {
	Serial uint64
	Except string
	Frame  []byte
}

// NewEpoch is a random epoch (16 hex digits).
func NewEpoch() string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("channels: crypto/rand failed: " + err.Error())
	}
	return hex.EncodeToString(b[:])
}

// AppendSerial returns frame (one unfragmented server text frame whose payload is a JSON
// object) with `,"serial":N` as its last top-level field, reframed: {"event":...,"serial":N}.
// The Redis script does the same in Lua; the shared suite checks both give the same bytes.
func AppendSerial(frame []byte, serial uint64) []byte {
	payload := wsframe.Payload(frame)
	if len(payload) == 0 || payload[len(payload)-1] != '}' {
		return frame
	}
	buf := make([]byte, wsframe.TextHeaderRoom, wsframe.TextHeaderRoom+len(payload)+32)
	buf = append(buf, payload[:len(payload)-1]...)
	buf = append(buf, `,"serial":`...)
	buf = strconv.AppendUint(buf, serial, 10)
	buf = append(buf, '}')
	return wsframe.TextFrameInPlace(buf)
}

// SerialOf is the serial AppendSerial put at the end of frame's payload (0 = none). It
// reads only the payload's tail: the per-subscription filter calls it on live frames.
func SerialOf(frame []byte) uint64 {
	const tag = `,"serial":`
	p := wsframe.Payload(frame)
	if len(p) < len(tag)+2 || p[len(p)-1] != '}' {
		return 0
	}
	i := len(p) - 2
	for i >= 0 && p[i] >= '0' && p[i] <= '9' {
		i--
	}
	if i == len(p)-2 || i+1 < len(tag) || string(p[i+1-len(tag):i+1]) != tag {
		return 0
	}
	n, err := strconv.ParseUint(string(p[i+1:len(p)-1]), 10, 64)
	if err != nil {
		return 0
	}
	return n
}

// MemoryHistory is the single-node History: a process's memory, so its epoch is new with
// every process (and with every channel whose history expired).
type MemoryHistory struct {
	mu    sync.Mutex
	chans map[key]*memHistory
	now   func() time.Time
	// OnNewEpoch, when set, hears that a channel's history expired and it took a new epoch
	// (under the channel's lock, before the event that found it is appended): its
	// connected sockets are told (pusher's live resume_failed). Set it before use.
	OnNewEpoch func(app, ch, epoch string)
}

type memHistory struct {
	mu     sync.Mutex
	epoch  string
	serial uint64
	events []HistoryEvent // ring of the last Size events, oldest at head
	head   int
	last   time.Time // last publish (or creation), for the TTL
}

var _ History = (*MemoryHistory)(nil)

// NewMemoryHistory is an empty history.
func NewMemoryHistory() *MemoryHistory {
	return &MemoryHistory{chans: map[key]*memHistory{}, now: time.Now}
}

// channel returns (app, ch)'s history locked, reset when idle longer than lim.TTL (a new
// epoch: its events are gone). Expired channels are swept as they are met here and
// by Sweep, so nothing grows without a bound.
func (h *MemoryHistory) channel(app, ch string, lim HistoryLimits) *memHistory {
	now := h.now()
	h.mu.Lock()
	c := h.chans[key{app, ch}]
	if c == nil {
		c = &memHistory{epoch: NewEpoch(), last: now}
		h.chans[key{app, ch}] = c
	}
	h.mu.Unlock()
	c.mu.Lock()
	if lim.TTL > 0 && now.Sub(c.last) > lim.TTL { // its events are gone: a new epoch
		c.epoch, c.serial, c.events, c.head, c.last = NewEpoch(), 0, nil, 0, now
		if h.OnNewEpoch != nil {
			h.OnNewEpoch(app, ch, c.epoch)
		}
	}
	return c
}

// Sweep drops every channel idle longer than ttl.
func (h *MemoryHistory) Sweep(ttl time.Duration) {
	cut := h.now().Add(-ttl)
	h.mu.Lock()
	for k, c := range h.chans {
		c.mu.Lock()
		if c.last.Before(cut) {
			delete(h.chans, k)
		}
		c.mu.Unlock()
	}
	h.mu.Unlock()
}

// Append implements History; deliver runs under the channel's lock.
func (h *MemoryHistory) Append(_ context.Context, app, ch string, lim HistoryLimits, except string, frame []byte, deliver func(uint64, []byte)) (uint64, []byte, error) {
	c := h.channel(app, ch, lim)
	defer c.mu.Unlock()
	c.serial++
	c.last = h.now()
	out := AppendSerial(frame, c.serial)
	ev := HistoryEvent{Serial: c.serial, Except: except, Frame: out}
	size := max(lim.Size, 1)
	if len(c.events) < size {
		c.events = append(c.events, ev)
	} else {
		c.events[c.head] = ev
		c.head = (c.head + 1) % len(c.events)
	}
	if deliver != nil {
		deliver(c.serial, out)
	}
	return c.serial, out, nil
}

// Position implements History.
func (h *MemoryHistory) Position(_ context.Context, app, ch string, lim HistoryLimits) (Position, error) {
	c := h.channel(app, ch, lim)
	defer c.mu.Unlock()
	return Position{Epoch: c.epoch, Serial: c.serial}, nil
}

// Since implements History.
func (h *MemoryHistory) Since(_ context.Context, app, ch string, lim HistoryLimits, after uint64) (Position, []HistoryEvent, bool, error) {
	c := h.channel(app, ch, lim)
	defer c.mu.Unlock()
	pos := Position{Epoch: c.epoch, Serial: c.serial}
	if after >= c.serial {
		return pos, nil, true, nil
	}
	n := len(c.events)
	oldest := c.serial - uint64(n) + 1 // the ring holds (serial-n, serial]
	if after+1 < oldest {
		return pos, nil, false, nil
	}
	out := make([]HistoryEvent, 0, c.serial-after)
	for i := 0; i < n; i++ {
		if ev := c.events[(c.head+i)%n]; ev.Serial > after {
			out = append(out, ev)
		}
	}
	return pos, out, true, nil
}
