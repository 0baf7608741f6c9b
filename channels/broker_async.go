package channels

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// AsyncPublisher is implemented by a Broker that can hand a publish to other nodes
// without waiting for the network: PublishAsync delivers on this node at once and queues the
// message for the others. It never blocks; it returns ErrPublishQueueFull when the queue is
// full (the local delivery has still happened).
type AsyncPublisher interface {
	PublishAsync(m Message) error
}

// ErrPublishQueueFull says a publish reached this node's subscribers but not the cluster.
var ErrPublishQueueFull = errors.New("channels: cluster publish queue full; delivered on this node only")

// asyncQueueSize bounds the publishes waiting for Redis; asyncBatch is how many one round
// trip carries (pipelined); asyncTimeout is each round trip's deadline.
const (
	asyncQueueSize = 8192
	asyncBatch     = 128
	asyncTimeout   = 2 * time.Second
)

// asyncState is the RedisBroker's outbound queue: one goroutine, started on first use,
// drains it in order, so a connection's publishes reach other nodes in the order it made
// them, and a Redis that stops answering costs queue slots, never a caller's time.
type asyncState struct {
	once    sync.Once
	q       chan []byte
	dropped atomic.Uint64
}

var _ AsyncPublisher = (*RedisBroker)(nil)

// PublishAsync implements AsyncPublisher.
func (b *RedisBroker) PublishAsync(m Message) error {
	if d := b.deliver.Load(); d != nil {
		(*d)(m)
	}
	b.async.once.Do(func() {
		b.async.q = make(chan []byte, asyncQueueSize)
		go b.sendLoop()
	})
	select {
	case b.async.q <- encodeEnvelope(b.node, m):
		return nil
	default:
		b.async.dropped.Add(1)
		b.warn("cluster publish queue full; delivered on this node only", ErrPublishQueueFull)
		return ErrPublishQueueFull
	}
}

// AsyncDropped counts publishes PublishAsync could not queue for the cluster.
func (b *RedisBroker) AsyncDropped() uint64 { return b.async.dropped.Load() }

// sendLoop PUBLISHes queued envelopes, pipelining what has piled up, until Close.
func (b *RedisBroker) sendLoop() {
	batch := make([][]byte, 0, asyncBatch)
	for {
		select {
		case <-b.ctx.Done():
			return
		case e := <-b.async.q:
			batch = append(batch[:0], e)
		}
	fill:
		for len(batch) < asyncBatch {
			select {
			case e := <-b.async.q:
				batch = append(batch, e)
			default:
				break fill
			}
		}
		ctx, cancel := context.WithTimeout(b.ctx, asyncTimeout)
		var err error
		if len(batch) == 1 {
			err = b.rdb.Publish(ctx, b.channel, batch[0]).Err()
		} else {
			pipe := b.rdb.Pipeline()
			for _, e := range batch {
				pipe.Publish(ctx, b.channel, e)
			}
			_, err = pipe.Exec(ctx)
		}
		cancel()
		if err != nil && b.ctx.Err() == nil {
			b.warn("redis publish failed; delivered on this node only", err)
		}
		clear(batch)
	}
}
