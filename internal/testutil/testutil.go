// Package testutil holds the test helpers that several packages' tests share, so that none
// keeps its own copy (internal/testenv is the other half: which real services a test may use).
package testutil

import (
	"bytes"
	"sync"
)

// SyncBuffer is a goroutine-safe io.Writer that collects what a logger or a server writes
// while the test reads it. The zero value is ready to use.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write implements io.Writer.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
