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
// all went out) and a non-retryable error.
func (f *flusher) writev(rc syscall.RawConn, bufs net.Buffers) (net.Buffers, error) {
	var werr error
	err := rc.Write(func(fd uintptr) bool {
		for len(bufs) > 0 {
			iov := f.iov[:0]
			for _, b := range bufs {
				if len(iov) == maxIovecs {
					break
				}
				if len(b) == 0 {
					continue
				}
				iov = append(iov, syscall.Iovec{Base: &b[0], Len: uint64(len(b))})
			}
			if len(iov) == 0 {
				bufs = nil
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
				werr = errno
				return true
			}
			bufs = consume(bufs, int(n))
		}
		return true
	})
	if err != nil {
		return bufs, err
	}
	if len(bufs) == 0 {
		bufs = nil
	}
	return bufs, werr
}

// iovecs is the flusher's reusable writev argument.
type iovecs = []syscall.Iovec

func newIovecs() iovecs { return make(iovecs, 0, maxIovecs) }
