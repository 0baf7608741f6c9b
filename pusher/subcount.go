package pusher

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/reverbgo/reverbgo/channels"
)

// Pusher's subscription counts (apps[].subscription_count): every subscriber of a channel
// that is not presence gets pusher_internal:subscription_count with the channel's
// cluster-wide count when it changes, at most once a second per channel and node (the last
// value wins), and so once right after its own subscription_succeeded (the change it caused
// is the next count sent, and the barrier keeps the answer first). pusher-js hands it to
// channel.bind('pusher:subscription_count', ...).
//
// A change on this node schedules a send: at once when the channel's last send was at least
// countEvery ago, else at the end of that second. The count is read when the send fires and
// published through the broker, so every node's subscribers get it. With scaling, other
// nodes' counts reach Redis in batches: a send is followed by one more a second later (a
// recheck), so the last value everyone sees includes what was still in flight.

// countEvery is the shortest time between two counts of a channel sent by one node.
const countEvery = time.Second

// subCounts is the server's per-channel throttle of subscription counts.
type subCounts struct {
	s     *Server
	mu    sync.Mutex
	chans map[countKey]*countState
}

type countKey struct{ app, channel string }

type countState struct {
	last    time.Time   // when the last count was sent
	timer   *time.Timer // a send scheduled
	recheck bool        // the scheduled send is the recheck after a send
}

// wantsCount reports whether the app sends subscription counts for channel.
func (s *Server) wantsCount(appID, channel string) bool {
	a := s.appByID(appID)
	return a != nil && a.cfg().SubscriptionCount && !channels.KindOf(channel).IsPresence() && !channels.IsInternal(channel)
}

// countChanged schedules a subscription count of the channel (see above).
func (c *subCounts) changed(app, ch string) {
	k := countKey{app, ch}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.chans == nil {
		c.chans = map[countKey]*countState{}
	}
	st := c.chans[k]
	if st == nil {
		st = &countState{}
		c.chans[k] = st
	}
	if st.timer != nil {
		st.recheck = false // a change came: the scheduled send counts as one, and rechecks
		return
	}
	wait := countEvery - time.Since(st.last)
	st.timer = time.AfterFunc(max(wait, 0), func() { c.fire(k) })
}

// fire reads the channel's count and publishes it to every subscriber.
func (c *subCounts) fire(k countKey) {
	c.mu.Lock()
	st := c.chans[k]
	if st == nil {
		c.mu.Unlock()
		return
	}
	wasRecheck := st.recheck
	st.timer, st.last, st.recheck = nil, time.Now(), false
	c.mu.Unlock()
	select {
	case <-c.s.stop:
		return
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	n := c.s.subscriptionCount(ctx, k.app, k.channel)
	cancel()
	data := `{"subscription_count":` + strconv.Itoa(n) + `}`
	_ = c.s.publishNoWait(k.app, k.channel, "pusher_internal:subscription_count", data, "")
	c.mu.Lock()
	defer c.mu.Unlock()
	if st.timer != nil {
		return // a change came while this ran: its send follows
	}
	if c.s.cluster != nil && !wasRecheck {
		st.recheck = true
		st.timer = time.AfterFunc(countEvery, func() { c.fire(k) })
		return
	}
	if c.s.reg.SubscriptionCount(k.app, k.channel) == 0 {
		delete(c.chans, k) // nobody here to tell; the entry comes back with the next change
	}
}
