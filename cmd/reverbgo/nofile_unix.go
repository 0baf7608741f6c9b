//go:build unix

package main

import "syscall"

// openFileLimit is the process's soft RLIMIT_NOFILE (which Go raises to the hard limit at
// start), 0 when it cannot be read or is unlimited: server.max_connections: 0 derives the
// node's connection cap from it.
func openFileLimit() uint64 {
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) != nil {
		return 0
	}
	if c := uint64(l.Cur); c != ^uint64(0) { // RLIM_INFINITY
		return c
	}
	return 0
}
