package topology

import (
	"fmt"
	"time"
)

// coverWindow is how long after an event was sent a pusher:resume_failed may arrive and
// still count as telling its loss: the server tells within its publish timeout plus its
// history read bound, so a later one is about another gap.
const coverWindow = 15 * time.Second

// item is one frame a recovery stream (one socket, one channel) received, in arrival order:
// an event (seq, serial) or a resume_failed (told: reason, epoch, serial).
type item struct {
	told   bool
	seq    int
	serial uint64
	epoch  string
	reason string
	at     time.Time
}

// stream is what one socket received on one channel, from the position its subscription
// was answered with.
type stream struct {
	epoch string
	last  uint64
	items []item
}

// sent is what the publisher knows of one event.
type sent struct {
	channel  string
	at       time.Time
	accepted bool // HTTP 200
}

// verdict counts, over streams, what happened to every accepted event and every serial.
type verdict struct {
	accepted   int // accepted events × the streams of their channel
	delivered  int // of those, delivered
	silent     int // accepted, not delivered, no resume_failed covering it
	told       int // accepted, not delivered, a resume_failed covering it
	serialGaps int // serials skipped without a resume_failed
	duplicates int // an event delivered again on the same stream
	outOfOrder int // a serial at or below the last one under the same position
	toldFrames int // resume_failed frames received
}

func (v verdict) String() string {
	return fmt.Sprintf("accepted=%d delivered=%d silent_lost=%d told_lost=%d serial_gaps=%d duplicates=%d out_of_order=%d resume_failed=%d",
		v.accepted, v.delivered, v.silent, v.told, v.serialGaps, v.duplicates, v.outOfOrder, v.toldFrames)
}

func (v *verdict) add(o verdict) {
	v.accepted += o.accepted
	v.delivered += o.delivered
	v.silent += o.silent
	v.told += o.told
	v.serialGaps += o.serialGaps
	v.duplicates += o.duplicates
	v.outOfOrder += o.outOfOrder
	v.toldFrames += o.toldFrames
}

// judge walks one stream of channel: each event must be the next serial under the
// position (the answered one, then the one each resume_failed names), once; then every
// accepted event of the channel must have been delivered, or its loss told by a
// resume_failed that arrived after it was sent (within coverWindow).
func judge(st stream, channel string, events []sent) verdict {
	var v verdict
	got := map[int]bool{}
	var tolds []time.Time
	last := st.last // under the position's epoch: a resume_failed names the next one
	for _, it := range st.items {
		if it.told {
			v.toldFrames++
			tolds = append(tolds, it.at)
			last = it.serial
			continue
		}
		if got[it.seq] {
			v.duplicates++
			continue
		}
		got[it.seq] = true
		switch {
		case it.serial <= last:
			v.outOfOrder++
		case it.serial > last+1:
			v.serialGaps += int(it.serial - last - 1)
		}
		last = max(last, it.serial)
	}
	for seq, ev := range events {
		if ev.channel != channel || !ev.accepted {
			continue
		}
		v.accepted++
		if got[seq] {
			v.delivered++
			continue
		}
		covered := false
		for _, at := range tolds {
			if !at.Before(ev.at) && at.Sub(ev.at) <= coverWindow {
				covered = true
				break
			}
		}
		if covered {
			v.told++
		} else {
			v.silent++
		}
	}
	return v
}
