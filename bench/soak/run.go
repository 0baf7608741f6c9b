package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"
)

// row is one interval's figures.
type row struct {
	at         time.Duration
	rss        float64
	goroutines float64
}

// run starts every load, prints a row per interval, stops and drains the load, and
// returns whether every criterion held.
func (s *soak) run(parent context.Context, o options, srv *server) (bool, error) {
	pid := srv.cmd.Process.Pid
	idleBefore, err := s.metric("go_goroutines")
	if err != nil {
		return false, fmt.Errorf("goroutines: %w (is --debug-addr served?)", err)
	}
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	stop := make(chan struct{}) // closed once the long-lived sockets may end
	var stopped bool
	closeStop := func() {
		if !stopped {
			stopped = true
			close(stop)
		}
	}
	defer closeStop()

	fans, err := s.fanout(ctx, o.subs, o.fanRate, stop)
	if err != nil {
		return false, err
	}
	ces, err := s.clientEvents(ctx, o.pairs, o.ceRate, stop)
	if err != nil {
		return false, err
	}
	members, err := s.presence(ctx, o.joiners, stop)
	if err != nil {
		return false, err
	}
	var pages []*page
	for i := 0; i < o.pages; i++ {
		p, err := s.openPage(ctx, i)
		if err != nil {
			return false, fmt.Errorf("page %d: %w", i, err)
		}
		pages = append(pages, p)
		go s.servePage(ctx, p, stop)
		go s.agent(ctx, p, 100*time.Millisecond)
	}
	for i := 0; i < o.churners; i++ {
		go s.churn(ctx, i)
	}
	for i := 0; i < o.slowBodies; i++ {
		switch i % 3 {
		case 0:
			go s.slowSignedBody(ctx)
		case 1:
			go s.slowBody(ctx, "/toolmark/bridge/conv-0")
		default:
			go s.slowBody(ctx, "/apps/"+s.appID+"/events")
		}
	}
	for i := 0; i < o.loris; i++ {
		go s.slowLoris(ctx)
	}
	for i := 0; i < o.invalid; i++ {
		go s.invalidFrames(ctx)
	}

	fmt.Fprintf(s.out, "%6s %8s %6s %8s %8s %7s %8s %7s %7s %7s %5s %16s %6s\n",
		"t", "rss_MiB", "gor", "churn", "fan_pub", "fan_lag", "ce_sent", "ce_lag", "joins", "calls", "fail", "slow/signed/loris/bad", "errors")
	var rows []row
	start := time.Now()
	tick := time.NewTicker(o.interval)
	defer tick.Stop()
	for running := true; running; {
		select {
		case <-parent.Done():
			return false, parent.Err()
		case <-srv.done:
			return false, fmt.Errorf("reverbgo exited during the soak; see %s", srv.log)
		case <-tick.C:
		}
		g, _ := s.metric("go_goroutines")
		r := row{at: time.Since(start).Round(time.Second), rss: s.rss(pid), goroutines: g}
		rows = append(rows, r)
		s.printRow(r, fans, ces)
		running = time.Since(start) < o.duration-time.Second
	}

	// Stop the load, let what was sent arrive, then judge.
	cancel()
	drained := s.drain(fans, ces, members)
	closeStop()
	s.closeLong()
	s.http.CloseIdleConnections()
	idleAfter := idleBefore
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
		if idleAfter, _ = s.metric("go_goroutines"); idleAfter <= idleBefore+float64(o.goroutineSlack) {
			break
		}
	}
	return s.verdict(o, rows, fans, ces, members(), drained, idleBefore, idleAfter), nil
}

func (s *soak) printRow(r row, fans, ces []*subscriber) {
	fanLag, ceLag := s.lag(fans, ces)
	errs := s.c.churnErr.Load() + s.c.fanPubErr.Load() + s.c.ceErr.Load() + s.c.presErr.Load() + s.c.subErr.Load()
	fmt.Fprintf(s.out, "%6s %8.1f %6.0f %8d %8d %7d %8d %7d %7d %7d %5d %16s %6d\n",
		r.at, r.rss/(1<<20), r.goroutines, s.c.churn.Load(), s.c.fanPub.Load(), fanLag, s.c.ceSent.Load(), ceLag,
		s.c.presJoin.Load(), s.c.callOK.Load(), s.c.callFail.Load(),
		fmt.Sprintf("%d/%d/%d/%d", s.c.slowBody.Load(), s.c.slowSigned.Load(), s.c.slowLoris.Load(), s.c.bad.Load()), errs)
}

// lag is what was sent and not (yet) received: fan-out summed over subscribers, client
// events over pairs. After the drain it is the loss.
func (s *soak) lag(fans, ces []*subscriber) (fan, ce int64) {
	pub := s.c.fanPub.Load()
	for _, f := range fans {
		fan += max(0, pub-f.got.Load())
	}
	var got int64
	for _, c := range ces {
		got += c.got.Load()
	}
	return fan, max(0, s.c.ceSent.Load()-got)
}

// drain waits (bounded) until everything sent has arrived and presence has settled.
func (s *soak) drain(fans, ces []*subscriber, members func() map[string]bool) bool {
	for end := time.Now().Add(15 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		fan, ce := s.lag(fans, ces)
		m := members()
		if fan == 0 && ce == 0 && len(m) == 1 && m["observer"] {
			return true
		}
	}
	return false
}

func (s *soak) verdict(o options, rows []row, fans, ces []*subscriber, members map[string]bool, drained bool, idleBefore, idleAfter float64) bool {
	ok := true
	check := func(pass bool, format string, args ...any) {
		mark := "ok  "
		if !pass {
			mark, ok = "FAIL", false
		}
		fmt.Fprintf(s.out, "%s %s\n", mark, fmt.Sprintf(format, args...))
	}
	fmt.Fprintln(s.out, "verdict:")
	if len(rows) >= 2 {
		base, lo, hi := rows[0].rss, rows[0].rss, rows[0].rss
		for _, r := range rows[1:] {
			lo, hi = min(lo, r.rss), max(hi, r.rss)
		}
		check(hi <= base*(1+o.rssTolerance) && lo >= base*(1-o.rssTolerance),
			"RSS after the first interval within %.0f%% of %.1f MiB: %.1f..%.1f MiB", o.rssTolerance*100, base/(1<<20), lo/(1<<20), hi/(1<<20))
		g0, g1 := rows[0].goroutines, rows[len(rows)-1].goroutines
		check(g1 <= g0*1.1+float64(o.goroutineSlack), "goroutines under load: first interval %.0f, last %.0f", g0, g1)
	} else {
		fmt.Fprintln(s.out, "     (one interval only: RSS drift and goroutine trend need --duration ≥ 2 × --interval)")
	}
	check(idleAfter <= idleBefore+float64(o.goroutineSlack), "goroutines idle before %.0f, idle after %.0f (slack %d)", idleBefore, idleAfter, o.goroutineSlack)
	fanLoss, ceLoss := s.lag(fans, ces)
	check(drained && fanLoss == 0 && s.c.fanPubErr.Load() == 0, "fan-out: %d triggers × %d subscribers, %d lost, %d out of order, %d trigger errors",
		s.c.fanPub.Load(), len(fans), fanLoss, s.c.fanDisorder.Load(), s.c.fanPubErr.Load())
	check(ceLoss == 0 && s.c.ceErr.Load() == 0, "client events: %d sent, %d lost, %d refused", s.c.ceSent.Load(), ceLoss, s.c.ceErr.Load())
	check(len(members) == 1 && members["observer"] && s.c.presErr.Load() == 0, "presence: %d joins, members at the end %v, %d errors",
		s.c.presJoin.Load(), slices.Sorted(maps.Keys(members)), s.c.presErr.Load())
	check(s.c.callFail.Load() == 0 && s.c.callOK.Load() > 0, "bridge: %d calls ok, %d failed", s.c.callOK.Load(), s.c.callFail.Load())
	check(s.c.churnErr.Load() == 0 && s.c.subErr.Load() == 0, "churn: %d cycles, %d errors; long-lived sockets ended early: %d",
		s.c.churn.Load(), s.c.churnErr.Load(), s.c.subErr.Load())
	fmt.Fprintf(s.out, "     abusive cycles (cut by the server, or given up after %v): unauthenticated slow body %d, signed slow body %d, slowloris %d, invalid frames %d\n",
		maxAbuseCycle, s.c.slowBody.Load(), s.c.slowSigned.Load(), s.c.slowLoris.Load(), s.c.bad.Load())
	if ok {
		fmt.Fprintln(s.out, "PASS")
	} else {
		fmt.Fprintln(s.out, "FAIL")
	}
	return ok
}
