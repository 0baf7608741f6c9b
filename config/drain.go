package config

import "time"

// Defaults of the drain on SIGTERM: long enough for a load balancer's readiness probe to see
// 503 and take the node out (Kubernetes probes every 10 s by default, and fails after a few
// answers; 5 s covers an AWS target group's deregistration once it is started by hand or by
// a preStop hook), and a period that spreads the reconnects over the survivors.
const (
	DefaultDrainDelay  = 5  // seconds
	DefaultDrainPeriod = 10 // seconds
)

// applyDrainDefaults fills the absent drain keys; an explicit 0 stays (no such stage).
func (s *Server) applyDrainDefaults() {
	if s.DrainDelay == nil {
		s.DrainDelay = ptr(DefaultDrainDelay)
	}
	if s.DrainPeriod == nil {
		s.DrainPeriod = ptr(DefaultDrainPeriod)
	}
}

func (s *Server) validateDrain(v *validator) {
	if s.DrainDelay != nil {
		v.nonNegative("server.drain_delay", int64(*s.DrainDelay))
	}
	if s.DrainPeriod != nil {
		v.nonNegative("server.drain_period", int64(*s.DrainPeriod))
	}
}

// Drain is the effective drain: how long the node keeps serving after SIGTERM with /up
// answering 503, and the period over which its sockets are then told 4200. Both zero: the
// listener closes and every socket gets 4200 at once.
func (s *Server) Drain() (delay, period time.Duration) {
	d, p := DefaultDrainDelay, DefaultDrainPeriod
	if s.DrainDelay != nil {
		d = *s.DrainDelay
	}
	if s.DrainPeriod != nil {
		p = *s.DrainPeriod
	}
	return time.Duration(max(d, 0)) * time.Second, time.Duration(max(p, 0)) * time.Second
}
