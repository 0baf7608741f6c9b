package topology

import (
	"testing"
	"time"
)

// TestJudge: what the recovery run counts for one stream, without Redis.
func TestJudge(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ev := func(seq int, serial uint64, ms int) item { return item{seq: seq, serial: serial, at: at(ms)} }
	told := func(epoch string, serial uint64, ms int) item {
		return item{told: true, epoch: epoch, serial: serial, at: at(ms)}
	}
	// events: seq = index; channel "c" unless noted; sent at seq*10 ms.
	events := func(n int, refused ...int) []sent {
		out := make([]sent, n)
		for i := range out {
			out[i] = sent{channel: "c", at: at(i * 10), accepted: true}
		}
		for _, r := range refused {
			out[r].accepted = false
		}
		return out
	}
	cases := []struct {
		name   string
		st     stream
		events []sent
		want   verdict
	}{
		{"every event once in order", stream{epoch: "E", last: 4, items: []item{ev(0, 5, 1), ev(1, 6, 11), ev(2, 7, 21)}}, events(3),
			verdict{accepted: 3, delivered: 3}},
		{"an accepted event missing without a told: silent, and its serial a gap", stream{epoch: "E", items: []item{ev(0, 1, 1), ev(2, 3, 21)}}, events(3),
			verdict{accepted: 3, delivered: 2, silent: 1, serialGaps: 1}},
		{"a missing event told after it was sent", stream{epoch: "E", items: []item{ev(0, 1, 1), told("F", 0, 30), ev(2, 1, 31)}}, events(3),
			verdict{accepted: 3, delivered: 2, told: 1, toldFrames: 1}},
		{"a told before the event was sent does not cover it", stream{epoch: "E", items: []item{told("E", 0, 0), ev(0, 1, 1), ev(2, 2, 21)}}, events(3),
			verdict{accepted: 3, delivered: 2, silent: 1, toldFrames: 1}},
		{"a told long after does not cover it", stream{epoch: "E", items: []item{ev(0, 1, 1), told("F", 0, 20+int(coverWindow/time.Millisecond)), ev(2, 1, 21)}}, events(3),
			verdict{accepted: 3, delivered: 2, silent: 1, toldFrames: 1}},
		{"a duplicate and a serial out of order", stream{epoch: "E", items: []item{ev(0, 1, 1), ev(2, 3, 21), ev(0, 1, 22), ev(1, 2, 23)}}, events(3),
			verdict{accepted: 3, delivered: 3, serialGaps: 1, duplicates: 1, outOfOrder: 1}},
		{"a refused event (503) delivered or not counts nothing; its serial does", stream{epoch: "E", items: []item{ev(0, 1, 1), ev(2, 3, 21)}}, events(3, 1),
			verdict{accepted: 2, delivered: 2, serialGaps: 1}},
		{"events of other channels are not this stream's", stream{epoch: "E", items: []item{ev(0, 1, 1)}}, append(events(1), sent{channel: "d", at: at(10), accepted: true}),
			verdict{accepted: 1, delivered: 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := judge(c.st, "c", c.events); got != c.want {
				t.Errorf("judge:\n got %v\nwant %v", got, c.want)
			}
		})
	}
}
