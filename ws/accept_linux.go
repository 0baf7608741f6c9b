//go:build linux

package ws

import (
	"bytes"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// handshakeTimeout bounds how long a connection may take to send its request head, as
// http.Server's ReadHeaderTimeout does for the requests it reads.
const handshakeTimeout = 10 * time.Second

// acceptBatch is how many connections a poller accepts per readiness event before it
// serves its other sockets again (the listener is level-triggered: the rest is reported
// on the next wait).
const acceptBatch = 32

// FastListener serves WebSocket upgrades without net/http, echo or gorilla, and without
// Go's runtime poller: the pollers accept from ln's socket themselves, read the request
// head, and for a plain GET {prefix}{name} upgrade that the Handler accepts they write the
// 101 response with the greeting and register the socket for reading, all on the poller
// goroutine. Every other connection (other routes, refusals, anything unusual) is handed,
// with the bytes already read replayed first, to whoever calls Accept on the returned
// listener: http.Server, whose route for the upgrade calls Upgrade. Use it for plain TCP
// only; where epoll is unavailable ln is returned unchanged.
func (s *Server) FastListener(ln net.Listener, prefix string) net.Listener {
	tl, ok := ln.(*net.TCPListener)
	if !ok || s.poller() == nil {
		return ln
	}
	rc, err := tl.SyscallConn()
	if err != nil {
		return ln
	}
	fd := -1
	_ = rc.Control(func(lfd uintptr) {
		fd, _ = unix.FcntlInt(lfd, unix.F_DUPFD_CLOEXEC, 0)
	})
	if fd < 0 {
		return ln
	}
	// TCP_DEFER_ACCEPT: the kernel queues a connection once its first bytes (the request
	// head) arrived, so accept is followed by a read that finds them instead of an EAGAIN,
	// an epoll wake-up and a second read. Every client of this port speaks first.
	_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_DEFER_ACCEPT, int(handshakeTimeout/time.Second))
	a := &acceptor{srv: s, prefix: prefix, fd: fd, addr: ln.Addr(), conns: make(chan net.Conn, 64), done: make(chan struct{})}
	// Our duplicate must be the only descriptor of the socket: epoll drops a registration
	// only when the last one closes, and Go's poller must not accept from it either.
	_ = ln.Close()
	s.pollers.acc.Store(a)
	for _, p := range s.pollers.all {
		p.acc.Store(a)
		// EPOLLEXCLUSIVE: a new connection wakes one idle poller, not all of them.
		ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLEXCLUSIVE, Fd: int32(fd)}
		if err := unix.EpollCtl(p.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
			p.acc.Store(nil)
			s.log.Warn("fast accept unavailable on a poller", "error", err)
		}
	}
	return a
}

// acceptor is the listening socket shared by the pollers and the net.Listener that
// http.Server serves the connections the fast path does not take.
type acceptor struct {
	srv    *Server
	prefix string
	addr   net.Addr

	mu     sync.RWMutex // held shared around accept4, exclusively to close fd
	fd     int
	closed bool

	conns     chan net.Conn
	done      chan struct{}
	closeOnce sync.Once
}

func (a *acceptor) Accept() (net.Conn, error) {
	select {
	case c := <-a.conns:
		return c, nil
	case <-a.done:
		return nil, net.ErrClosed
	}
}

func (a *acceptor) Addr() net.Addr { return a.addr }

// Close stops accepting (the kernel drops the socket from every epoll set with its last
// descriptor) and closes the connections nobody has taken yet.
func (a *acceptor) Close() error {
	a.closeOnce.Do(func() {
		a.mu.Lock()
		a.closed = true
		_ = unix.Close(a.fd)
		a.mu.Unlock()
		for _, p := range a.srv.pollers.all {
			p.acc.CompareAndSwap(a, nil)
		}
		close(a.done)
		for {
			select {
			case c := <-a.conns:
				_ = c.Close()
			default:
				return
			}
		}
	})
	return nil
}

// handOff keeps the listener served once the pollers have stopped (Stop): a goroutine
// accepts through Go's poller and hands everything to http.Server (a draining Handler
// refuses WebSocket clients there) until the listener is closed.
func (a *acceptor) handOff() {
	a.mu.RLock()
	nfd := -1
	if !a.closed {
		nfd, _ = unix.FcntlInt(uintptr(a.fd), unix.F_DUPFD_CLOEXEC, 0)
	}
	a.mu.RUnlock()
	if nfd < 0 {
		return
	}
	f := os.NewFile(uintptr(nfd), "")
	ln, err := net.FileListener(f)
	_ = f.Close()
	if err != nil {
		return
	}
	go func() {
		<-a.done
		_ = ln.Close()
	}()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				select {
				case <-a.done:
					return
				case <-time.After(5 * time.Millisecond): // EMFILE and the like
					continue
				}
			}
			a.deliver(c)
		}
	}()
}

// deliver queues a connection for http.Server without ever blocking the poller.
func (a *acceptor) deliver(c net.Conn) {
	select {
	case a.conns <- c:
		return
	case <-a.done:
		_ = c.Close()
		return
	default:
	}
	go func() {
		select {
		case a.conns <- c:
		case <-a.done:
			_ = c.Close()
		}
	}()
}

// handshake is a connection whose request head has not fully arrived: it waits in its
// poller's epoll set, already registered as it will be once upgraded.
type handshake struct {
	buf      []byte // the head so far
	deadline int64  // unix nanoseconds
}

// accept takes up to acceptBatch new connections and starts each one's handshake.
func (p *poller) accept(a *acceptor) {
	for range acceptBatch {
		a.mu.RLock()
		if a.closed {
			a.mu.RUnlock()
			return
		}
		// The raw call without an address: unix.Accept4 decodes the peer's address and for
		// that asks the listener's protocol with a getsockopt on every call.
		fd, _, errno := unix.Syscall6(unix.SYS_ACCEPT4, uintptr(a.fd), 0, 0, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0, 0)
		a.mu.RUnlock()
		switch errno {
		case 0:
			// As Go's accept does: without it Nagle holds back every small frame that
			// follows an unacknowledged one. (Inheriting it from the listener works for
			// plain TCP but not from an MPTCP listener, Go's default since 1.24.)
			_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
			p.startHandshake(a, int(fd))
		case unix.EINTR, unix.ECONNABORTED:
		case unix.EMFILE, unix.ENFILE, unix.ENOBUFS, unix.ENOMEM:
			// Out of descriptors: stop listening for a moment instead of spinning on a
			// listener that stays readable (http.Server backs off the same way).
			_ = unix.EpollCtl(p.epfd, unix.EPOLL_CTL_DEL, a.fd, nil)
			p.acceptPaused = time.Now().Add(100 * time.Millisecond).UnixNano()
			a.srv.log.Warn("accept failed; pausing", "error", errno)
			return
		default:
			return // EAGAIN: nothing left
		}
	}
}

// resumeAccept re-registers the listener after a pause.
func (p *poller) resumeAccept() {
	a := p.acc.Load()
	p.acceptPaused = 0
	if a == nil {
		return
	}
	a.mu.RLock()
	if !a.closed {
		ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLEXCLUSIVE, Fd: int32(a.fd)}
		_ = unix.EpollCtl(p.epfd, unix.EPOLL_CTL_ADD, a.fd, &ev)
	}
	a.mu.RUnlock()
}

// startHandshake reads what the client sent; usually the whole head is there already.
func (p *poller) startHandshake(a *acceptor, fd int) {
	n, err := readRetry(fd, p.buf)
	if err == unix.EAGAIN {
		ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP, Fd: int32(fd)}
		if unix.EpollCtl(p.epfd, unix.EPOLL_CTL_ADD, fd, &ev) != nil {
			_ = unix.Close(fd)
			return
		}
		p.hs[int32(fd)] = &handshake{deadline: time.Now().Add(handshakeTimeout).UnixNano()}
		return
	}
	if err != nil || n <= 0 {
		_ = unix.Close(fd) // gone before saying anything: net/http would just close too
		return
	}
	p.headData(a, fd, nil, p.buf[:n])
}

// handshakeRead continues a handshake whose socket became readable.
func (p *poller) handshakeRead(a *acceptor, fd int, h *handshake) {
	n, err := readRetry(fd, p.buf)
	switch {
	case err == unix.EAGAIN:
		return
	case err != nil || n <= 0:
		if len(h.buf) == 0 {
			delete(p.hs, int32(fd))
			_ = unix.Close(fd)
			return
		}
		p.fallback(a, fd, h, h.buf) // net/http answers a truncated head as it always did
		return
	}
	p.headData(a, fd, h, p.buf[:n])
}

func readRetry(fd int, b []byte) (int, error) {
	for {
		n, err := unix.Read(fd, b)
		if err != unix.EINTR {
			return n, err
		}
	}
}

// headData parses the head so far; h is nil while the socket is not registered yet and
// data then points into the poller's buffer.
func (p *poller) headData(a *acceptor, fd int, h *handshake, data []byte) {
	buf := data
	if h != nil && len(h.buf) > 0 {
		h.buf = append(h.buf, data...)
		buf = h.buf
	}
	head, res := parseUpgradeHead(buf, a.prefix)
	switch res {
	case headIncomplete:
		if h == nil {
			ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP, Fd: int32(fd)}
			if unix.EpollCtl(p.epfd, unix.EPOLL_CTL_ADD, fd, &ev) != nil {
				_ = unix.Close(fd)
				return
			}
			h = &handshake{deadline: time.Now().Add(handshakeTimeout).UnixNano()}
			p.hs[int32(fd)] = h
		}
		if len(h.buf) == 0 {
			h.buf = append(make([]byte, 0, max(2*len(data), 512)), data...)
		}
	case headUpgrade:
		if !p.upgrade(a, fd, h != nil, &head) {
			p.fallback(a, fd, h, buf)
		}
	default:
		p.fallback(a, fd, h, buf)
	}
}

// upgrade asks the Handler and upgrades the connection as Upgrade does. It reports false,
// having changed nothing, when the connection is refused: the portable path then asks
// again and refuses it after its own 101.
func (p *poller) upgrade(a *acceptor, fd int, registered bool, head *upgradeHead) bool {
	s := a.srv
	req := &p.req // reused: a Request per connection would escape to the heap
	*req = Request{Name: head.Name, Query: head.Query, Origin: head.Origin, Tentative: true}
	out := append(p.out[:0], "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: "...)
	out = appendAcceptKey(out, head.Key)
	deflate := head.Deflate && s.deflater != nil
	if deflate {
		out = append(out, "\r\n"+extensionLine[:len(extensionLine)-2]...)
	}
	out = append(out, "\r\n\r\n"...)
	d := s.handler.Accept(req, out)
	*req = Request{}
	if d.Session == nil {
		return false
	}
	if bytes.HasPrefix(d.Greeting, out) {
		out = d.Greeting // the 101 with the greeting appended, as Accept is asked to
	} else {
		out = append(out, d.Greeting...)
	}
	p.out = out[:0]
	if registered {
		delete(p.hs, int32(fd))
	}
	// A fresh socket's send buffer takes these few hundred bytes whole; anything else
	// means the peer is already gone.
	n, err := unix.Write(fd, out)
	if err != nil || n != len(out) {
		_ = unix.Close(fd)
		d.Session.OnClose(CauseHandshake)
		return true
	}
	c := s.newConn(&d)
	if deflate {
		c.useDeflate()
	}
	c.fdc.fd = fd
	c.netConn, c.raw = &c.fdc, (*fdRaw)(&c.fdc)
	s.register(c, p, registered)
	return true
}

// fallback hands the connection to net/http with the bytes read so far replayed first.
func (p *poller) fallback(a *acceptor, fd int, h *handshake, data []byte) {
	if h != nil {
		delete(p.hs, int32(fd))
		// The duplicate made below keeps the socket open, so closing fd would not
		// remove it from the epoll set.
		_ = unix.EpollCtl(p.epfd, unix.EPOLL_CTL_DEL, fd, nil)
	}
	f := os.NewFile(uintptr(fd), "")
	nc, err := net.FileConn(f) // a duplicate in Go's poller
	_ = f.Close()
	if err != nil {
		return
	}
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		_ = nc.Close()
		return
	}
	a.deliver(&replayConn{TCPConn: tc, pending: append([]byte(nil), data...)})
}

// expireHandshakes closes connections that have not sent a whole head in time.
func (p *poller) expireHandshakes(now int64) {
	for fd, h := range p.hs {
		if now >= h.deadline {
			delete(p.hs, fd)
			_ = unix.Close(int(fd)) // not duplicated: this also leaves the epoll set
		}
	}
}

// replayConn is a connection handed to net/http: it reads the bytes the fast path already
// consumed before the socket's own. Only http.Server reads it, and it has read them all
// before any handler can hijack the connection.
type replayConn struct {
	*net.TCPConn
	mu      sync.Mutex // guards pending: CloseWrite may run during a background Read
	pending []byte
}

func (r *replayConn) Read(b []byte) (int, error) {
	r.mu.Lock()
	if len(r.pending) > 0 {
		n := copy(b, r.pending)
		r.pending = r.pending[n:]
		if len(r.pending) == 0 {
			r.pending = nil
		}
		r.mu.Unlock()
		return n, nil
	}
	r.mu.Unlock()
	return r.TCPConn.Read(b)
}

// CloseWrite drops the replay bytes not read: net/http half-closes a connection it will not
// read again and lingers on it for a moment, and those bytes (up to pollReadSize of an
// unread body) must not stay pinned meanwhile. net/http's background read may still be in
// Read, hence the lock.
func (r *replayConn) CloseWrite() error {
	r.mu.Lock()
	r.pending = nil
	r.mu.Unlock()
	return r.TCPConn.CloseWrite()
}

// fdConn is the net.Conn and syscall.RawConn of a socket upgraded by the fast path: a
// bare non-blocking descriptor that pollers read and flushers write. The blocking writes
// of the slow path (writeLoop, for a peer whose buffer is full) go through a duplicate in
// Go's poller made when needed and closed when that writer is done (releaseSlow), so only
// a socket being written by the slow path holds a second descriptor.
type fdConn struct {
	mu     sync.RWMutex // held shared while fd is used, exclusively to close it
	fd     int
	closed bool
	slow   net.Conn  // the duplicate, while the slow path needs it
	wdl    time.Time // write deadline for slow
}

var _ net.Conn = (*fdConn)(nil)

// errClosedFD is returned by operations on a closed fdConn.
var errClosedFD = net.ErrClosed

// use runs f on the descriptor unless it is closed.
func (f *fdConn) use(fn func(fd uintptr)) error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.closed {
		return errClosedFD
	}
	fn(uintptr(f.fd))
	return nil
}

// rawCall is RawConn's Read and Write: it calls fn once, as every caller's fn makes one
// non-blocking attempt and returns true (it never asks to wait for readiness).
func (f *fdConn) rawCall(fn func(fd uintptr) bool) error {
	return f.use(func(fd uintptr) { fn(fd) })
}

// slowConn returns the blocking duplicate, making it on first use.
func (f *fdConn) slowConn() (net.Conn, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, errClosedFD
	}
	if f.slow != nil {
		return f.slow, nil
	}
	nfd, err := unix.FcntlInt(uintptr(f.fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	file := os.NewFile(uintptr(nfd), "")
	nc, err := net.FileConn(file)
	_ = file.Close()
	if err != nil {
		return nil, err
	}
	_ = nc.SetWriteDeadline(f.wdl)
	f.slow = nc
	if testHookSlowConn != nil {
		testHookSlowConn(f)
	}
	return nc, nil
}

// testHookSlowConn, set only by tests, is told of every duplicate slowConn makes (under
// f.mu): which sockets the slow path wrote, now that their duplicates do not stay.
var testHookSlowConn func(f *fdConn)

// releaseSlow closes the blocking duplicate: the slow path's writer, which alone uses it,
// is done. Go's poller deregisters and closes the duplicate's number only; the socket stays
// open through fd. The next slowConn makes a new duplicate with the deadline then set.
func (f *fdConn) releaseSlow() {
	f.mu.Lock()
	slow := f.slow
	f.slow = nil
	f.mu.Unlock()
	if slow != nil {
		_ = slow.Close()
	}
}

func (f *fdConn) Write(b []byte) (int, error) {
	nc, err := f.slowConn()
	if err != nil {
		return 0, err
	}
	return nc.Write(b)
}

func (f *fdConn) Read(b []byte) (int, error) {
	nc, err := f.slowConn()
	if err != nil {
		return 0, err
	}
	return nc.Read(b)
}

func (f *fdConn) Close() error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return errClosedFD
	}
	f.closed = true
	err := unix.Close(f.fd)
	slow := f.slow
	f.mu.Unlock()
	if slow != nil {
		_ = slow.Close() // also wakes a writer blocked on it
	}
	return err
}

// CloseWrite half-closes, as (*net.TCPConn).CloseWrite does.
func (f *fdConn) CloseWrite() error {
	var err error
	if uerr := f.use(func(fd uintptr) { err = unix.Shutdown(int(fd), unix.SHUT_WR) }); uerr != nil {
		return uerr
	}
	return err
}

func (f *fdConn) SetWriteDeadline(t time.Time) error {
	f.mu.Lock()
	f.wdl = t
	slow := f.slow
	f.mu.Unlock()
	if slow != nil {
		return slow.SetWriteDeadline(t)
	}
	return nil
}

// SetReadDeadline is a no-op: a polled socket is never read with a blocking read.
func (f *fdConn) SetReadDeadline(time.Time) error { return nil }
func (f *fdConn) SetDeadline(t time.Time) error   { return f.SetWriteDeadline(t) }
func (f *fdConn) LocalAddr() net.Addr             { return &net.TCPAddr{} }
func (f *fdConn) RemoteAddr() net.Addr            { return &net.TCPAddr{} }

// fdRaw is fdConn seen as a syscall.RawConn (its own Read and Write are net.Conn's).
type fdRaw fdConn

func (r *fdRaw) Control(fn func(fd uintptr)) error    { return (*fdConn)(r).use(fn) }
func (r *fdRaw) Read(fn func(fd uintptr) bool) error  { return (*fdConn)(r).rawCall(fn) }
func (r *fdRaw) Write(fn func(fd uintptr) bool) error { return (*fdConn)(r).rawCall(fn) }
