//go:build !unix

package ws

import (
	"errors"
	"net"
	"syscall"
)

// haveWritev is false here: every connection uses the blocking writer goroutine.
const haveWritev = false

func (f *flusher) writev(syscall.RawConn, net.Buffers) (net.Buffers, error) {
	return nil, errors.New("ws: writev is not available on this platform")
}

type iovecs = []struct{}

func newIovecs() iovecs { return nil }
