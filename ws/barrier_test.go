package ws

import (
	"net"
	"strings"
	"testing"
)

// Barriers nest, release in any order, and a close drops what waits behind an unreleased
// one; the queue only ever grows at its end.
func TestWriteBarrierOrder(t *testing.T) {
	f := func(s string) []byte { return []byte(s) }
	tests := []struct {
		name string
		run  func(c *Conn)
		want string
	}{
		{"no barrier", func(c *Conn) { c.WritePreframed(f("a")); c.WritePreframed(f("b")) }, "a b"},
		{"held until released", func(c *Conn) {
			c.WritePreframed(f("pre"))
			b := c.Hold()
			c.WritePreframed(f("ev"))
			b.Release(f("ok"))
			c.WritePreframed(f("post"))
		}, "pre ok ev post"},
		{"nested, released inner first", func(c *Conn) {
			b1 := c.Hold()
			c.WritePreframed(f("e1"))
			b2 := c.Hold()
			c.WritePreframed(f("e2"))
			b2.Release(f("s2"))
			c.WritePreframed(f("e3"))
			b1.Release(f("s1"))
		}, "s1 e1 s2 e2 e3"},
		{"close with an open barrier", func(c *Conn) {
			c.WritePreframed(f("pre"))
			b1 := c.Hold()
			c.WritePreframed(f("e1"))
			b1.Release(f("s1"))
			b2 := c.Hold()
			c.WritePreframed(f("e2"))
			c.Close(4200, "bye", f("last"))
			b2.Release(f("late"))
			c.WritePreframed(f("after"))
		}, "pre s1 e1 last close"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &Conn{srv: &Server{maxQueue: 1 << 20}, writer: writerBusy} // no writer runs
			tt.run(c)
			var got []string
			for _, b := range c.queue {
				if len(b) > 0 && b[0] == 0x80|OpClose {
					got = append(got, "close")
				} else {
					got = append(got, string(b))
				}
			}
			if strings.Join(got, " ") != tt.want {
				t.Fatalf("queue %q, want %q", got, tt.want)
			}
			if c.heldBytes != 0 || len(c.barriers) != 0 {
				t.Fatalf("held %d bytes in %d barriers after every release", c.heldBytes, len(c.barriers))
			}
		})
	}
}

// A frame that would pass the byte bound drops the connection (CauseOverflow) instead of
// blocking; held frames count against the bound too.
func TestWriteQueueBound(t *testing.T) {
	c := &Conn{srv: &Server{maxQueue: 10}, writer: writerBusy, netConn: nopConn{}}
	b := c.Hold()
	if !c.WritePreframed(make([]byte, 6)) {
		t.Fatal("first frame refused")
	}
	if c.Buffered() != 6 {
		t.Fatalf("Buffered %d, want 6", c.Buffered())
	}
	if c.WritePreframed(make([]byte, 5)) {
		t.Fatal("frame over the bound taken")
	}
	b.Release()
	if !c.Closing() || c.cause != CauseOverflow || len(c.queue) != 0 {
		t.Fatalf("closing %v cause %d queue %d after overflow", c.Closing(), c.cause, len(c.queue))
	}
}

// nopConn is a net.Conn that is never used but may be closed.
type nopConn struct{ net.Conn }

func (nopConn) Close() error { return nil }
