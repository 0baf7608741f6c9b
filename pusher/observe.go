package pusher

import (
	"context"
	"errors"

	"github.com/reverbgo/reverbgo/channels"
)

// Observer sees what the debug console shows: connections, subscriptions and events as they
// happen. It is attached only while a console is open (SetObserver), so every call site costs
// one atomic pointer load otherwise. Calls come from hot paths on many goroutines: an
// implementation must not block, and must copy what it keeps (data may alias a frame).
type Observer interface {
	// Connection reports a socket opened (open, reason "") or closed with its close reason.
	Connection(appID, socketID string, open bool, reason string, code int)
	// Subscription reports a subscribe (subscribed) or an unsubscribe, including those of a
	// closing socket.
	Subscription(appID, socketID, channel string, subscribed bool)
	// Event reports a client event, an HTTP API trigger or a console trigger (kind is one of
	// the Observed* constants). data is the event's data string, never an auth signature.
	Event(appID, kind, channel, event, data, socketID string)
}

// Event kinds passed to Observer.Event.
const (
	ObservedClient  = "client_event"
	ObservedAPI     = "api_trigger"
	ObservedConsole = "console_trigger"
)

// tap holds the attached observer. A nil *tap (no console open) is the only state the hot
// path sees in production when the console is off or closed.
type tap struct{ o Observer }

// SetObserver attaches o, or detaches the observer with nil.
func (s *Server) SetObserver(o Observer) {
	if o == nil {
		s.tap.Store(nil)
		return
	}
	s.tap.Store(&tap{o: o})
}

// Counters returns the app's cumulative client frames received and events published, and
// the frames this node queued on its sockets for every app (the metrics' counters, which
// count whether or not a console is open).
func (s *Server) Counters(appID string) (in, out, nodeDeliveries uint64) {
	nodeDeliveries, _ = s.reg.Deliveries()
	a := s.appByID(appID)
	if a == nil {
		return 0, 0, nodeDeliveries
	}
	return a.stats.clientMessages.Load(), a.stats.published.Load(), nodeDeliveries
}

func (c *Conn) observeOpen() {
	if t := c.srv.tap.Load(); t != nil {
		t.o.Connection(c.app.cfg().ID, c.socketID, true, "", 0)
	}
}

func (c *Conn) observeClose() {
	if t := c.srv.tap.Load(); t != nil {
		r := c.closeReason()
		t.o.Connection(c.app.cfg().ID, c.socketID, false, r.String(), r.Code())
	}
}

func (c *Conn) observeSub(channel string, subscribed bool) {
	if t := c.srv.tap.Load(); t != nil {
		t.o.Subscription(c.app.cfg().ID, c.socketID, channel, subscribed)
	}
}

func (c *Conn) observeClientEvent(channel, event, data string) {
	if t := c.srv.tap.Load(); t != nil {
		t.o.Event(c.app.cfg().ID, ObservedClient, channel, event, data, c.socketID)
	}
}

func (s *Server) observeTrigger(appID, kind, channel, event, data, socketID string) {
	if t := s.tap.Load(); t != nil {
		t.o.Event(appID, kind, channel, event, data, socketID)
	}
}

// Clustered reports whether channel lists and counts come from the whole cluster.
func (s *Server) Clustered() bool { return s.cluster != nil }

// ChannelList lists the app's occupied channels (cluster-wide when scaled), as the HTTP API's
// GET /channels does.
func (s *Server) ChannelList(ctx context.Context, appID string) []channels.ChannelInfo {
	return s.channelList(ctx, appID, "")
}

// Members returns a presence channel's members (cluster-wide when scaled).
func (s *Server) Members(ctx context.Context, appID, channel string) ([]channels.Member, error) {
	return s.reg.Presence().Members(ctx, appID, channel)
}

// Health reports unreachable dependencies, as /up does; nil when healthy or single-node.
func (s *Server) Health(ctx context.Context) map[string]string {
	if s.health == nil {
		return nil
	}
	return s.health(ctx)
}

// TriggerError is a console trigger refused with the HTTP status the Pusher HTTP API would
// answer (api.API.Trigger returns it; the console reads Status).
type TriggerError struct {
	Status  int
	Message string
}

func (e *TriggerError) Error() string { return e.Message }

var _ error = (*TriggerError)(nil)

// AsTriggerError unwraps a Trigger error.
func AsTriggerError(err error) (*TriggerError, bool) {
	var te *TriggerError
	ok := errors.As(err, &te)
	return te, ok
}
