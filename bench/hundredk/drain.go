package main

import (
	"fmt"
	"slices"
	"strconv"
	"syscall"
	"time"
)

// drainRun SIGTERMs node n and measures its drain from the survivors' side until n has
// exited and every socket is subscribed again: the reconnects per second the survivors took
// (the workers report their reconnect counts every 100 ms; the peak is the most in any one
// second) and the delivery latency of a broadcast published through addr every second
// meanwhile (p99 of each, and over all of their deliveries).
func drainRun(ws []*workerProc, n *nodeProc, addr string, total int64, logf func(string, ...any)) (map[string]any, error) {
	type sample struct {
		at     time.Time
		reconn int64
	}
	_, rec0 := sums(ws)
	samples := []sample{{time.Now(), rec0}}
	start := time.Now()
	if err := n.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return nil, err
	}
	type mark struct {
		p99, last float64
		got       int
	}
	marks := make(chan mark, 1)
	var got []mark
	var lat []float64
	stopMarks := make(chan struct{})
	go func() {
		defer close(marks)
		for k := 0; ; k++ {
			select {
			case <-stopMarks:
				return
			default:
			}
			r, err := broadcast(ws, addr, "drain"+strconv.Itoa(k), 900*time.Millisecond)
			if err != nil {
				logf("  drain broadcast %d: %v", k, err)
				continue
			}
			marks <- mark{p99: r["p99_ms"].(float64), last: r["last_ms"].(float64), got: r["delivered"].(int)}
		}
	}()
	exited := false
	exitedC := n.exited
	progress := time.Now()
	for time.Since(start) < 3*time.Minute {
		select {
		case <-exitedC:
			exited, exitedC = true, nil // closed: stop selecting it, or the loop spins
			logf("  node 0 exited %s after SIGTERM", time.Since(start).Round(time.Millisecond))
		case m, ok := <-marks:
			if ok {
				got = append(got, m)
				lat = append(lat, m.p99)
			}
		case <-time.After(100 * time.Millisecond):
		}
		_, r := sums(ws)
		samples = append(samples, sample{time.Now(), r})
		if time.Since(progress) >= 5*time.Second {
			progress = time.Now()
			logf("  %s after SIGTERM: %d of %d subscribed, %d reconnects", time.Since(start).Round(time.Second), subscribed(ws), total, r-rec0)
		}
		if exited && subscribed(ws) == total {
			break
		}
	}
	close(stopMarks)
	for m := range marks {
		got = append(got, m)
		lat = append(lat, m.p99)
	}
	if !exited {
		return nil, fmt.Errorf("node 0 did not exit within 3 minutes of SIGTERM")
	}
	peak := 0.0
	for i, a := range samples {
		for _, b := range samples[i+1:] {
			if b.at.Sub(a.at) > time.Second {
				break
			}
			peak = max(peak, float64(b.reconn-a.reconn))
		}
	}
	slices.Sort(lat)
	worst := 0.0
	if len(lat) > 0 {
		worst = lat[len(lat)-1]
	}
	took := time.Since(start)
	logf("drain of node 0: exited and every socket subscribed again after %s; survivors' peak %.0f reconnects/s; %d broadcasts meanwhile, worst p99 %.1f ms",
		took.Round(time.Millisecond), peak, len(got), worst)
	return map[string]any{"took_s": took.Seconds(), "peak_reconnects_per_s": peak, "broadcasts": len(got), "worst_p99_ms": worst, "p99s_ms": lat}, nil
}
