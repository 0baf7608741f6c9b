//go:build unix && !linux

package ws

import (
	"net"
	"testing"
)

func useTestRing(t *testing.T, _ *flusher, _ uint32) { t.Skip("io_uring is Linux only") }

func fdConnOf(t *testing.T, _ net.Conn) *Conn {
	t.Skip("bare descriptors are the fast listener's, Linux only")
	return nil
}
