//go:build linux

package ws

import (
	"fmt"
	"net"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// uringIovecs is the iovec slab of one submission: every SQE of a chunk points into it, so
// a chunk ends when the next socket's frames would not fit. One socket's SQE carries at
// most maxIovecs frames (the kernel's UIO_MAXIOV), so any socket fits an empty slab.
const uringIovecs = 4 * maxIovecs

// uringWriter is a flusher's io_uring write path: a round's writes become one SENDMSG SQE
// per socket, all submitted and reaped in one io_uring_enter (per chunk of the ring's
// size). Each socket's write is takeFlush and endFlush around it, exactly as the writev
// path (Conn.flush): a short write or -EAGAIN leaves the rest to the slow path, an error
// drops the connection.
//
// Everything an SQE points at is owned here and reused, so a round allocates nothing:
// iov and msgs are filled for a chunk, stay put (Go's heap does not move) until its
// completions are reaped, and are cleared after, so no frame is kept alive.
type uringWriter struct {
	ring *ring
	iov  []unix.Iovec // the chunk's iovecs; never grown past its capacity (SQEs point into it)
	msgs []unix.Msghdr
	pend []uringWrite // the chunk's writes; an SQE's user_data is its index here
	err  error        // a failed io_uring_enter: the ring is given up after this round
	// refused is set when a completion refused the operation itself (ringRefused): the
	// rest of the round is written with writev and the ring is given up after it.
	refused bool
}

// uringWrite is one socket's write in a chunk.
type uringWrite struct {
	c      *Conn
	fdc    *fdConn     // held (fdConn.hold) from before the SQE is placed until reaped
	batch  net.Buffers // what takeFlush returned
	frames int         // how many of batch's frames the SQE covers
	n      int         // bytes the SQE covers
	res    int32       // the completion's result: bytes written or -errno
	done   bool        // res is set (false: never submitted, see submit)
}

// setupRing makes a flusher's ring (a variable: tests stand in a kernel that refuses).
var setupRing = newRing

// useRing gives f an io_uring of entries SQEs.
func (f *flusher) useRing(entries uint32) error {
	r, err := setupRing(entries)
	if err != nil {
		return err
	}
	f.ur = &uringWriter{
		ring: r,
		iov:  make([]unix.Iovec, 0, uringIovecs),
		msgs: make([]unix.Msghdr, r.entries),
		pend: make([]uringWrite, 0, r.entries),
	}
	return nil
}

// closeRing releases f's ring when its goroutine ends; nothing is in flight between rounds.
func (f *flusher) closeRing() {
	if f.ur != nil {
		f.ur.ring.close()
		f.ur = nil
	}
}

// round writes every connection of a flusher round.
func (u *uringWriter) round(f *flusher, round []*Conn) {
	for _, c := range round {
		fr, ok := c.raw.(*fdRaw)
		if !ok || u.err != nil || u.refused {
			// A socket of Go's poller (upgraded through net/http): its descriptor can only
			// be held inside a RawConn callback, not across the enter. It keeps writev (as
			// does every socket once the ring failed or was refused).
			c.flush(f)
			continue
		}
		batch := c.takeFlush()
		if batch == nil {
			continue
		}
		ownAdd(&f.stats.frames, uint64(len(batch)))
		frames, niov := 0, 0
		for _, b := range batch {
			if niov == maxIovecs {
				break
			}
			frames++
			if len(b) > 0 {
				niov++
			}
		}
		if niov == 0 { // only empty frames: nothing to write
			c.endFlush(batch, nil, nil)
			continue
		}
		if len(u.pend) == len(u.msgs) || len(u.iov)+niov > cap(u.iov) {
			u.submit(f)
		}
		fdc := (*fdConn)(fr)
		fd, ok := fdc.hold()
		if !ok {
			c.endFlush(batch, batch, errClosedFD) // as writev through a closed fdRaw
			continue
		}
		start, n := len(u.iov), 0
		for _, b := range batch[:frames] {
			if len(b) > 0 {
				u.iov = append(u.iov, unix.Iovec{Base: &b[0], Len: uint64(len(b))})
				n += len(b)
			}
		}
		i := len(u.pend)
		m := &u.msgs[i]
		m.Iov = &u.iov[start]
		m.SetIovlen(niov)
		u.pend = append(u.pend, uringWrite{c: c, fdc: fdc, batch: batch, frames: frames, n: n})
		if err := u.ring.sendmsg(fd, m, uint64(i)); err != nil {
			// Cannot happen: every chunk is reaped whole and has at most ring-size SQEs.
			panic("ws: " + err.Error())
		}
	}
	if len(u.pend) > 0 {
		u.submit(f)
	}
	if u.err != nil {
		f.path.fallback(f.log, fmt.Errorf("io_uring_enter failed: %w", u.err))
	}
	if u.err != nil || u.refused {
		f.closeRing()
	}
}

// submit submits the chunk's SQEs and reaps all their completions, then finishes each
// write. Every descriptor stays held until the last completion is reaped: the kernel
// resolves an SQE's fd number when it consumes it, and an fdConn cannot close (and its
// number be reused) while held. They are released before any write is finished, since
// finishing may abort, which takes the same lock.
func (u *uringWriter) submit(f *flusher) {
	r := u.ring
	n := uint32(len(u.pend))
	reaped := uint32(0)
	for reaped < n && u.err == nil {
		err := r.enter(n - reaped)
		ownAdd(&f.stats.enters, 1)
		got := uint32(0)
		for {
			ud, res, ok := r.pop()
			if !ok {
				break
			}
			w := &u.pend[ud]
			w.res, w.done = res, true
			got++
		}
		reaped += got
		switch err {
		case nil, syscall.EINTR:
		case syscall.EAGAIN, syscall.EBUSY:
			// The kernel is short of memory for requests (EAGAIN) or of CQ room (EBUSY,
			// reaped above): the SQEs are still published, so simply enter again.
			if got == 0 {
				runtime.Gosched()
			}
		default:
			// EBADF, EFAULT, EINVAL: the ring itself is broken and submitted nothing this
			// call. What the kernel never consumed is taken back and written with
			// writev; what it did consume must be reaped first, and without a working
			// enter it cannot be: the descriptors and iovecs could never be released.
			if inFlight := n - reaped - r.unsubmitted(); inFlight > 0 {
				panic(fmt.Sprintf("ws: io_uring_enter: %v with %d writes in flight", err, inFlight))
			}
			r.discard()
			u.err = err
		}
	}
	ownAdd(&f.stats.uring, uint64(reaped))
	for i := range u.pend {
		u.pend[i].fdc.release()
	}
	for i := range u.pend {
		u.finish(f, &u.pend[i])
	}
	clear(u.iov) // no stale pointers into frames
	u.iov = u.iov[:0]
	clear(u.msgs[:n])
	clear(u.pend)
	u.pend = u.pend[:0]
}

// finish is endFlush for one write, given its completion.
func (u *uringWriter) finish(f *flusher, w *uringWrite) {
	c, batch := w.c, w.batch
	if !w.done { // never submitted (a broken ring): write it the old way
		rest, err := f.writev(c.raw, batch)
		c.endFlush(batch, rest, err)
		return
	}
	if w.res < 0 {
		switch errno := syscall.Errno(-w.res); {
		case errno == syscall.EAGAIN || errno == syscall.EINTR:
			c.endFlush(batch, batch, nil) // nothing written: all of it to the slow path
		case ringRefused(errno):
			// The ring cannot do this (nothing was written): not the socket's fault. Its
			// frames go out with writev, first and in order, and so does every write of
			// every flusher from now on; no connection is closed.
			u.refused = true
			f.path.fallback(f.log, fmt.Errorf("SENDMSG completed with %w", errno))
			rest, err := f.writev(c.raw, batch)
			c.endFlush(batch, rest, err)
		default:
			c.endFlush(batch, nil, errno)
		}
		return
	}
	rest := consume(batch, int(w.res))
	if len(rest) == 0 {
		c.endFlush(batch, nil, nil)
		return
	}
	if int(w.res) == w.n {
		// The SQE's frames all went out and more are queued than one SQE carries (over
		// maxIovecs): the socket has room, so go on as writev would, with writev.
		rest, err := f.writev(c.raw, rest)
		c.endFlush(batch, rest, err)
		return
	}
	c.endFlush(batch, rest, nil) // a short write: the socket is full
}

// hold keeps the descriptor open until release (the shared lock Close waits for), for a
// write the kernel carries out after this returns; false if it is closed already.
func (f *fdConn) hold() (int, bool) {
	f.mu.RLock()
	if f.closed {
		f.mu.RUnlock()
		return -1, false
	}
	return f.fd, true
}

func (f *fdConn) release() { f.mu.RUnlock() }
