package webhooks

import (
	"context"
	"encoding/json"
	"time"
)

// maxDuePerTick bounds the holds fired per tick so one tick cannot run for long.
const maxDuePerTick = 1000

// ticker fires due holds every tick and, on a shared store, polls every outbox every Poll
// (dead nodes are the node registry's: see RedisStore.ReapNode).
func (d *Dispatcher) ticker() {
	defer close(d.tickDone)
	t := time.NewTicker(tick)
	defer t.Stop()
	var lastPoll time.Time
	for {
		now := time.Now()
		d.fireDue(now)
		if d.shared && now.Sub(lastPoll) >= d.poll {
			lastPoll = now
			d.pollOutboxes()
		}
		select {
		case <-d.tickStop:
			return
		case <-t.C:
		}
	}
}

// fireDue sends the holds whose time has come: channel_vacated and member_removed that
// nothing cancelled, and debounced subscription_count with the count as of now.
func (d *Dispatcher) fireDue(now time.Time) {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	for fired := 0; fired < maxDuePerTick; {
		holds, err := d.store.Due(ctx, now, 100)
		if err != nil {
			d.log.Warn("webhook holds not readable", "error", err)
			return
		}
		if len(holds) == 0 {
			return
		}
		progress := false
		for _, h := range holds {
			ok, obs := d.fire(ctx, h, now)
			if ok {
				progress = true
				fired++
				for _, ob := range obs {
					ob.poke(1)
				}
			}
		}
		if !progress || len(holds) < 100 {
			return
		}
	}
}

func (d *Dispatcher) fire(ctx context.Context, h Hold, now time.Time) (bool, []*outbox) {
	var ev Event
	switch h.Kind {
	case HoldVacated:
		ev = Event{"name": ChannelVacated, "channel": h.Channel}
	case HoldRemoved:
		ev = Event{"name": MemberRemoved, "channel": h.Channel, "user_id": h.User}
	case HoldCount:
		ev = Event{"name": SubscriptionCount, "channel": h.Channel}
	}
	name := ev["name"].(string)
	d.mu.RLock()
	obs := d.routes[h.App].targets(name)
	counter := d.counter
	d.mu.RUnlock()

	var out Out
	if len(obs) > 0 {
		if h.Kind == HoldCount {
			if counter == nil {
				obs = nil
			} else {
				n, err := counter(ctx, h.App, h.Channel)
				if err != nil {
					d.log.Warn("subscription_count not known; sent at the next change", "app_id", h.App, "error", err)
					obs = nil
				}
				ev["subscription_count"] = n
			}
		}
		if len(obs) > 0 {
			raw, _ := json.Marshal(ev) // strings and an int: cannot fail
			out = d.outFor(obs, raw)
		}
	}
	ok, err := d.store.Fire(ctx, h, now, out)
	if err != nil {
		d.log.Warn("webhook hold not fired; retried at the next tick", "app_id", h.App, "event", name, "error", err)
		return false, nil
	}
	return ok, obs
}

// pollOutboxes wakes every outbox so this node sends what other nodes queued or left
// behind (a lease that expired with its owner), and records the cluster's outbox size.
func (d *Dispatcher) pollOutboxes() {
	d.mu.RLock()
	obs := make([]*outbox, 0, len(d.outboxes))
	for _, ob := range d.outboxes {
		obs = append(obs, ob)
	}
	d.mu.RUnlock()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	var total int64
	for _, ob := range obs {
		n, err := d.store.Size(ctx, ob.key)
		if err != nil {
			return
		}
		total += int64(n)
		if n > 0 {
			ob.poke(0)
		}
	}
	d.sharedSize.Store(total)
	d.countLost(obs)
}

// countLost counts as dropped what the store lost of the events this node queued (a Redis
// restarted without persistence or wiped): the events, and one batch per outbox.
func (d *Dispatcher) countLost(obs []*outbox) {
	lost := d.store.Lost()
	if len(lost) == 0 {
		return
	}
	for _, ob := range obs {
		n := lost[ob.key]
		if n == 0 {
			continue
		}
		delete(lost, ob.key)
		d.dropped.Add(uint64(n))
		d.droppedBatches.Add(1)
		d.log.Warn("webhook events lost with the store's data (Redis restarted without persistence or wiped); counted dropped",
			"app_id", ob.appID, "url", ob.logURL, "events", n)
	}
	for _, n := range lost { // outboxes no longer known here
		d.dropped.Add(uint64(n))
		d.droppedBatches.Add(1)
		d.log.Warn("webhook events lost with the store's data; counted dropped", "events", n)
	}
}
