package ws

import (
	"net"
	"runtime"
	"sync"
)

// maxIovecs caps one writev (Linux IOV_MAX is 1024).
const maxIovecs = 1024

// flusher writes queued frames for many connections from one goroutine with non-blocking
// writev. Connections with something queued are put on its dirty list; while it writes one
// round, frames published meanwhile pile up behind it, so under load each writev carries
// several frames and the kernel's per-segment cost is paid once for all of them. A socket
// whose buffer is full is handed to its own blocking writer goroutine (the slow path), so
// one slow peer never stalls the round.
type flusher struct {
	mu      sync.Mutex
	dirty   []*Conn
	spare   []*Conn
	wake    chan struct{}
	stop    chan struct{}
	iov     iovecs
	waiting bool
}

func newFlushers(stop chan struct{}) []*flusher {
	n := runtime.GOMAXPROCS(0)
	fs := make([]*flusher, n)
	for i := range fs {
		fs[i] = &flusher{wake: make(chan struct{}, 1), stop: stop, iov: newIovecs()}
	}
	return fs
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
		round := f.dirty
		f.dirty = f.spare[:0]
		f.mu.Unlock()
		for i, c := range round {
			c.flush(f)
			round[i] = nil
		}
		f.mu.Lock()
		if cap(round) <= 1<<16 {
			f.spare = round[:0]
		}
		f.mu.Unlock()
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
