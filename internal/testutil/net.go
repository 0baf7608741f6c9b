package testutil

import (
	"net"
	"testing"
)

// FreeAddr returns a 127.0.0.1 host:port that nothing listened on a moment ago: the kernel
// picked the port, and the listener was closed. For tests of a refused connection, or of a
// server that starts listening there later (another process may take the port meanwhile, so
// a test must not depend on it staying free for long).
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}
