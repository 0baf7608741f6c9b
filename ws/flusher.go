package ws

import (
	"log/slog"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// maxIovecs caps one writev (Linux IOV_MAX is 1024).
const maxIovecs = 1024

// busyRoundConns is the load at which a flusher counts as busy: a round that wrote this many
// sockets, or left this many (counted together) waiting when it ended. Below it, as on an
// idle server or for one chatty socket, rounds start at once and coalescing adds nothing.
const busyRoundConns = 32

// flusher writes queued frames for many connections from one goroutine with non-blocking
// writev. Connections with something queued are put on its dirty list; while it writes one
// round, frames published meanwhile pile up behind it, so under load each writev carries
// several frames and the kernel's per-segment cost is paid once for all of them. A socket
// whose buffer is full is handed to its own blocking writer goroutine (the slow path), so
// one slow peer never stalls the round.
//
// Coalescing (server.write_coalesce_ms, window > 0): after a busy round, the next round
// starts no earlier than window after the busy one started. Meanwhile the sockets already
// on the dirty list stay scheduled, so every frame sent to them just joins their queue and
// leaves in the same writev, and schedule does not wake the flusher (it is not waiting):
// under load there are fewer writes and fewer wake-ups per delivery. A frame waits at most
// window longer than without coalescing; after a round that was not busy, or once window
// has passed anyway (a long round, an idle spell), the next round starts at once, so an
// idle server adds no latency. One timer per flusher, armed at most once per round.
type flusher struct {
	mu      sync.Mutex
	dirty   []*Conn
	spare   []*Conn
	wake    chan struct{}
	stop    chan struct{}
	iov     iovecs
	wv      writevCall // the writev callback's state, reused: no closure per write
	waiting bool
	ur      *uringWriter // the io_uring write path (server.io_uring); nil: writev
	path    *pathSwitch  // the write path shared by the server's flushers
	log     *slog.Logger

	window time.Duration         // coalescing window, 0 = off
	timer  *time.Timer           // the hold's timer, made on first need
	hold   func(d time.Duration) // waits d before a round; nil = the timer (tests set it)

	stats writeStats
}

// writevCall carries one writev's buffers and error through syscall.RawConn.Write. Its
// callback is made once per flusher: a closure per write cost three allocations (the
// closure, bufs and the error escaping), per socket written, on every fan-out and relay.
type writevCall struct {
	bufs net.Buffers
	err  error
	fn   func(fd uintptr) bool
}

// writeStats are a flusher's counters (metrics.go exports their sums), added once per
// write or round. Those of the flusher's own goroutine have one writer, so ownAdd bumps
// them with a plain load and store, no locked instruction; the slow path's are atomic adds.
type writeStats struct {
	writev    atomic.Uint64 // writev syscalls of the flusher (EAGAIN'd ones included)
	uring     atomic.Uint64 // socket writes (SQEs) of the flusher's io_uring rounds
	enters    atomic.Uint64 // io_uring_enter syscalls that submitted and reaped them
	frames    atomic.Uint64 // whole frames handed to either (a remainder is not counted twice)
	rounds    atomic.Uint64 // flusher rounds that started at once (a round writes every dirty socket)
	coalesced atomic.Uint64 // flusher rounds that waited for the coalescing window first

	blocking       atomic.Uint64 // batches written by the slow path's blocking writers
	blockingFrames atomic.Uint64 // frames in those batches
}

// ownAdd adds n to a counter only the flusher's goroutine writes.
func ownAdd(c *atomic.Uint64, n uint64) { c.Store(c.Load() + n) }

// newFlushers makes one flusher per P, writing with io_uring or writev as chooseWritePath
// decides (server.io_uring and what the kernel proves it can do).
func newFlushers(stop chan struct{}, window time.Duration, uring IOUringMode, log *slog.Logger) ([]*flusher, *pathSwitch) {
	fs := make([]*flusher, runtime.GOMAXPROCS(0))
	for i := range fs {
		fs[i] = newFlusher(stop, window)
		fs[i].log = log
	}
	return fs, chooseWritePath(fs, uring, log)
}

func newFlusher(stop chan struct{}, window time.Duration) *flusher {
	return &flusher{wake: make(chan struct{}, 1), stop: stop, iov: newIovecs(), window: max(window, 0), path: &pathSwitch{}}
}

// schedule puts c on the dirty list; the caller has set c.scheduled under c.mu.
func (f *flusher) schedule(c *Conn) {
	f.mu.Lock()
	f.dirty = append(f.dirty, c)
	wake := f.waiting
	f.waiting = false
	f.mu.Unlock()
	if wake {
		select {
		case f.wake <- struct{}{}:
		default:
		}
	}
}

func (f *flusher) run() {
	defer f.closeRing()
	var next time.Time // earliest start of the next round (zero: at once); set after a busy round
	for {
		f.mu.Lock()
		if len(f.dirty) == 0 {
			f.waiting = true
			f.mu.Unlock()
			select {
			case <-f.wake:
				continue
			case <-f.stop:
				return
			}
		}
		rounds := &f.stats.rounds
		if !next.IsZero() {
			f.mu.Unlock()
			if d := time.Until(next); d > 0 {
				rounds = &f.stats.coalesced
				f.wait(d)
			}
			next = time.Time{}
			f.mu.Lock()
		}
		round := f.dirty
		f.dirty = f.spare[:0]
		f.mu.Unlock()
		ownAdd(rounds, 1)
		var start time.Time
		if f.window > 0 {
			start = time.Now()
		}
		f.writeRound(round)
		f.mu.Lock()
		load := len(round) + len(f.dirty)
		// The round's list is the next spare; a huge one is dropped, and then so is the
		// old spare: it is the dirty list filled meanwhile, and the next round must not
		// schedule into the array it is writing.
		if cap(round) <= 1<<16 {
			f.spare = round[:0]
		} else {
			f.spare = nil
		}
		f.mu.Unlock()
		if f.window > 0 && load >= busyRoundConns {
			next = start.Add(f.window)
		}
	}
}

// writeRound writes every connection of a round: through the io_uring when the flusher
// has one (all sockets in one io_uring_enter), otherwise with a writev each. It leaves
// round cleared (no references kept in the spare list).
func (f *flusher) writeRound(round []*Conn) {
	if f.ur != nil && f.path.refused.Load() {
		f.closeRing() // another flusher's completion refused io_uring: writev from now on
	}
	if f.ur != nil {
		f.ur.round(f, round)
	} else {
		for _, c := range round {
			c.flush(f)
		}
	}
	clear(round)
}

// wait holds the next round back for d, or less if the server stops meanwhile.
func (f *flusher) wait(d time.Duration) {
	if f.hold != nil {
		f.hold(d)
		return
	}
	if f.timer == nil {
		f.timer = time.NewTimer(d)
	} else {
		f.timer.Reset(d)
	}
	select {
	case <-f.timer.C:
	case <-f.stop:
		f.timer.Stop()
	}
}

// consume drops n written bytes from the front of bufs.
func consume(bufs net.Buffers, n int) net.Buffers {
	for n > 0 && len(bufs) > 0 {
		if n < len(bufs[0]) {
			bufs[0] = bufs[0][n:]
			return bufs
		}
		n -= len(bufs[0])
		bufs[0] = nil
		bufs = bufs[1:]
	}
	for len(bufs) > 0 && len(bufs[0]) == 0 {
		bufs = bufs[1:]
	}
	return bufs
}
