// Package asynclog takes log writes off the goroutines that log. The bridge writes an audit
// line per call and per page message; written straight to stderr that is one write(2) per
// line on the call's own goroutine, in the call's latency. A Writer instead appends the line
// to a bounded in-memory buffer and one goroutine writes what accumulated in one write(2), so
// at a high call rate hundreds of lines share a syscall and no call waits for the terminal,
// pipe or file behind stderr.
//
// Nothing is ever dropped: when the buffer is full, Write blocks until the drain goroutine
// has taken it (and counts that in Stats), so memory stays bounded and a stuck stderr slows
// the loggers down exactly as a synchronous writer would, never loses their lines. Lines leave
// in the order their Writes returned. Close writes everything still buffered; after Close,
// writes go straight through, so lines logged while shutting down are not lost either.
package asynclog

import (
	"io"
	"sync"
	"time"
)

// Defaults.
const (
	// DefaultMaxBuffer is the most bytes held before writers block.
	DefaultMaxBuffer = 1 << 20
	// DefaultDelay is how long the drain waits after the first line of a batch, so the lines
	// of the next few milliseconds share its write. Under DefaultMaxBuffer/2 bytes buffered the
	// drain waits this long; over it, it writes at once.
	DefaultDelay = 5 * time.Millisecond
)

// Options configure New; zero fields take the defaults.
type Options struct {
	MaxBuffer int
	Delay     time.Duration
}

// Stats are the Writer's counters.
type Stats struct {
	// Writes is the number of Write calls buffered (not counting those after Close).
	Writes uint64
	// Flushes is the number of writes to the underlying writer (batches).
	Flushes uint64
	// Blocked is the number of Writes that had to wait for room in the buffer.
	Blocked uint64
}

// Writer is an io.Writer that buffers and writes from one goroutine; see the package doc.
type Writer struct {
	w     io.Writer
	max   int
	delay time.Duration

	mu      sync.Mutex
	room    *sync.Cond // signalled when the drain takes the buffer
	buf     []byte     // lines not yet taken by the drain
	taking  bool       // the drain holds a batch it has not finished writing
	closed  bool
	stats   Stats
	err     error         // the first error of the underlying writer
	kick    chan struct{} // cap 1: the buffer went from empty to non-empty
	urgent  chan struct{} // cap 1: the buffer passed max/2
	closing chan struct{}
	done    chan struct{}
	once    sync.Once
}

// New starts the drain goroutine over w; Close stops it.
func New(w io.Writer, o Options) *Writer {
	if o.MaxBuffer <= 0 {
		o.MaxBuffer = DefaultMaxBuffer
	}
	if o.Delay <= 0 {
		o.Delay = DefaultDelay
	}
	a := &Writer{w: w, max: o.MaxBuffer, delay: o.Delay, kick: make(chan struct{}, 1),
		urgent: make(chan struct{}, 1), closing: make(chan struct{}), done: make(chan struct{})}
	a.room = sync.NewCond(&a.mu)
	go a.drain()
	return a
}

// Write copies p into the buffer (waiting for room when it is full) and returns len(p). An
// error of the underlying writer is reported by Close, not here: a logger has nowhere to
// report it either.
func (a *Writer) Write(p []byte) (int, error) {
	a.mu.Lock()
	if a.closed {
		// Serialized with the final flush, so these lines follow everything buffered.
		defer a.mu.Unlock()
		return a.w.Write(p)
	}
	if len(a.buf) > 0 && len(a.buf)+len(p) > a.max {
		a.stats.Blocked++
		for !a.closed && len(a.buf) > 0 && len(a.buf)+len(p) > a.max {
			a.signal(a.urgent)
			a.room.Wait()
		}
		if a.closed {
			defer a.mu.Unlock()
			return a.w.Write(p)
		}
	}
	wasEmpty := len(a.buf) == 0
	a.buf = append(a.buf, p...)
	a.stats.Writes++
	full := len(a.buf) > a.max/2
	a.mu.Unlock()
	if wasEmpty {
		a.signal(a.kick)
	}
	if full {
		a.signal(a.urgent)
	}
	return len(p), nil
}

func (a *Writer) signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// drain waits for a first line, lets the batch fill for Delay (or less when it is getting
// full), then writes it in one call. Two buffers alternate, so steady logging allocates
// nothing.
func (a *Writer) drain() {
	defer close(a.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var spare []byte
	for {
		select {
		case <-a.kick:
		case <-a.urgent:
		case <-a.closing:
			return
		}
		timer.Reset(a.delay)
		select {
		case <-timer.C:
		case <-a.urgent:
			timer.Stop()
		case <-a.closing:
			timer.Stop()
			return // Close writes the rest itself
		}
		a.mu.Lock()
		batch := a.buf
		a.buf, a.taking = spare[:0], true
		a.room.Broadcast()
		a.mu.Unlock()
		if len(batch) > 0 {
			a.write(batch)
		}
		a.mu.Lock()
		a.taking = false
		a.room.Broadcast()
		a.mu.Unlock()
		spare = batch
	}
}

// write is the drain's write to the underlying writer, keeping the first error.
func (a *Writer) write(b []byte) {
	_, err := a.w.Write(b)
	a.mu.Lock()
	a.stats.Flushes++
	if err != nil && a.err == nil {
		a.err = err
	}
	a.mu.Unlock()
}

// Close stops the drain, writes what is still buffered (after any batch the drain is
// writing) and returns the first error of the underlying writer. Writes after Close go
// straight to it. Close is idempotent.
func (a *Writer) Close() error {
	a.once.Do(func() {
		close(a.closing)
		<-a.done
		a.mu.Lock()
		for a.taking {
			a.room.Wait()
		}
		rest := a.buf
		a.buf = nil
		a.closed = true
		a.room.Broadcast() // blocked writers go straight through
		if len(rest) > 0 {
			// Under the lock: a writer arriving now must come after these lines.
			if _, err := a.w.Write(rest); err != nil && a.err == nil {
				a.err = err
			}
			a.stats.Flushes++
		}
		a.mu.Unlock()
	})
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.err
}

// Stats returns the counters.
func (a *Writer) Stats() Stats {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stats
}
