package pusher

import (
	"context"
	"time"
)

// The drain on SIGTERM (server.drain_delay, server.drain_period) in the Server's two steps:
// BeginDrain marks the node as leaving while it keeps serving, so a load balancer's
// readiness probe (/up) takes it out before anything is refused; once cmd/reverbgo has closed
// the listener, DrainSockets tells the node's sockets to reconnect (4200) a few at a time,
// so the survivors get its clients spread over the period rather than in one second.
// Shutdown then ends what is left, as without a drain.

// BeginDrain marks the node as draining: /up answers 503 {"health":"draining"} and Draining
// reports true. Nothing else changes: sockets, new connections and the HTTP API are served.
func (s *Server) BeginDrain() { s.leaving.Store(true) }

// Draining reports whether BeginDrain was called (the reverbgo_draining gauge).
func (s *Server) Draining() bool { return s.leaving.Load() }

// drainTick is the shortest step between two rounds of DrainSockets' closes: many sockets
// are closed per round rather than one timer per socket.
const drainTick = 10 * time.Millisecond

// DrainSockets closes the sockets open now with 4200, spread evenly over period: the i-th
// of n at start + i*period/n. It returns once all are told or ctx ends (a second signal:
// Shutdown tells the rest at once). Sockets opened meanwhile are left to Shutdown.
func (s *Server) DrainSockets(ctx context.Context, period time.Duration) {
	var conns []*Conn
	s.sockets.each(func(c *Conn) { conns = append(conns, c) })
	n := len(conns)
	if n == 0 || period <= 0 {
		return
	}
	s.log.Info("draining sockets", "sockets", n, "period", period.String())
	start := time.Now()
	step := max(period/time.Duration(n), drainTick)
	timer := time.NewTimer(0)
	defer timer.Stop()
	for done := 0; done < n; {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		// Every socket whose moment has come: i*period/n <= elapsed.
		due := min(n, int(time.Since(start)*time.Duration(n)/period)+1)
		for ; done < due; done++ {
			conns[done].closeWith(CloseServerShutdown)
		}
		timer.Reset(step)
	}
}
