package pusher

import (
	"context"

	"github.com/reverbgo/reverbgo/channels"
)

// Wanter is implemented by an Emitter that can say cheaply whether an event would go
// anywhere (webhooks.Dispatcher does, with one map lookup). The server asks before it
// builds an event, so an app without webhooks, or without one wanting that event type,
// costs no allocation on the subscribe, leave and client-event paths. An Emitter without
// it is given every event.
type Wanter interface {
	Wants(appID, name string) bool
}

// wants reports whether the webhook event name of appID should be built and emitted.
func (s *Server) wants(appID, name string) bool {
	if s.hooks == nil {
		return false
	}
	if w, ok := s.hooks.(Wanter); ok {
		return w.Wants(appID, name)
	}
	return true
}

// SubscriptionCount is the channel's subscriber count over the cluster (this node's alone
// without one): what the subscription_count webhook reports.
func (s *Server) SubscriptionCount(ctx context.Context, appID, channel string) (int, error) {
	return s.subscriptionCount(ctx, appID, channel), nil
}

// emitCount tells the webhooks that a channel's subscriber count changed; they debounce
// it into one subscription_count. Presence channels have none, as on Pusher.
func (s *Server) emitCount(appID, channel string) {
	if s.wantsCount(appID, channel) {
		s.counts.changed(appID, channel)
	}
	if !channels.KindOf(channel).IsPresence() && s.wants(appID, "subscription_count") {
		s.hooks.Emit(appID, map[string]any{"name": "subscription_count", "channel": channel})
	}
}
