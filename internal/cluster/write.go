package cluster

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/reverbgo/reverbgo/channels"
)

// The broker's writer: one goroutine sends the queue to Redis in pipelined batches, keeps a
// failed batch and retries it in order, drops what waited past MaxAge or was withdrawn, and
// acknowledges PublishAcked requests once their pipeline succeeded.

// write is the only sender to Redis: batches keep the publish order of this node.
func (b *RedisBroker) write() {
	defer close(b.wdone)
	batch := make([]outbound, 0, publishBatch)
	backoff := time.Duration(0)
	open := true
	for {
		if len(batch) == 0 {
			if !open {
				return
			}
			o, ok := <-b.queue
			if !ok {
				return
			}
			b.slots.Add(-1)
			batch = append(batch, o)
		fill:
			for len(batch) < publishBatch {
				select {
				case o, ok := <-b.queue:
					if !ok {
						open = false
						break fill
					}
					b.slots.Add(-1)
					batch = append(batch, o)
				default:
					break fill
				}
			}
		}
		// While a sentinel runs a failover of the master, writes wait for the switch (a write
		// the old master takes after the promotion is lost with it). What waited past MaxAge
		// or was withdrawn meanwhile is dropped below, unsent.
		held, err := b.rc.AwaitWritable(b.drain)
		if err != nil {
			b.abandon(batch)
			return
		}
		if held {
			// The switch that ended the hold re-makes every subscription on the new master:
			// a batch sent there before they are would reach no node (pub/sub keeps nothing).
			b.awaitSubs()
		}
		batch = b.dropExpired(b.dropWithdrawn(batch))
		if len(batch) == 0 {
			continue
		}
		if err := b.send(batch); err != nil {
			if !b.pubDown.Swap(true) {
				b.log.Warn("redis publish failed; queued for retry, delivered on this node", "error", err, "node", b.node, "queued", len(batch))
			}
			backoff = min(max(backoff*2, 50*time.Millisecond), time.Second)
			select {
			case <-b.drain.Done():
				b.abandon(batch)
				return
			case <-time.After(backoff):
			}
			b.awaitSubs()
			continue
		}
		if b.pubDown.Swap(false) {
			b.log.Info("redis publish restored; backlog sent", "node", b.node)
		}
		backoff = 0
		for _, o := range batch {
			b.backlog.Add(-cost(o.m))
			if b.cache != nil && o.m.Cacheable && channels.KindOf(o.m.Channel).IsCache() {
				b.pending.add(o.m.AppID, o.m.Channel, -1)
			}
			if o.ack != nil {
				o.ack.accepted()
			}
		}
		clear(batch)
		batch = batch[:0]
	}
}

// abandon fails batch and the rest of the (closed) queue with ErrBrokerClosed: Close
// stopped waiting for the writer.
func (b *RedisBroker) abandon(batch []outbound) {
	b.dropped.Add(int64(len(batch) + len(b.queue)))
	for _, o := range batch {
		if o.ack != nil {
			o.ack.failed(ErrBrokerClosed)
		}
	}
	for o := range b.queue {
		if o.ack != nil {
			o.ack.failed(ErrBrokerClosed)
		}
	}
}

// Bounds of the writer's wait for the subscriptions after a failed publish.
const (
	resendWait  = 3 * time.Second
	resendGrace = 250 * time.Millisecond
)

// awaitSubs holds a retried batch until this node's subscription connections are live again
// (bounded by resendWait): after a failover every node re-makes its subscriptions on the new
// master, and a backlog sent before they are there is delivered to nobody. When it had to
// wait it gives the other nodes resendGrace more, as they heard of the change at about the
// same moment.
func (b *RedisBroker) awaitSubs() {
	if b.subsUp() {
		return
	}
	deadline := time.Now().Add(resendWait)
	for !b.subsUp() && time.Now().Before(deadline) {
		select {
		case <-b.drain.Done():
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
	select {
	case <-b.drain.Done():
	case <-time.After(resendGrace):
	}
}

// dropExpired drops queued envelopes older than MaxAge: after a long outage a stale event
// is worse than a missing one.
func (b *RedisBroker) dropExpired(batch []outbound) []outbound {
	cut := time.Now().Add(-b.maxAge)
	n := 0
	for n < len(batch) && batch[n].at.Before(cut) {
		b.forget(batch[n])
		if a := batch[n].ack; a != nil {
			a.failed(channels.ErrPublishTimeout)
		}
		n++
	}
	if n > 0 {
		b.dropped.Add(int64(n))
		b.log.Warn("dropped publishes that waited too long for redis", "count", n, "max_age", b.maxAge.String(), "node", b.node)
	}
	return batch[n:]
}

// known is the highest position this node saw Redis give a recovery channel: its stream's
// (what it delivered) or, with no local subscriber, what its own appends were answered
// (writer goroutine only).
func (b *RedisBroker) known(app, ch string) channels.Position {
	if st := b.streams.Load(); st != nil {
		if pos, ok := st.Known(app, ch); ok {
			return pos
		}
	}
	return b.appended[key{app, ch}].pos
}

// sawAppended records the position an append of this node was given, kept for the
// channel's history TTL (writer goroutine only; swept once a minute).
func (b *RedisBroker) sawAppended(m channels.Message, pos channels.Position) {
	now := time.Now()
	if b.appended == nil {
		b.appended, b.appendedSweep = map[key]appendedPos{}, now
	}
	if now.Sub(b.appendedSweep) > time.Minute {
		for k, a := range b.appended {
			if now.After(a.until) {
				delete(b.appended, k)
			}
		}
		b.appendedSweep = now
	}
	b.appended[key{m.AppID, m.Channel}] = appendedPos{pos, now.Add(max(m.Recovery.TTL, time.Second))}
}

type appendedPos struct {
	pos   channels.Position
	until time.Time
}

// forget releases what a queued message held (backlog bytes, its pending cache count).
func (b *RedisBroker) forget(o outbound) {
	b.backlog.Add(-cost(o.m))
	if b.cache != nil && o.m.Cacheable && channels.KindOf(o.m.Channel).IsCache() {
		b.pending.add(o.m.AppID, o.m.Channel, -1)
	}
}

// dropWithdrawn drops the messages of PublishAcked requests whose caller gave up (answered
// 503) before the writer took them (they must not be delivered after all) or before a
// retry of the pipeline that carried them, and marks the others' requests sent.
func (b *RedisBroker) dropWithdrawn(batch []outbound) []outbound {
	n := 0
	for _, o := range batch {
		if o.ack != nil && ((o.env == nil && !o.ack.take()) || (o.env != nil && !o.ack.retry())) {
			b.forget(o)
			o.ack.failed(channels.ErrPublishTimeout)
			continue
		}
		batch[n] = o
		n++
	}
	clear(batch[n:])
	return batch[:n]
}

// send writes one batch in one pipeline: each cache channel's SET, then its PUBLISH.
func (b *RedisBroker) send(batch []outbound) error {
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	pipe := b.rc.Pipeline()
	var scripts []*redis.Cmd
	var scripted []int // batch index of each script
	for i := range batch {
		o := &batch[i]
		serialled := o.m.Recovery != nil && b.hist != nil
		if o.env == nil {
			b.seq++
			o.seq = b.seq
			e := envelope{node: b.node, seq: o.seq, echo: o.ack != nil, m: o.m}
			if serialled {
				o.env = envelopePrefix(e, 0) // the script adds the epoch and the frame
			} else {
				o.env = encodeEnvelope(e)
			}
		}
		if b.cache != nil && o.m.Cacheable && channels.KindOf(o.m.Channel).IsCache() {
			b.cache.set(ctx, pipe, o.m.AppID, o.m.Channel, o.m.Frame)
		}
		to := b.channel
		if b.router != nil {
			to = b.keys.Topic(o.m.AppID, o.m.Channel)
		}
		switch {
		case serialled:
			scripts = append(scripts, b.hist.AppendCmd(ctx, pipe, o.m.AppID, o.m.Channel, *o.m.Recovery, o.m.Except, o.m.Frame, to, o.env, b.node, o.seq,
				b.known(o.m.AppID, o.m.Channel)))
			scripted = append(scripted, i)
		case b.rc.Sharded():
			pipe.SPublish(ctx, to, o.env)
		default:
			pipe.Publish(ctx, to, o.env)
		}
	}
	_, err := pipe.Exec(ctx)
	loaded := false
	for i, c := range scripts {
		o := &batch[scripted[i]]
		if pos, _, aerr := HistoryAppendedAt(c); aerr == nil && pos.Serial > 0 {
			b.sawAppended(o.m, pos)
		}
		var rerr redis.Error
		if cerr := c.Err(); cerr != nil && errors.As(cerr, &rerr) {
			// Redis answered with an error: the script did not run. The retry sends it under
			// a new sequence number, above the later ones of this batch that did run and
			// that every receiver has seen (the same number would be dropped as old).
			if err == nil {
				err = cerr
			}
			o.env = nil
		}
		if IsNoScript(c.Err()) && !loaded {
			// This Redis lost its script cache (a restart, a failover): load the scripts; the
			// writer retries the batch, and the scripts skip what already ran (node, seq).
			if lerr := LoadScripts(ctx, b.rc); lerr != nil {
				b.warn("loading the history scripts failed", lerr)
			}
			loaded = true
		}
	}
	return err
}
