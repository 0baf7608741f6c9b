package channels

import (
	"context"
	"errors"
)

// The seams between the registry and a broker or store that reaches other nodes (the Redis
// implementations are in internal/cluster).

// Router is implemented by a Broker that carries a channel's publishes only to the nodes
// with a local subscriber of it (cluster.RedisBroker under cluster.RoutingInterest). The
// Registry calls Want when a channel gets its first local subscriber and Unwant when it loses
// its last, under the channel's lock: neither may block. WhenRouted runs fn(true) once the node's
// subscription to the channel is in effect (at once when it is, or when the broker does not
// route), or fn(false) when the channel lost its last local subscriber first (nobody is left
// to answer); fn runs on a broker goroutine or the caller's and must not block.
type Router interface {
	Want(app, channel string)
	Unwant(app, channel string)
	WhenRouted(app, channel string, fn func(routed bool))
}

// Occupancy hears about every local subscription change; the Registry calls it after the
// change, outside its locks. It must not block for long.
type Occupancy interface {
	Subscribed(app, channel, socketID string)
	Unsubscribed(app, channel, socketID string)
}

// ErrPublishTimeout is PublishAcked's answer when Redis did not accept the request's events
// within its context: none was sent (it was withdrawn from the queue), or, when the writer
// had already sent it, Redis's answer did not come in time and it may still be delivered.
var ErrPublishTimeout = errors.New("redis did not accept the publish in time")

// AckBroker is a Broker whose publishes can wait for the cluster to have them: PublishAcked
// returns nil only once every message is in Redis (published; a recovery event with its
// serial and in its history), and then every node delivers them from Redis, in Redis's
// order, the publishing node too. An event whose request started after another's nil is
// therefore delivered after it everywhere.
type AckBroker interface {
	PublishAcked(ctx context.Context, ms []Message) error
}

// AsyncPublisher is implemented by a Broker whose publish never waits for the network:
// PublishAsync delivers on this node at once and queues the message for the others, so the
// pollers that read every socket may call it. It may refuse (and then deliver nothing) when
// its queue is full.
type AsyncPublisher interface {
	PublishAsync(m Message) error
}

// The reasons a recovery channel's subscribers are told that events were not delivered in
// serial order (the pusher:resume_failed contract).
const (
	ResumeEpochChanged = "epoch_changed"
	ResumeTooOld       = "too_old"
)
