package ws

import "net"

// Barrier holds back every frame sent to its connection after it was opened until it
// is released with the frames that must go first (for Pusher: subscription_succeeded
// and a cache replay before the channel's events). The held frames live in the barrier, not in the
// queue, so nothing is ever inserted into the queue: the writer only ever takes whole
// frames from its front, and a partial write, a barrier and a close cannot interleave in
// a way that splits a frame. Frames queued before the barrier keep flowing meanwhile.
type Barrier struct {
	c        *Conn
	frames   net.Buffers // what release puts first
	after    net.Buffers // frames sent while this was the newest open barrier
	released bool
}

// Hold opens a barrier. Barriers nest in order: frames sent while several are open
// wait behind the newest, and a barrier's frames go out only once every older barrier
// is released, so the stream reads [before b1][b1's frames][sent during b1][b2's frames]...
// Every barrier must be released (a closing connection drops them).
func (c *Conn) Hold() *Barrier {
	b := &Barrier{c: c}
	c.mu.Lock()
	if c.state == stateOpen {
		c.barriers = append(c.barriers, b)
	}
	c.mu.Unlock()
	return b
}

// Release sends frames, then what the barrier held, as soon as no older barrier is open.
// It is a no-op on a closing connection. Safe from any goroutine; call it once.
func (b *Barrier) Release(frames ...[]byte) {
	c := b.c
	c.compressAll(frames)
	c.mu.Lock()
	if c.state != stateOpen || b.released {
		c.mu.Unlock()
		return
	}
	b.released = true
	b.frames = frames
	for _, f := range frames {
		c.heldBytes += len(f)
	}
	c.drainBarriersLocked()
	k := c.kickLocked()
	c.mu.Unlock()
	c.doKick(k)
}

// drainBarriersLocked moves every released barrier at the head of the list to the queue.
func (c *Conn) drainBarriersLocked() {
	i := 0
	for ; i < len(c.barriers) && c.barriers[i].released; i++ {
		b := c.barriers[i]
		for _, part := range [2]net.Buffers{b.frames, b.after} {
			for _, f := range part {
				c.queue = append(c.queue, f)
				c.heldBytes -= len(f)
				c.queuedBytes += len(f)
			}
		}
		b.frames, b.after = nil, nil
		c.barriers[i] = nil
	}
	if i == len(c.barriers) {
		c.barriers = c.barriers[:0]
	} else if i > 0 {
		c.barriers = append(c.barriers[:0], c.barriers[i:]...)
	}
}

// dropBarriersLocked is for a connection that starts closing: released barriers at the
// head still go out in order; an unreleased one and everything behind it are dropped, as
// their frames would arrive before the subscription_succeeded they wait for.
func (c *Conn) dropBarriersLocked() {
	c.drainBarriersLocked()
	for i, b := range c.barriers {
		b.frames, b.after = nil, nil
		c.barriers[i] = nil
	}
	c.barriers = nil
	c.heldBytes = 0
}
