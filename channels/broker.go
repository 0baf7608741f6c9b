package channels

import "context"

// Message is one publish: a pre-encoded frame for every subscriber of a channel but Except.
type Message struct {
	AppID   string
	Channel string
	Frame   []byte
	Except  string // socket id not to deliver to ("" = none)
	// Cacheable marks an app event that a cache channel remembers for late subscribers;
	// client events and pusher_internal events are never replayed.
	Cacheable bool
	// Recovery, on an HTTP API event of a recovery channel (issue 23), is its history's
	// bounds: a broker that AssignsSerials gives Frame the channel's next serial where the
	// event enters Redis, atomically with its publish. nil for everything else.
	Recovery *HistoryLimits
}

// SerialBroker is a Broker that gives recovery messages (Message.Recovery) their serial
// itself, as part of their publish (the cluster's, RedisBroker with a History): a
// publisher hands such messages over unserialled and they are delivered, on every node,
// with the serial. A broker without it gets messages whose serial the History gave.
type SerialBroker interface {
	AssignsSerials() bool
}

// Broker carries publishes to every node. Each node's broker calls the registry's
// DeliverLocal for every message, including its own. Publish must not wait on the network
// (RedisBroker queues for its writer): the goroutines that read sockets call it.
type Broker interface {
	Publish(ctx context.Context, m Message) error
	Close() error
}

// BatchBroker is a Broker that can publish several messages all or nothing.
type BatchBroker interface {
	PublishAll(ctx context.Context, ms []Message) error
}

// MemoryBroker is the single-node broker: a publish is delivered locally at once. It is a
// real product for one process, not a test double.
type MemoryBroker struct {
	deliver func(Message) int
}

var _ Broker = (*MemoryBroker)(nil)

// NewMemoryBroker delivers every publish through deliver.
func NewMemoryBroker(deliver func(Message) int) *MemoryBroker {
	return &MemoryBroker{deliver: deliver}
}

// Publish delivers m synchronously; it only queues frames, never writes to sockets.
func (b *MemoryBroker) Publish(_ context.Context, m Message) error {
	b.deliver(m)
	return nil
}

// Close does nothing: there is no connection to release.
func (b *MemoryBroker) Close() error { return nil }
