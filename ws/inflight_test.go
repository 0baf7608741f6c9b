package ws

import (
	"net"
	"testing"

	"github.com/reverbgo/reverbgo/internal/testutil"
)

// The byte bound counts what a blocking write has in flight: a peer that stops reading
// holds the slow-path writer inside its batch, and what is queued meanwhile may only fill
// the bound up, not double it. (The writer used to zero the count as it took the batch.)
func TestWriteQueueBoundCountsBytesInFlight(t *testing.T) {
	nc, peer := net.Pipe() // a Write blocks until the peer reads: it never does
	t.Cleanup(func() { _ = peer.Close() })
	c := &Conn{srv: &Server{maxQueue: 1000}, netConn: nc} // no raw socket: the blocking writer
	if !c.WritePreframed(make([]byte, 600)) {
		t.Fatal("first frame refused")
	}
	testutil.WaitFor(t, "the writer took the batch", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.queue) == 0
	})
	if got := c.Buffered(); got != 600 {
		t.Fatalf("Buffered %d with a 600-byte write in flight", got)
	}
	if c.WritePreframed(make([]byte, 600)) {
		t.Fatal("a frame over the bound was taken: 1,200 bytes held for a bound of 1,000")
	}
	c.mu.Lock()
	cause := c.cause
	c.mu.Unlock()
	if !c.Closing() || cause != CauseOverflow {
		t.Fatalf("closing %v cause %d after the overflow", c.Closing(), cause)
	}
}
