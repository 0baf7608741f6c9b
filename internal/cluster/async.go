package cluster

import (
	"context"

	"github.com/reverbgo/reverbgo/channels"
)

var _ channels.AsyncPublisher = (*RedisBroker)(nil)

// PublishAsync implements AsyncPublisher. RedisBroker.Publish already queues for its single
// writer goroutine and never waits on Redis (see Publish), so this is Publish; the queue is
// shared, which keeps one node's publishes in order whichever path made them.
func (b *RedisBroker) PublishAsync(m channels.Message) error {
	return b.Publish(context.Background(), m)
}
