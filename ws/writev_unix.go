//go:build unix

package ws

import (
	"net"
	"syscall"
	"unsafe"
)

// haveWritev: the flusher's non-blocking writev is available on this platform.
const haveWritev = true

// writev writes bufs to fd without blocking. It returns what is left unwritten (nil when
// all went out) and a non-retryable error. It allocates nothing: the callback and its state
// live in the flusher, which only its own goroutine uses.
func (f *flusher) writev(rc syscall.RawConn, bufs net.Buffers) (net.Buffers, error) {
	w := &f.wv
	if w.fn == nil {
		w.fn = f.writevFD
	}
	w.bufs, w.err = bufs, nil
	err := rc.Write(w.fn)
	bufs, werr := w.bufs, w.err
	w.bufs, w.err = nil, nil // no stale references into frames
	if err != nil {
		return bufs, err
	}
	if len(bufs) == 0 {
		bufs = nil
	}
	return bufs, werr
}

// writevFD is writev's RawConn callback: it writes f.wv.bufs until done, EAGAIN or an error.
func (f *flusher) writevFD(fd uintptr) bool {
	w := &f.wv
	for len(w.bufs) > 0 {
		iov := f.iov[:0]
		for _, b := range w.bufs {
			if len(iov) == maxIovecs {
				break
			}
			if len(b) == 0 {
				continue
			}
			iov = append(iov, syscall.Iovec{Base: &b[0], Len: uint64(len(b))})
		}
		if len(iov) == 0 {
			w.bufs = nil
			break
		}
		n, _, errno := syscall.Syscall(syscall.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&iov[0])), uintptr(len(iov)))
		ownAdd(&f.stats.writev, 1)
		clear(iov) // no stale pointers into frames
		switch errno {
		case 0:
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return true
		default:
			w.err = errno
			return true
		}
		w.bufs = consume(w.bufs, int(n))
	}
	return true
}

// iovecs is the flusher's reusable writev argument.
type iovecs = []syscall.Iovec

func newIovecs() iovecs { return make(iovecs, 0, maxIovecs) }
