// Package benchkit is what the load tools of bench/ share beyond the Pusher client
// (internal/pusherclient): the bridge page and MCP helpers and process CPU and RSS.
package benchkit

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ClockTicks is the kernel's USER_HZ, the unit of CPUTicks (100 on every Linux this runs on).
const ClockTicks = 100

// CPUTicks is a process's user+system CPU so far, in ClockTicks, from /proc/<pid>/stat.
func CPUTicks(pid int) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("bad stat of %d", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 { // after the name: state is field 3; utime and stime are fields 14 and 15
		return 0, fmt.Errorf("bad stat of %d", pid)
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("bad stat of %d", pid)
	}
	return u + st, nil
}

// RSSMiB is a process's resident set, from /proc/<pid>/status (0 if unreadable).
func RSSMiB(pid int) float64 {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}
