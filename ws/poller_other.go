//go:build !linux

package ws

// pollerSet is empty where there is no epoll: every connection has a reader goroutine.
type pollerSet struct{}

// poller is never made here: poller() answers nil and register starts readLoop.
type poller struct{}

func (s *Server) poller() *poller { return nil }

func (p *poller) add(*Conn, bool) bool { return false }
func (p *poller) forget(*Conn)         {}

func (s *Server) stopPollers() {}

// dropPolled and endPolledRead are never reached: no connection is polled.
func (c *Conn) dropPolled()    {}
func (c *Conn) endPolledRead() {}
