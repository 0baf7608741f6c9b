package pusher

// Reverb's message rate limit (apps[].rate_limiting), as released Laravel Reverb 1.9.0 to
// 1.10.2 applies it in src/Protocols/Pusher/Server.php (message, ensureWithinRateLimit) with
// Laravel's Illuminate\Cache\RateLimiter over the array store:
//
//   - Every data message a connection sends is an attempt, checked before it is parsed:
//     pusher:ping, pusher:pong, subscribes, client events, and messages that turn out to be
//     invalid. Control frames (WebSocket ping, pong, close) are not. A message over
//     max_message_size never becomes one (the transport closes 1009 first).
//   - The limit is per connection, on the node that holds it: at most max_attempts
//     messages in a window of decay_seconds that starts with the first message after the
//     previous window ended (a fixed window; RateLimiter::tooManyAttempts is checked before
//     RateLimiter::increment, so a refused message is not counted and does not extend it).
//   - Over the limit, without terminate_on_limit, the message is dropped and answered with
//     pusher:error {"code":4301,"message":"Rate limit exceeded"}
//     (src/Protocols/Pusher/Exceptions/RateLimitExceeded.php); the connection stays open.
//   - With terminate_on_limit, the first message over the limit ends the connection
//     (Connection::terminate, React's end()): what was queued before still goes out, then
//     the TCP stream ends without a WebSocket close frame. The pusher:error Reverb's handler
//     sends afterwards is written to a stream already ended and never reaches the client, so
//     none is sent here either. The client sees an abnormal close (1006) and pusher-js
//     reconnects.
//
// It runs before, and independently of, reverbgo's own client_event_rate_limit (client
// events per second, 4301 "Client event rate limit exceeded"): a message Reverb's limit
// refuses is not counted by the other.

// Reverb's error for a message over the limit.
const (
	codeRateLimited    = 4301
	messageRateLimited = "Rate limit exceeded"
)

// messageWindow is one connection's window (reader goroutine only): when it ends, unix
// nanoseconds, and the messages counted in it.
type messageWindow struct {
	end   int64
	count int
}

// withinRateLimit counts one message against the app's rate_limiting and reports whether it
// may be handled; over the limit it answers or ends the connection as Reverb does. Called
// only when the limit is enabled: a disabled one costs the caller one field test.
func (c *Conn) withinRateLimit() bool {
	rl := &c.app.cfg().RateLimiting
	now := c.srv.now().UnixNano()
	w := &c.msgWindow
	if now < w.end && w.count >= rl.MaxAttempts {
		c.app.stats.messagesLimited.Add(1)
		if rl.TerminateOnLimit {
			c.reason.CompareAndSwap(int32(CloseNone), int32(CloseRateLimited))
			c.ws.End()
		} else {
			c.sendError(ErrRateLimited)
		}
		return false
	}
	if now >= w.end {
		w.end, w.count = now+int64(rl.DecaySeconds)*1e9, 0
	}
	w.count++
	return true
}
