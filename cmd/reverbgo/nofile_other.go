//go:build !unix

package main

// openFileLimit: no RLIMIT_NOFILE here, so server.max_connections: 0 means no cap.
func openFileLimit() uint64 { return 0 }
