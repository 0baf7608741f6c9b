package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestDiff(t *testing.T) {
	set := func(s ...string) map[string]bool {
		m := map[string]bool{}
		for _, x := range s {
			m[x] = true
		}
		return m
	}
	for _, tc := range []struct {
		want, got map[string]bool
		out       string
	}{
		{set("a", "b"), set("b", "a"), ""},
		{set("a", "b"), set("a"), "missing [b], extra (ghosts) []"},
		{set("a"), set("a", "g"), "missing [], extra (ghosts) [g]"},
		{set(), set(), ""},
	} {
		if got := diff(tc.want, tc.got); got != tc.out {
			t.Errorf("diff(%v, %v) = %q, want %q", tc.want, tc.got, got, tc.out)
		}
	}
}

func TestMetricLine(t *testing.T) {
	for _, tc := range []struct {
		line, name string
		val        float64
		ok         bool
	}{
		{`go_goroutines 41`, "go_goroutines", 41, true},
		{`reverbgo_webhook_deliveries_total{result="dropped"} 3`, `reverbgo_webhook_deliveries_total{result="dropped"}`, 3, true},
		{`# HELP go_goroutines Number of goroutines`, "", 0, false},
		{``, "", 0, false},
	} {
		name, val, ok := metricLine(tc.line)
		if name != tc.name || val != tc.val || ok != tc.ok {
			t.Errorf("metricLine(%q) = %q %v %v", tc.line, name, val, ok)
		}
	}
}

// TestOutageWindows: an event inside a (widened) outage is excused, one outside is not,
// and an open window excuses everything after its start.
func TestOutageWindows(t *testing.T) {
	tr := newTruth()
	t0 := time.Now()
	tr.openWindow(t0)
	tr.closeWindow(t0.Add(10 * time.Second))
	for _, tc := range []struct {
		at   time.Duration
		want bool
	}{{-2 * time.Second, false}, {-500 * time.Millisecond, true}, {5 * time.Second, true}, {12 * time.Second, true}, {14 * time.Second, false}} {
		if got := tr.inOutage(t0.Add(tc.at), time.Second, 3*time.Second); got != tc.want {
			t.Errorf("inOutage(t0%+v) = %v, want %v", tc.at, got, tc.want)
		}
	}
	tr.openWindow(t0.Add(time.Minute))
	if !tr.inOutage(t0.Add(time.Hour), 0, 0) {
		t.Error("an open window must excuse what follows it")
	}
	if !strings.Contains(diff(map[string]bool{"x": true}, nil), "missing [x]") {
		t.Error("diff of a nil set")
	}
}

// TestResumer: the --recovery judgement of one fan-out subscriber over a run.
func TestResumer(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	u := func(n uint64) *uint64 { return &n }
	ok := func(epoch string, serial uint64) frame {
		return frame{Event: "pusher_internal:subscription_succeeded", Channel: "fan-0", Serial: u(serial), Epoch: epoch}
	}
	ev := func(seq int, serial uint64) frame {
		return frame{Event: "seq", Channel: "fan-0", Data: []byte(`"` + strconv.Itoa(seq) + `"`), Serial: u(serial)}
	}
	told := func(reason, epoch string, serial uint64) frame {
		d, _ := json.Marshal(fmt.Sprintf(`{"reason":%q,"epoch":%q,"serial":%d}`, reason, epoch, serial))
		return frame{Event: "pusher:resume_failed", Channel: "fan-0", Data: d}
	}
	// steps: frames at ms = index; ok frames are answers (resumed after the first);
	// pubs: seq i sent at ms 1+i*0 (all after the first answer).
	type want struct{ accepted, delivered, silent, told, gaps, dup, raw int }
	for _, tc := range []struct {
		name  string
		steps []frame
		pubs  int
		want  want
	}{
		{"every event once", []frame{ok("E", 0), ev(0, 1), ev(1, 2)}, 2, want{accepted: 2, delivered: 2}},
		{"a repeated serial is dropped, not delivered twice", []frame{ok("E", 0), ev(0, 1), ev(0, 1), ev(1, 2)}, 2, want{accepted: 2, delivered: 2, raw: 1}},
		{"the same event under two serials is a duplicate", []frame{ok("E", 0), ev(0, 1), ev(0, 2)}, 1, want{accepted: 1, delivered: 1, dup: 1}},
		{"a missing event and its serial, untold", []frame{ok("E", 0), ev(0, 1), ev(2, 3)}, 3, want{accepted: 3, delivered: 2, silent: 1, gaps: 1}},
		{"a missing event told: the new epoch's serial 1 passes", []frame{ok("E", 0), ev(0, 1), told("epoch_changed", "F", 0), ev(2, 1)}, 3, want{accepted: 3, delivered: 2, told: 1}},
		{"a resume in the same epoch keeps the position: the replay passes", []frame{ok("E", 0), ev(0, 1), ok("E", 3), ev(1, 2), ev(2, 3)}, 3, want{accepted: 3, delivered: 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newResumer()
			answers := 0
			for i, f := range tc.steps {
				if f.Event == "pusher_internal:subscription_succeeded" {
					if answers > 0 {
						r.resume()
					}
					r.answered(f, "1.1", answers > 0, at(i))
					answers++
					continue
				}
				r.take(f, "seq", at(i))
			}
			pubs := make([]pub, tc.pubs)
			for i := range pubs {
				pubs[i] = pub{seq: i, at: at(1)}
			}
			v := recVerdict{reasons: map[string]int{}}
			r.judge(&v, pubs)
			got := want{v.accepted, v.delivered, v.silent, v.told, v.gaps, v.dup, v.raw}
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
			if v.ok() != (got.silent == 0 && got.gaps == 0 && got.dup == 0) {
				t.Errorf("ok() = %v for %+v", v.ok(), got)
			}
		})
	}
}

// TestRollerTakesToldPosition: a live resume_failed's {epoch, serial} is the roller's
// position, so a late frame of the gap it told is dropped and the next one counted.
func TestRollerTakesToldPosition(t *testing.T) {
	u := func(n uint64) *uint64 { return &n }
	r := &roller{ch: "c", seen: map[int]int{}, failed: map[string]int{}, have: true, epoch: "E", serial: 1}
	d, _ := json.Marshal(`{"reason":"too_old","epoch":"E","serial":40}`)
	r.take(frame{Event: "pusher:resume_failed", Channel: "c", Data: d})
	r.take(frame{Event: "seq", Channel: "c", Data: []byte(`"39"`), Serial: u(39)})
	r.take(frame{Event: "seq", Channel: "c", Data: []byte(`"41"`), Serial: u(41)})
	if r.seen[39] != 0 || r.seen[41] != 1 || r.raw != 1 || r.failed["too_old"] != 1 || r.serial != 41 {
		t.Errorf("seen %v raw %d failed %v serial %d", r.seen, r.raw, r.failed, r.serial)
	}
}
