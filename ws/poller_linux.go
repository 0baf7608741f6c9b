//go:build linux

package ws

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// pollReadSize is each poller's read buffer: one read per readiness event takes at most
// this much, so one busy client cannot starve the others on its poller.
const pollReadSize = 16 << 10

// poller reads plain-TCP client sockets without a goroutine per connection: one goroutine
// waits on an epoll set and parses whatever arrives (frameReader), so an idle connection holds
// no stack and no read buffer.
//
// The set is level-triggered (EPOLLIN|EPOLLRDHUP) and each ready socket gets one read per
// wait: with edge triggering every wake-up would need a second read that only returns
// EAGAIN, the most common case here (a lone pusher:subscribe or pusher:ping), and a socket
// with more than one buffer's worth pending would have to be drained before the next one
// gets its turn. Level triggering simply reports it again on the next wait.
//
// Sessions (Session.OnFrame) run on the poller goroutine and must never block: they may
// only touch in-memory state and queue frames; whatever may wait on the network runs on a
// goroutine of the protocol's.
type poller struct {
	epfd   int
	wakefd int // eventfd that interrupts EpollWait at shutdown
	stop   <-chan struct{}
	buf    []byte
	events []unix.EpollEvent
	rd     pollRead // read's RawConn callback and its results, reused

	mu    sync.Mutex
	conns map[int32]*Conn // registered sockets by fd

	// Fast accept (accept_linux.go); only the poller goroutine touches these but acc.
	acc          atomic.Pointer[acceptor] // the listener in this epoll set, if any
	hs           map[int32]*handshake     // accepted sockets whose head is incomplete
	out          []byte                   // scratch for 101 responses
	req          Request                  // scratch for the Handler's Accept
	acceptPaused int64                    // unix nanoseconds to re-register the listener, 0 if not paused
}

// pollers are created on first use, so a server that only ever sees TLS never opens them.
type pollerSet struct {
	once sync.Once
	all  []*poller
	err  error
	acc  atomic.Pointer[acceptor] // FastListener's, if any
}

// poller picks one for a new connection, starting them on first use (N = GOMAXPROCS).
func (s *Server) poller() *poller {
	ps := &s.pollers
	ps.once.Do(func() {
		n := runtime.GOMAXPROCS(0)
		for range n {
			p, err := newPoller(s.stop)
			if err != nil {
				ps.err = err
				s.log.Warn("epoll unavailable, reading with a goroutine per connection", "error", err)
				return
			}
			ps.all = append(ps.all, p)
			s.wg.Add(1)
			go func() { defer s.wg.Done(); p.run() }()
		}
	})
	if ps.err != nil || len(ps.all) == 0 {
		return nil
	}
	return ps.all[fastrandn(uint32(len(ps.all)))]
}

// stopPollers wakes every poller so it sees s.stop closed and exits.
func (s *Server) stopPollers() {
	s.pollers.once.Do(func() {}) // waits for a start in progress; none can follow
	for _, p := range s.pollers.all {
		var one = [8]byte{1}
		_, _ = unix.Write(p.wakefd, one[:])
	}
	if a := s.pollers.acc.Load(); a != nil {
		a.handOff() // keep answering (the Handler refuses while draining) until the listener is closed
	}
}

func newPoller(stop <-chan struct{}) (*poller, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	wakefd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		_ = unix.Close(epfd)
		return nil, err
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(wakefd)}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, wakefd, &ev); err != nil {
		_ = unix.Close(epfd)
		_ = unix.Close(wakefd)
		return nil, err
	}
	return &poller{
		epfd: epfd, wakefd: wakefd, stop: stop,
		buf:    make([]byte, pollReadSize),
		events: make([]unix.EpollEvent, 256),
		conns:  make(map[int32]*Conn),
		hs:     make(map[int32]*handshake),
		out:    make([]byte, 0, 512),
	}, nil
}

// add makes p the reader of c (register): c's socket enters p's table and, unless inSet
// (the fast path's handshake put it there), its epoll set. It reports false if the socket
// could not be watched.
func (p *poller) add(c *Conn, inSet bool) bool {
	if f, ok := c.raw.(*fdRaw); ok {
		// The fast path's own socket: its concrete Control keeps the callback on the
		// stack (through the interface it escaped, two allocations per connection).
		var addErr error
		err := (*fdConn)(f).use(func(fd uintptr) { addErr = p.watch(c, inSet, fd) })
		return err == nil && addErr == nil
	}
	var addErr error
	err := c.raw.Control(func(fd uintptr) { addErr = p.watch(c, inSet, fd) })
	return err == nil && addErr == nil
}

// watch is add's work on the socket's descriptor.
func (p *poller) watch(c *Conn, inSet bool, fd uintptr) error {
	c.fd = int32(fd)
	p.mu.Lock()
	p.conns[c.fd] = c
	p.mu.Unlock()
	if inSet {
		return nil
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP, Fd: c.fd}
	err := unix.EpollCtl(p.epfd, unix.EPOLL_CTL_ADD, int(fd), &ev)
	if err != nil {
		p.mu.Lock()
		delete(p.conns, c.fd)
		p.mu.Unlock()
	}
	return err
}

// forget takes a refused connection's socket out of p's epoll set before it is closed.
func (p *poller) forget(c *Conn) {
	_ = c.raw.Control(func(fd uintptr) { _ = unix.EpollCtl(p.epfd, unix.EPOLL_CTL_DEL, int(fd), nil) })
}

func (p *poller) run() {
	defer func() {
		_ = unix.Close(p.epfd)
		_ = unix.Close(p.wakefd)
		for fd := range p.hs {
			_ = unix.Close(int(fd))
		}
	}()
	var nextExpiry int64
	for {
		timeout := -1 // no handshake can time out and no accept is paused: sleep
		if len(p.hs) > 0 || p.acceptPaused != 0 {
			timeout = 100
		}
		n, err := unix.EpollWait(p.epfd, p.events, timeout)
		if err != nil && err != unix.EINTR {
			return
		}
		acc := p.acc.Load()
		for i := range n {
			ev := p.events[i]
			if ev.Fd == int32(p.wakefd) {
				select {
				case <-p.stop:
					return
				default:
				}
				continue
			}
			if acc != nil && ev.Fd == int32(acc.fd) {
				p.accept(acc)
				continue
			}
			p.mu.Lock()
			c := p.conns[ev.Fd]
			p.mu.Unlock()
			if c != nil {
				p.read(c, ev.Events)
			} else if h := p.hs[ev.Fd]; h != nil {
				if acc == nil { // the listener closed: nobody would take it any more
					delete(p.hs, ev.Fd)
					_ = unix.Close(int(ev.Fd))
					continue
				}
				p.handshakeRead(acc, int(ev.Fd), h)
			}
		}
		if len(p.hs) > 0 || p.acceptPaused != 0 {
			now := time.Now().UnixNano()
			if p.acceptPaused != 0 && now >= p.acceptPaused {
				p.resumeAccept()
			}
			if now >= nextExpiry {
				p.expireHandshakes(now)
				nextExpiry = now + int64(time.Second)
			}
		}
	}
}

// pollRead carries one read's results through syscall.RawConn.Read. Its callback is made
// once per poller (only the poller goroutine reads): a closure per read cost three
// allocations (the closure, n and the error escaping) on every frame a client sends.
type pollRead struct {
	n   int
	err error
	buf []byte
	fn  func(fd uintptr) bool
}

func (r *pollRead) read(fd uintptr) bool {
	for {
		r.n, r.err = unix.Read(int(fd), r.buf)
		if r.err != unix.EINTR {
			return true
		}
	}
}

// read does one non-blocking read from a ready socket and parses it; end of stream, an
// error or a protocol violation ends the connection.
func (p *poller) read(c *Conn, events uint32) {
	r := &p.rd
	if r.fn == nil {
		r.fn = r.read
	}
	r.buf = p.buf
	err := c.raw.Read(r.fn)
	n, rerr := r.n, r.err
	r.err = nil
	switch {
	case err != nil || (rerr != nil && rerr != unix.EAGAIN) || n == 0:
		p.end(c)
		return
	case rerr == unix.EAGAIN || n < 0:
		return
	}
	switch res := c.rd.feed(p.buf[:n], int(c.limit), (*frames)(c)); res {
	case 0:
		if events&(unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 && n < len(p.buf) {
			p.end(c) // the peer half-closed and everything it sent was read
		}
	case feedStop:
		p.end(c) // close frame: closeWith already queued the reply
	default:
		c.protocolError(res)
		p.end(c)
	}
}

// end deregisters c before anything may close its fd, then runs the cleanup readLoop
// runs on exit. A connection that is closing waits for its close frame to be written on
// a goroutine of its own, never on the poller.
func (p *poller) end(c *Conn) {
	p.mu.Lock()
	if p.conns[c.fd] == c {
		delete(p.conns, c.fd)
	}
	p.mu.Unlock()
	_ = c.raw.Control(func(fd uintptr) {
		_ = unix.EpollCtl(p.epfd, unix.EPOLL_CTL_DEL, int(fd), nil)
	})
	c.rd = frameReader{}
	if c.mustAwaitFlush() {
		go c.cleanup()
		return
	}
	c.cleanup()
}

// shutdownSocket stops the socket without closing its fd (how).
func (c *Conn) shutdownSocket(how int) {
	_ = c.raw.Control(func(fd uintptr) { _ = unix.Shutdown(int(fd), how) })
}

// dropPolled ends a polled connection from any goroutine: shutting both directions down
// sends the peer a FIN and wakes the poller with end of stream, which deregisters the
// socket and only then closes it (a closed fd number may be reused at once).
func (c *Conn) dropPolled() { c.shutdownSocket(unix.SHUT_RDWR) }

// endPolledRead makes the poller see end of stream: the close handshake's grace is over.
func (c *Conn) endPolledRead() { c.shutdownSocket(unix.SHUT_RD) }
