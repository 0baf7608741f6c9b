package main

import (
	"fmt"

	"github.com/reverbgo/reverbgo/config"
	"github.com/reverbgo/reverbgo/ws"
)

// requireIOUring refuses to start a node whose server.io_uring is true when the kernel does
// not prove it can write with io_uring (ws.ProbeIOUring): the operator asked for it by
// name, so running on writev instead would hide that. Absent, the transport falls back to
// writev by itself and says so in its start-up line.
func requireIOUring(s *config.Server) error {
	if s.IOUring == nil || !*s.IOUring {
		return nil
	}
	if err := ws.ProbeIOUring(); err != nil {
		return fmt.Errorf("server.io_uring is true, but io_uring is refused: %v "+
			"(set server.io_uring: false, or remove it to write with writev where io_uring is refused)", err)
	}
	return nil
}
