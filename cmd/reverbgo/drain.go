package main

import (
	"context"
	"net/http"
	"os"
	"time"

	"github.com/reverbgo/reverbgo/config"
)

// drain runs the stages between the stop signal and the final shutdown (server.drain_delay,
// server.drain_period) and returns how that shutdown closes HTTP:
//
//  1. for drain_delay the node serves as before (new WebSockets, the HTTP API) while /up
//     answers 503 {"health":"draining"}, so a load balancer's readiness check takes it out
//     before anything is refused;
//  2. the listener closes (in-flight requests finish) and the sockets get 4200 spread evenly
//     over drain_period, so the survivors take the node's clients a few at a time.
//
// A second stop signal skips what is left. With both at 0 nothing happens here: the final
// shutdown closes the listener and tells every socket at once, as it always did.
func (n *node) drain(httpSrv *http.Server, stop <-chan os.Signal, s config.Server) (closeHTTP func(context.Context)) {
	delay, period := s.Drain()
	if delay <= 0 && period <= 0 {
		return func(ctx context.Context) { _ = httpSrv.Shutdown(ctx) }
	}
	n.srv.BeginDrain()
	n.log.Info("draining", "drain_delay", delay.String(), "drain_period", period.String())
	skipped := false
	if delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case sig := <-stop:
			n.log.Info("drain cut short", "signal", sig.String())
			skipped = true
		}
		t.Stop()
	}
	// Shutdown closes the listener at once, then waits for the requests in flight; the final
	// shutdown waits for it (or gives up on it) within its own deadline.
	hctx, hcancel := context.WithCancel(context.Background())
	hdone := make(chan struct{})
	go func() { defer close(hdone); _ = httpSrv.Shutdown(hctx) }()
	if !skipped && period > 0 {
		dctx, dcancel := context.WithCancel(context.Background())
		go func() {
			select {
			case sig := <-stop:
				n.log.Info("drain cut short", "signal", sig.String())
				dcancel()
			case <-dctx.Done():
			}
		}()
		n.srv.DrainSockets(dctx, period)
		dcancel()
	}
	return func(ctx context.Context) {
		select {
		case <-hdone:
		case <-ctx.Done():
			hcancel()
			<-hdone
		}
		hcancel()
	}
}
