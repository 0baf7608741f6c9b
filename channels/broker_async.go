package channels

import "context"

// AsyncPublisher is implemented by a Broker whose publish never waits for the network:
// PublishAsync delivers on this node at once and queues the message for the others, so the
// pollers that read every socket may call it. It may refuse (and then deliver nothing) when
// its queue is full.
type AsyncPublisher interface {
	PublishAsync(m Message) error
}

var _ AsyncPublisher = (*RedisBroker)(nil)

// PublishAsync implements AsyncPublisher. RedisBroker.Publish already queues for its single
// writer goroutine and never waits on Redis (see Publish), so this is Publish; the queue is
// shared, which keeps one node's publishes in order whichever path made them.
func (b *RedisBroker) PublishAsync(m Message) error {
	return b.Publish(context.Background(), m)
}
