package cluster

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/reverbgo/reverbgo/channels"
)

// Ack states: the request waits in the queue, the writer took it into a pipeline, or the
// caller gave up before that (the writer then drops it unsent).
const (
	ackQueued int32 = iota
	ackSent
	ackWithdrawn
	ackAbandoned // the caller gave up after the writer sent it: not sent again on a retry
)

// pubAck is one PublishAcked request's acknowledgement, shared by its messages.
type pubAck struct {
	left  atomic.Int32 // messages not yet accepted by Redis
	state atomic.Int32
	err   atomic.Pointer[error]
	once  sync.Once
	done  chan struct{}
}

func newPubAck(n int) *pubAck {
	a := &pubAck{done: make(chan struct{})}
	a.left.Store(int32(n))
	return a
}

// accepted counts one message in Redis; the last one releases the caller.
func (a *pubAck) accepted() {
	if a.left.Add(-1) == 0 {
		a.once.Do(func() { close(a.done) })
	}
}

// failed releases the caller with err (the message was dropped); later calls do nothing.
func (a *pubAck) failed(err error) {
	if a.err.CompareAndSwap(nil, &err) {
		a.once.Do(func() { close(a.done) })
	}
}

// take is the writer's, before it sends a message the first time: true when it goes out
// (marks the request sent), false when the caller withdrew it.
func (a *pubAck) take() bool {
	return a.state.CompareAndSwap(ackQueued, ackSent) || a.state.Load() == ackSent
}

// retry is the writer's, before it sends a message again after a failed pipeline: false
// when the caller was answered 503 meanwhile (the pipeline that failed may still have
// reached Redis; sending it again would only deliver it later still).
func (a *pubAck) retry() bool { return a.state.Load() != ackAbandoned }

// PublishAcked implements AckBroker: ms are queued all or nothing (ErrBacklog, as
// PublishAll), not delivered here, and the call returns once the writer's pipeline that
// carried the last of them succeeded, or with ErrPublishTimeout when ctx ends first.
func (b *RedisBroker) PublishAcked(ctx context.Context, ms []channels.Message) error {
	if len(ms) == 0 {
		return nil
	}
	a := newPubAck(len(ms))
	if err := b.enqueue(ms, a); err != nil {
		return err
	}
	select {
	case <-a.done:
		if e := a.err.Load(); e != nil {
			return *e
		}
		return nil
	case <-ctx.Done():
		if a.state.CompareAndSwap(ackQueued, ackWithdrawn) {
			return channels.ErrPublishTimeout // never sent: the writer drops it
		}
		select { // sent: its pipeline may be answering right now
		case <-a.done:
			if e := a.err.Load(); e != nil {
				return *e
			}
			return nil
		default:
			a.state.CompareAndSwap(ackSent, ackAbandoned)
			return channels.ErrPublishTimeout
		}
	}
}
