package ws

// End ends the connection the way a TCP stream ends, without a WebSocket close frame: what
// is already queued goes out, frames held by an open barrier are dropped, then the write
// side is shut (FIN) and the socket is dropped once the peer closes or the grace passes.
// The peer sees the connection end without a close frame (1006 in a browser). This is how
// Laravel Reverb terminates a connection (React's ConnectionInterface::end, no close frame);
// pusher-js reconnects after it, which a 4xxx close code could forbid. Safe from any
// goroutine and idempotent; a no-op once Close or Abort ran.
func (c *Conn) End() {
	c.mu.Lock()
	if c.state != stateOpen {
		c.mu.Unlock()
		return
	}
	c.state, c.cause = stateClosing, CauseLocal // closing without a close frame queued
	c.dropBarriersLocked()
	k := c.kickLocked()
	c.mu.Unlock()
	c.doKick(k)
}
