package main

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/reverbgo/reverbgo/bench/internal/benchkit"
)

// What a step cost, beside its latencies: each node's CPU (from /proc/<pid>/stat, when
// --pids names the nodes' processes) and Redis's commands and bytes (from INFO on every
// address of --redis-addrs: the masters), per publish answered.

// redisCounters are the totals of one Redis's INFO that a step's delta is taken of.
type redisCounters struct {
	calls, in, out int64
	sent           map[string]int64 // calls of the commands a publish sends (sentCommands)
}

func readRedis(ctx context.Context, c *redis.Client) (redisCounters, error) {
	info, err := c.Info(ctx, "stats", "commandstats").Result()
	if err != nil {
		return redisCounters{}, err
	}
	var r redisCounters
	for _, l := range strings.Split(info, "\n") {
		l = strings.TrimSpace(l)
		switch {
		case strings.HasPrefix(l, "total_net_input_bytes:"):
			r.in, _ = strconv.ParseInt(strings.TrimPrefix(l, "total_net_input_bytes:"), 10, 64)
		case strings.HasPrefix(l, "total_net_output_bytes:"):
			r.out, _ = strconv.ParseInt(strings.TrimPrefix(l, "total_net_output_bytes:"), 10, 64)
		case strings.HasPrefix(l, "cmdstat_"):
			// cmdstat_publish:calls=12,usec=...; INFO itself is counted too (a few per step).
			if _, rest, ok := strings.Cut(l, "calls="); ok {
				n, _ := strconv.ParseInt(strings.SplitN(rest, ",", 2)[0], 10, 64)
				r.calls += n
				name, _, _ := strings.Cut(strings.TrimPrefix(l, "cmdstat_"), ":")
				if sentCommands[name] {
					if r.sent == nil {
						r.sent = map[string]int64{}
					}
					r.sent[name] += n
				}
			}
		}
	}
	return r, nil
}

// sentCommands are what the broker's writer sends for a publish: PUBLISH (SPUBLISH on
// Cluster), or for a recovery channel EVALSHA of the append script, which PUBLISHes inside
// Redis (so its PUBLISH is counted too: the writer's round trip is the EVALSHA).
var sentCommands = map[string]bool{"publish": true, "spublish": true, "evalsha": true}

// meter samples the nodes and Redis around a step.
type meter struct {
	pids  []int
	redis []*redis.Client
	ticks []int64
	rc    []redisCounters
	at    time.Time
}

func newMeter(pids []int, addrs []string) *meter {
	m := &meter{pids: pids}
	for _, a := range addrs {
		m.redis = append(m.redis, redis.NewClient(&redis.Options{Addr: a}))
	}
	return m
}

func (m *meter) begin(ctx context.Context) {
	m.ticks, m.rc, m.at = m.ticks[:0], m.rc[:0], time.Now()
	for _, p := range m.pids {
		t, _ := benchkit.CPUTicks(p)
		m.ticks = append(m.ticks, t)
	}
	for _, c := range m.redis {
		r, _ := readRedis(ctx, c)
		m.rc = append(m.rc, r)
	}
}

// end fills s's cost fields for the publishes answered during the step.
func (m *meter) end(ctx context.Context, s *step) {
	pubs := float64(s.Answered)
	if pubs == 0 {
		return
	}
	for i, p := range m.pids {
		t, err := benchkit.CPUTicks(p)
		if err != nil || i >= len(m.ticks) {
			s.NodeCPUUSPerPublish = append(s.NodeCPUUSPerPublish, -1)
			continue
		}
		s.NodeCPUUSPerPublish = append(s.NodeCPUUSPerPublish, float64(t-m.ticks[i])*1e6/benchkit.ClockTicks/pubs)
	}
	d := redisCounters{sent: map[string]int64{}}
	for i, c := range m.redis {
		r, err := readRedis(ctx, c)
		if err != nil || i >= len(m.rc) {
			continue
		}
		d.calls += r.calls - m.rc[i].calls
		d.in += r.in - m.rc[i].in
		d.out += r.out - m.rc[i].out
		for k, v := range r.sent {
			d.sent[k] += v - m.rc[i].sent[k]
		}
	}
	if len(m.redis) > 0 {
		s.RedisCommandsPerPublish = float64(d.calls) / pubs
		s.RedisBytesInPerPublish = float64(d.in) / pubs
		s.RedisBytesOutPerPublish = float64(d.out) / pubs
		s.RedisCallsPerPublish = map[string]float64{}
		for k, v := range d.sent {
			s.RedisCallsPerPublish[k] = float64(v) / pubs
		}
	}
}
