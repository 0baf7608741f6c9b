//go:build !linux

package ws

import "errors"

// ringEntries mirrors Linux's, so newFlushers reads the same everywhere.
const ringEntries = 1024

// uringWriter has no io_uring to drive here: useRing always fails and writev is used.
type uringWriter struct{}

func (f *flusher) useRing(uint32) error {
	return errors.New("io_uring is Linux only")
}

func (f *flusher) closeRing() {}

func probeURing() error { return errors.New("io_uring is Linux only") }

func (u *uringWriter) round(f *flusher, round []*Conn) {
	for _, c := range round {
		c.flush(f)
	}
}
