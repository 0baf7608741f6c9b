//go:build !linux

package ws

import "net"

// FastListener returns ln: the fast upgrade path needs epoll (accept_linux.go).
func (s *Server) FastListener(ln net.Listener, prefix string) net.Listener { return ln }

// fdConn is only used on Linux.
type fdConn struct{}
