package main

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// With --recovery (issue 31) the soak's fan-out subscribers of HTTP API publishes resume as
// the recovery client module does (data.resume with the last epoch, serial and socket id;
// a serial at or below the last one under the told epoch dropped; pusher:resume_failed
// moving the position to the {epoch, serial} it names), and every event accepted (HTTP 200)
// on their channel from their first subscription to the end of the run is judged, through
// every fault: delivered once, or its loss told by a resume_failed that arrived after it
// was sent (within tellWithin). A silent loss, a skipped serial or a duplicate fails the
// run; told losses are counted.

// tellWithin bounds how long after an event was sent a resume_failed still covers its loss.
const tellWithin = 30 * time.Second

// resumer is one fan-out subscriber's recovery state over the whole run.
type resumer struct {
	mu     sync.Mutex
	have   bool
	epoch  string
	last   uint64
	socket string
	first  time.Time // the first subscription's answer: events sent from then on are judged

	seen    map[int]int    // event number → deliveries to the app
	tolds   []time.Time    // when resume_failed frames arrived
	reasons map[string]int // resume_failed reasons
	gaps    int            // serials skipped without a resume_failed
	raw     int            // frames dropped as a serial already seen
	resumes int
}

func newResumer() *resumer { return &resumer{seen: map[int]int{}, reasons: map[string]int{}} }

// resume is data.resume for the next subscribe (nil before the first answer, or for a
// subscriber without recovery: r nil).
func (r *resumer) resume() map[string]any {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.have {
		return nil
	}
	r.resumes++
	return map[string]any{"epoch": r.epoch, "serial": r.last, "socket_id": r.socket}
}

// answered takes a subscription_succeeded on socket (resumed: the subscribe carried resume).
func (r *resumer) answered(f frame, socket string, resumed bool, now time.Time) {
	if f.Serial == nil || f.Epoch == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.first.IsZero() {
		r.first = now
	}
	r.socket = socket
	// Resuming in the same epoch: the replay moves the position on. Otherwise the answered
	// position (a resume into another epoch is followed by resume_failed naming it).
	if !resumed || !r.have || r.epoch != f.Epoch || *f.Serial < r.last {
		r.epoch, r.last = f.Epoch, *f.Serial
	}
	r.have = true
}

// take is one frame read after the subscription (event: the fan-out's event name); false
// when the client drops it (a serial already seen under the position's epoch).
func (r *resumer) take(f frame, event string, now time.Time) bool {
	switch f.Event {
	case "pusher:resume_failed":
		var d struct {
			Reason string  `json:"reason"`
			Epoch  string  `json:"epoch"`
			Serial *uint64 `json:"serial"`
		}
		_ = json.Unmarshal([]byte(f.Str()), &d)
		r.mu.Lock()
		r.tolds = append(r.tolds, now)
		r.reasons[d.Reason]++
		if d.Epoch != "" && d.Serial != nil {
			r.epoch, r.last, r.have = d.Epoch, *d.Serial, true
		}
		r.mu.Unlock()
	case event:
		k, err := strconv.Atoi(f.Str())
		if err != nil {
			return true
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if f.Serial != nil && r.have {
			s := *f.Serial
			if s <= r.last {
				r.raw++
				return false
			}
			if s > r.last+1 {
				r.gaps += int(s - r.last - 1)
			}
			r.last = s
		}
		r.seen[k]++
	}
	return true
}

// recVerdict is the run's recovery verdict over the subscribers.
type recVerdict struct {
	subscribers, accepted, delivered int
	silent, told, gaps, dup, raw     int
	resumes                          int
	reasons                          map[string]int
}

func (v recVerdict) ok() bool { return v.silent == 0 && v.gaps == 0 && v.dup == 0 }

func (v recVerdict) String() string {
	keys := make([]string, 0, len(v.reasons))
	for k := range v.reasons {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var rs []string
	for _, k := range keys {
		rs = append(rs, fmt.Sprintf("%s=%d", k, v.reasons[k]))
	}
	return fmt.Sprintf("%d subscribers, accepted deliveries %d, delivered %d, lost silently %d, told lost %d, serials skipped %d, duplicated %d, "+
		"repeated serials dropped %d, resumes %d, resume_failed [%s]",
		v.subscribers, v.accepted, v.delivered, v.silent, v.told, v.gaps, v.dup, v.raw, v.resumes, strings.Join(rs, " "))
}

// judge adds r's verdict for the accepted publishes of its channel.
func (r *resumer) judge(v *recVerdict, pubs []pub) {
	r.mu.Lock()
	defer r.mu.Unlock()
	v.subscribers++
	v.gaps += r.gaps
	v.raw += r.raw
	v.resumes += r.resumes
	for k, n := range r.reasons {
		v.reasons[k] += n
	}
	for _, n := range r.seen {
		if n > 1 {
			v.dup += n - 1
		}
	}
	if r.first.IsZero() {
		return
	}
	for _, p := range pubs {
		if p.at.Before(r.first) {
			continue
		}
		v.accepted++
		if r.seen[p.seq] > 0 {
			v.delivered++
			continue
		}
		told := false
		for _, at := range r.tolds {
			if !at.Before(p.at) && at.Sub(p.at) <= tellWithin {
				told = true
				break
			}
		}
		if told {
			v.told++
		} else {
			v.silent++
		}
	}
}

// recoveryVerdict judges every fan-out subscriber that resumes.
func (s *chaos) recoveryVerdict() recVerdict {
	v := recVerdict{reasons: map[string]int{}}
	for _, f := range s.fans {
		if f.rec == nil {
			continue
		}
		s.pub.mu.Lock()
		pubs := append([]pub(nil), s.pub.pubs[f.channel]...)
		s.pub.mu.Unlock()
		f.rec.judge(&v, pubs)
	}
	return v
}
