//go:build unix

package main

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Lat summarises one latency distribution in milliseconds (nearest-rank percentiles over every
// sample, no sampling).
type Lat struct {
	N    int     `json:"n"`
	Mean float64 `json:"mean_ms"`
	P50  float64 `json:"p50_ms"`
	P90  float64 `json:"p90_ms"`
	P99  float64 `json:"p99_ms"`
	P999 float64 `json:"p999_ms"`
	Max  float64 `json:"max_ms"`
	Min  float64 `json:"min_ms"`
}

// summarize sorts d in place and returns its distribution.
func summarize(d []time.Duration) Lat {
	if len(d) == 0 {
		return Lat{}
	}
	slices.Sort(d)
	var sum time.Duration
	for _, v := range d {
		sum += v
	}
	ms := func(v time.Duration) float64 { return float64(v) / float64(time.Millisecond) }
	return Lat{
		N:    len(d),
		Mean: ms(sum / time.Duration(len(d))),
		P50:  ms(rank(d, 0.50)),
		P90:  ms(rank(d, 0.90)),
		P99:  ms(rank(d, 0.99)),
		P999: ms(rank(d, 0.999)),
		Max:  ms(d[len(d)-1]),
		Min:  ms(d[0]),
	}
}

// rank is the nearest-rank percentile of sorted d (q in (0,1]).
func rank(sorted []time.Duration, q float64) time.Duration {
	n := len(sorted)
	i := int(float64(n)*q+0.999999999) - 1 // ceil(q*n)-1
	if i < 0 {
		i = 0
	}
	if i >= n {
		i = n - 1
	}
	return sorted[i]
}

func (l Lat) String() string {
	if l.N == 0 {
		return "n=0"
	}
	return fmt.Sprintf("n=%d mean=%.3fms p50=%.3fms p90=%.3fms p99=%.3fms p99.9=%.3fms max=%.3fms",
		l.N, l.Mean, l.P50, l.P90, l.P99, l.P999, l.Max)
}

// ---- process accounting (same method as shared/bench/pusherbench) ----

// selfCPU is this process's user+system CPU time.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// clkTck is USER_HZ (100 on every Linux build that matters here).
const clkTck = 100

// procCPU returns utime+stime of pid from /proc/PID/stat.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')') // comm may contain spaces
	if i < 0 {
		return 0, fmt.Errorf("bad /proc/%d/stat", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 { // f[0] is field 3 (state); utime is field 14 = f[11], stime f[12]
		return 0, fmt.Errorf("short /proc/%d/stat", pid)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("bad cpu fields in /proc/%d/stat", pid)
	}
	return time.Duration((ut + st) * int64(time.Second) / clkTck), nil
}

// machineBusy is the machine's non-idle CPU time from /proc/stat.
func machineBusy() (time.Duration, bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, false
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0, false
	}
	var busy int64
	for i, v := range f[1:] {
		if i >= 8 { // user nice system idle iowait irq softirq steal; guest is inside user
			break
		}
		if i == 3 || i == 4 {
			continue
		}
		x, _ := strconv.ParseInt(v, 10, 64)
		busy += x
	}
	return time.Duration(busy * int64(time.Second) / clkTck), true
}

// cpuMeter measures client, server and whole-machine CPU over an interval.
type cpuMeter struct {
	pid          int
	self0, srv0  time.Duration
	srvOK        bool
	mach0        time.Duration
	machOK       bool
	started, end time.Time
}

func startCPU(pid int) *cpuMeter {
	m := &cpuMeter{pid: pid, self0: selfCPU(), started: time.Now()}
	m.mach0, m.machOK = machineBusy()
	if pid > 0 {
		if v, err := procCPU(pid); err == nil {
			m.srv0, m.srvOK = v, true
		}
	}
	return m
}

// stop returns client CPU s, server CPU s (-1 unknown) and other CPU s (machine busy minus
// both, -1 unknown) since start.
func (m *cpuMeter) stop() (client, server, other float64) {
	client = (selfCPU() - m.self0).Seconds()
	server = -1
	if m.srvOK {
		if v, err := procCPU(m.pid); err == nil {
			server = (v - m.srv0).Seconds()
		}
	}
	other = -1
	if mb, ok := machineBusy(); ok && m.machOK {
		other = (mb - m.mach0).Seconds() - client
		if server > 0 {
			other -= server
		}
		other = max(other, 0)
	}
	m.end = time.Now()
	return client, server, other
}
