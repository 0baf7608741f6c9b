package webhooks

import (
	"context"
	"encoding/json"
	"strings"
	"time"
)

// opKind is which Store decision an event needs.
type opKind int

const (
	opPush opKind = iota
	opOccupy
	opVacate
	opMemberAdd
	opMemberRemove
	opCacheMiss
	opCount
)

// op is one event on its way into the store.
type op struct {
	kind               opKind
	app, channel, user string
	due                time.Time
	out                Out
	obs                []*outbox
	name               string // for logs
}

// Emit hands ev for appID to the store: for every URL whose event_types match ev["name"]
// (no event_types means all), after the decision its name calls for (occupancy, holds,
// once-per-occupation). It never blocks on the network: it encodes ev once and, with the
// memory store, queues it at once; with a shared store it puts it on a bounded queue that
// a goroutine of this package hands to the store in order (dropping, counted and logged,
// when that queue is full). Events for an app without webhooks cost one map lookup.
func (d *Dispatcher) Emit(appID string, ev Event) {
	name, _ := ev["name"].(string)
	if name == "" {
		d.dropped.Add(1)
		d.log.Error("webhook event without a name dropped", "app_id", appID)
		return
	}
	channel, _ := ev["channel"].(string)
	user, _ := ev["user_id"].(string)

	d.mu.RLock()
	defer d.mu.RUnlock()
	ar := d.routes[appID]
	if ar == nil {
		return
	}
	o := op{app: appID, channel: channel, user: user, name: name}
	now := time.Now()
	switch name {
	case ChannelOccupied, ChannelVacated:
		if !(ar.wants(ChannelOccupied) || ar.wants(ChannelVacated) || ar.wants(CacheMiss)) {
			return
		}
		o.kind, o.due = opOccupy, now.Add(d.hold)
		if name == ChannelVacated {
			o.kind = opVacate
		}
	case MemberAdded, MemberRemoved:
		if !(ar.wants(MemberAdded) || ar.wants(MemberRemoved)) {
			return
		}
		o.kind, o.due = opMemberAdd, now.Add(d.hold)
		if name == MemberRemoved {
			o.kind = opMemberRemove
		}
	case CacheMiss:
		o.kind = opCacheMiss
	case SubscriptionCount:
		// As Pusher: every channel type but presence, whose member events carry the count.
		if d.counter == nil || !ar.wants(SubscriptionCount) || strings.HasPrefix(channel, "presence-") {
			return
		}
		o.kind, o.due = opCount, now.Add(d.countDebounce)
	default:
		o.kind = opPush
	}
	switch o.kind {
	case opPush, opOccupy, opMemberAdd, opCacheMiss:
		o.obs = ar.targets(name)
		if len(o.obs) == 0 && o.kind != opOccupy && o.kind != opMemberAdd {
			return
		}
		if d.closed {
			d.dropped.Add(uint64(len(o.obs)))
			d.log.Warn("webhook event emitted after close dropped", "app_id", appID, "event", name)
			return
		}
		if len(o.obs) > 0 {
			raw, err := json.Marshal(ev)
			if err != nil {
				d.dropped.Add(1)
				d.log.Error("webhook event not encodable, dropped", "app_id", appID, "event", name, "error", err)
				return
			}
			o.out = d.outFor(o.obs, raw)
		}
	default:
		if d.closed {
			return
		}
	}
	if !d.shared {
		_ = d.exec(o) // the memory store cannot fail
		return
	}
	select {
	case d.ops <- o:
		d.opsCount.Add(int64(len(o.obs)))
	default:
		d.dropped.Add(uint64(max(len(o.obs), 1)))
		d.noteOverflow("webhook store queue full, event dropped", appID, "", 1)
	}
}

func (d *Dispatcher) outFor(obs []*outbox, raw []byte) Out {
	keys := make([]string, len(obs))
	for i, ob := range obs {
		keys[i] = ob.key
	}
	return Out{Keys: keys, Raw: raw, Limit: d.outboxLimit}
}

// exec runs one op against the store and wakes the outboxes it queued on. An error leaves
// the op undone (the caller may retry it).
func (d *Dispatcher) exec(o op) error {
	ctx, cancel := context.WithTimeout(d.ctx, opTimeout)
	defer cancel()
	s := d.store
	var err error
	var dropped int
	emitted := true
	switch o.kind {
	case opPush:
		dropped, err = s.Push(ctx, o.out)
	case opOccupy:
		emitted, err = s.Occupy(ctx, o.app, o.channel, o.out)
	case opVacate:
		err = s.Vacate(ctx, o.app, o.channel, o.due)
	case opMemberAdd:
		emitted, err = s.MemberAdd(ctx, o.app, o.channel, o.user, o.out)
	case opMemberRemove:
		err = s.MemberRemove(ctx, o.app, o.channel, o.user, o.due)
	case opCacheMiss:
		emitted, err = s.CacheMiss(ctx, o.app, o.channel, o.out)
	case opCount:
		err = s.Count(ctx, o.app, o.channel, o.due)
	}
	if err != nil {
		return err
	}
	if dropped > 0 {
		d.dropped.Add(uint64(dropped))
		d.noteOverflow("webhook outbox full, dropped oldest events", o.app, "", dropped)
	}
	if emitted {
		for _, ob := range o.obs {
			ob.poke(1)
		}
	}
	return nil
}

// storeRetryFor is how long an op is retried while a shared store is unreachable; the ops
// queue keeps later events (in order) meanwhile, up to OpsLimit.
const storeRetryFor = 30 * time.Second

// runOps hands queued work to a shared store, in order, retrying each op through a short
// outage.
func (d *Dispatcher) runOps() {
	defer close(d.opsDone)
	for o := range d.ops {
		began := time.Now()
		for {
			err := d.exec(o)
			if err == nil {
				break
			}
			if time.Since(began) >= storeRetryFor || d.ctx.Err() != nil {
				d.dropped.Add(uint64(max(len(o.obs), 1)))
				d.log.Error("webhook event lost: the store could not take it", "app_id", o.app, "event", o.name, "error", err)
				break
			}
			d.noteStoreError(err)
			if !sleepCtx(d.ctx, 250*time.Millisecond) {
				continue // the next attempt sees ctx ended and drops
			}
		}
		d.opsCount.Add(-int64(len(o.obs)))
	}
}

// noteStoreError logs an unreachable store at most every overflowLogEvery.
func (d *Dispatcher) noteStoreError(err error) {
	now := time.Now().UnixNano()
	last := d.storeErrLogged.Load()
	if last != 0 && now-last < int64(overflowLogEvery) {
		return
	}
	if d.storeErrLogged.CompareAndSwap(last, now) {
		d.log.Warn("webhook store unreachable; events wait in memory, in order", "error", err, "waiting", len(d.ops))
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// overflowLogEvery rate-limits overflow logs: a dead receiver under load would otherwise
// log once per dropped event.
const overflowLogEvery = 10 * time.Second

func (d *Dispatcher) noteOverflow(msg, appID, logURL string, n int) {
	now := time.Now().UnixNano()
	last := d.overflowLogged.Load()
	if last != 0 && now-last < int64(overflowLogEvery) {
		return
	}
	if d.overflowLogged.CompareAndSwap(last, now) {
		d.log.Warn(msg, "app_id", appID, "dropped", n, "limit", d.outboxLimit)
	}
}
