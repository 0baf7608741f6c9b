package channels

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultScalingChannel is the Redis pub/sub channel of the cluster (Reverb's default).
const DefaultScalingChannel = "reverb"

// envelopeMagic starts every envelope; a message without it (another Reverb implementation
// sharing the channel, a newer format) is dropped instead of being delivered as garbage.
const envelopeMagic = "rg1"

// receiveTimeout is how long the receive loop waits for traffic before it pings the
// subscription connection, so a dead connection is noticed and redialled.
const receiveTimeout = 15 * time.Second

// RedisBrokerOptions configure a RedisBroker.
type RedisBrokerOptions struct {
	// Channel is the pub/sub channel shared by every node (default DefaultScalingChannel).
	Channel string
	// NodeID identifies this process in envelopes (default NewNodeID()). Every node of a
	// cluster needs a distinct one; a restarted process should take a new one.
	NodeID string
	// Logger receives outage and recovery lines; nil = slog.Default().
	Logger *slog.Logger
}

// RedisBroker is the cluster Broker. A publish is delivered to this node's subscribers at
// once and PUBLISHed as one envelope; every node holds ONE subscription and hands other
// nodes' envelopes to DeliverLocal, which only queues frames, so the receive loop never
// waits on a slow socket. The envelope carries the ready WebSocket frame: receivers queue the
// same bytes without re-encoding (the frame header is at most 10 bytes).
//
// During a Redis outage Publish still delivers locally and returns the error, and the
// receive loop redials with exponential backoff; nothing panics or blocks for long.
type RedisBroker struct {
	rdb     redis.UniversalClient
	channel string
	node    string
	log     *slog.Logger
	ps      *redis.PubSub

	deliver  atomic.Pointer[func(Message) int]
	down     atomic.Bool // the subscription is not live
	lastWarn atomic.Int64
	ctx      context.Context
	cancel   context.CancelFunc
	start    sync.Once
	started  bool // set inside start; read after start.Do
	done     chan struct{}
	async    asyncState // PublishAsync's queue (broker_async.go)
}

var _ Broker = (*RedisBroker)(nil)

// NewNodeID returns a random node id (16 hex digits).
func NewNodeID() string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("channels: crypto/rand failed: " + err.Error())
	}
	return hex.EncodeToString(b[:])
}

// NewRedisBroker subscribes to the cluster channel. When Redis is unreachable it still
// returns a broker (the node serves its own sockets and the receive loop keeps redialling)
// together with the error, so the caller may decide to refuse to start instead. Call Start
// with the registry's DeliverLocal to begin delivering; the client stays the caller's.
func NewRedisBroker(ctx context.Context, rdb redis.UniversalClient, opts RedisBrokerOptions) (*RedisBroker, error) {
	if opts.Channel == "" {
		opts.Channel = DefaultScalingChannel
	}
	if opts.NodeID == "" {
		opts.NodeID = NewNodeID()
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	b := &RedisBroker{rdb: rdb, channel: opts.Channel, node: opts.NodeID, log: opts.Logger, done: make(chan struct{})}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	// Subscribe remembers the channel even when it fails, so a later redial resubscribes.
	b.ps = rdb.Subscribe(ctx, b.channel)
	if _, err := b.ps.Receive(ctx); err != nil { // wait for the subscription to be live
		b.down.Store(true)
		return b, err
	}
	return b, nil
}

// NodeID returns the id this broker stamps on its envelopes.
func (b *RedisBroker) NodeID() string { return b.node }

// Start begins handing other nodes' messages to deliver (normally Registry.DeliverLocal)
// and uses it for local delivery of this node's publishes. Only the first call counts.
func (b *RedisBroker) Start(deliver func(Message) int) {
	b.start.Do(func() {
		b.deliver.Store(&deliver)
		b.started = true
		go b.receive()
	})
}

// Healthy reports whether the subscription is live.
func (b *RedisBroker) Healthy() bool { return !b.down.Load() }

// Publish delivers m on this node, then sends it to the others. A Redis error is returned
// (and logged at most once a second) after the local delivery has happened.
func (b *RedisBroker) Publish(ctx context.Context, m Message) error {
	if d := b.deliver.Load(); d != nil {
		(*d)(m)
	}
	err := b.rdb.Publish(ctx, b.channel, encodeEnvelope(b.node, m)).Err()
	if err != nil {
		b.warn("redis publish failed; delivered on this node only", err)
	}
	return err
}

// Close stops the receive loop and releases the subscription.
func (b *RedisBroker) Close() error {
	b.cancel()
	err := b.ps.Close()
	b.start.Do(func() {}) // no Start after Close; a broker never started has no loop to wait for
	if b.started {
		<-b.done
	}
	return err
}

func (b *RedisBroker) warn(msg string, err error) {
	now := time.Now().UnixNano()
	last := b.lastWarn.Load()
	if now-last < int64(time.Second) || !b.lastWarn.CompareAndSwap(last, now) {
		return
	}
	b.log.Warn(msg, "error", err, "node", b.node)
}

// receive is the node's only reader of the cluster channel.
func (b *RedisBroker) receive() {
	defer close(b.done)
	deliver := *b.deliver.Load()
	backoff := time.Duration(0)
	for {
		msg, err := b.ps.ReceiveTimeout(b.ctx, receiveTimeout)
		if b.ctx.Err() != nil {
			return
		}
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && !b.down.Load() {
				// Quiet channel: a ping proves the connection (its pong is the next message).
				_ = b.ps.Ping(b.ctx)
				continue
			}
			if !b.down.Swap(true) {
				b.log.Warn("redis subscription lost; serving this node's sockets only", "error", err, "node", b.node)
			}
			backoff = min(max(backoff*2, 100*time.Millisecond), 5*time.Second)
			select {
			case <-b.ctx.Done():
				return
			case <-time.After(backoff):
			}
			continue
		}
		backoff = 0
		if b.down.Swap(false) {
			b.log.Info("redis subscription restored", "node", b.node)
		}
		m, ok := msg.(*redis.Message)
		if !ok {
			continue // *redis.Subscription after a redial, *redis.Pong
		}
		node, dm, ok := decodeEnvelope([]byte(m.Payload))
		if !ok {
			b.warn("dropping a malformed message on the scaling channel", errors.New("bad envelope"))
			continue
		}
		if node == b.node {
			continue // delivered locally by Publish
		}
		deliver(dm)
	}
}

// encodeEnvelope lays out magic, then node, app, channel and except as uvarint-length
// strings, then the frame as the rest: binary-safe and decoded without a parser.
func encodeEnvelope(node string, m Message) []byte {
	buf := make([]byte, 0, len(envelopeMagic)+4*binary.MaxVarintLen16+len(node)+len(m.AppID)+len(m.Channel)+len(m.Except)+len(m.Frame))
	buf = append(buf, envelopeMagic...)
	for _, s := range [...]string{node, m.AppID, m.Channel, m.Except} {
		buf = binary.AppendUvarint(buf, uint64(len(s)))
		buf = append(buf, s...)
	}
	return append(buf, m.Frame...)
}

func decodeEnvelope(p []byte) (node string, m Message, ok bool) {
	if len(p) < len(envelopeMagic) || string(p[:len(envelopeMagic)]) != envelopeMagic {
		return "", m, false
	}
	p = p[len(envelopeMagic):]
	var fields [4]string
	for i := range fields {
		n, w := binary.Uvarint(p)
		if w <= 0 || n > uint64(len(p)-w) {
			return "", m, false
		}
		fields[i] = string(p[w : w+int(n)])
		p = p[w+int(n):]
	}
	m = Message{AppID: fields[1], Channel: fields[2], Except: fields[3], Frame: p}
	return fields[0], m, true
}
