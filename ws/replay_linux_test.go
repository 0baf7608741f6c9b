package ws

import (
	"net"
	"testing"
)

// TestReplayConnCloseWriteDropsPending: the unread replay bytes of a fallen-back connection
// are released when net/http half-closes it, not held through its linger.
func TestReplayConnCloseWriteDropsPending(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := net.Dial("tcp", ln.Addr().String()); err == nil {
			defer c.Close()
			_, _ = c.Read(make([]byte, 1))
		}
	}()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	r := &replayConn{TCPConn: c.(*net.TCPConn), pending: make([]byte, 16<<10)}
	defer r.Close()
	if n, err := r.Read(make([]byte, 4096)); n != 4096 || err != nil {
		t.Fatalf("replayed %d, %v", n, err)
	}
	if err := r.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pending != nil {
		t.Fatalf("%d replay bytes still pinned after CloseWrite", len(r.pending))
	}
}
