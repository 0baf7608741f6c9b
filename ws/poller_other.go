//go:build !linux

package ws

// pollerSet is empty where there is no epoll: every connection has a reader goroutine.
type pollerSet struct{}

// startReader reports false: the caller starts readLoop.
func (s *Server) startReader(*Conn) bool { return false }

func (s *Server) stopPollers() {}

// dropPolled and endPolledRead are never reached: no connection is polled.
func (c *Conn) dropPolled()    {}
func (c *Conn) endPolledRead() {}
