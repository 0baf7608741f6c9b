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
	// bounds: the broker gives Frame the channel's next serial where the event enters its
	// order (the Redis script, atomically with its publish; the memory broker's History,
	// under the channel's lock), so every node delivers it with the serial. nil for
	// everything else.
	Recovery *HistoryLimits
	// Member, on a presence channel's pusher_internal:member_added / member_removed, is
	// what the event tells (the zero value on every other message): the registry keeps its
	// announced sets from it without reading Frame, and it crosses nodes in the envelope.
	Member MemberEvent
}

// MemberEvent is the meaning of a presence member event: which user was added or removed.
type MemberEvent struct {
	Kind   MemberKind
	UserID string
}

// MemberKind tells a member_added from a member_removed; NotMember marks any other message.
type MemberKind uint8

const (
	NotMember MemberKind = iota
	MemberAdded
	MemberRemoved
)

// Broker carries publishes to every node. Each node's broker calls the registry's
// DeliverLocal for every message, including its own. Publish must not wait on the network
// (cluster.RedisBroker queues for its writer): the goroutines that read sockets call it.
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
	hist    History // gives recovery messages their serial (SetHistory); nil = none
}

// SetHistory makes the broker give recovery messages (Message.Recovery) their serial from
// h as it delivers them, in serial order. Call it before the first publish.
func (b *MemoryBroker) SetHistory(h History) { b.hist = h }

var _ Broker = (*MemoryBroker)(nil)

// NewMemoryBroker delivers every publish through deliver.
func NewMemoryBroker(deliver func(Message) int) *MemoryBroker {
	return &MemoryBroker{deliver: deliver}
}

// Publish delivers m synchronously; it only queues frames, never writes to sockets. A
// recovery message is kept by the History with its serial and delivered under the
// channel's lock, so deliveries keep serial order.
func (b *MemoryBroker) Publish(ctx context.Context, m Message) error {
	if m.Recovery == nil || b.hist == nil {
		b.deliver(m)
		return nil
	}
	return b.publishSerialled(ctx, m)
}

// publishSerialled is Publish of a recovery message (apart, so that the closure's m does
// not move every publish's message to the heap).
func (b *MemoryBroker) publishSerialled(ctx context.Context, m Message) error {
	_, _, err := b.hist.Append(ctx, m.AppID, m.Channel, *m.Recovery, m.Except, m.Frame, func(_ uint64, frame []byte) {
		m.Frame = frame
		b.deliver(m)
	})
	return err
}

// Close does nothing: there is no connection to release.
func (b *MemoryBroker) Close() error { return nil }
