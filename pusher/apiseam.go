package pusher

import (
	"context"

	"github.com/reverbgo/reverbgo/channels"
)

// The methods below are what the HTTP API (package api) publishes and reads through; they
// export existing internals and add no work to the hot path.

// EventMessage encodes one event once for the broker and counts it as published; except is
// the socket id the event skips ("" for none). See api.Publisher.
func (s *Server) EventMessage(appID, channel, event, data, except string) channels.Message {
	return s.eventMessage(appID, channel, event, data, except)
}

// PublishAll publishes the messages of one HTTP request all or nothing (publishAll).
func (s *Server) PublishAll(ctx context.Context, ms []channels.Message) error {
	return s.publishAll(ctx, ms)
}

// ObserveTrigger reports a published trigger (kind ObservedAPI or ObservedConsole) to the
// console's observer; one atomic load when none is attached.
func (s *Server) ObserveTrigger(appID, kind, channel, event, data, socketID string) {
	s.observeTrigger(appID, kind, channel, event, data, socketID)
}

// ChannelsWithPrefix lists the app's occupied channels starting with prefix, over the cluster
// when scaled (this node's when Redis cannot answer).
func (s *Server) ChannelsWithPrefix(ctx context.Context, appID, prefix string) []channels.ChannelInfo {
	return s.channelList(ctx, appID, prefix)
}

// ClusterConnections is the app's open sockets over the cluster (clusterConnections).
func (s *Server) ClusterConnections(ctx context.Context, appID string) int {
	return s.clusterConnections(ctx, appID)
}

// TerminateUser closes the user's sockets on every node with 4009: the request goes through
// the broker to each node's terminator.
func (s *Server) TerminateUser(ctx context.Context, appID, userID string) error {
	return s.reg.Publish(ctx, channels.Message{AppID: appID, Channel: channels.TerminateChannel, Frame: []byte(userID)})
}

// terminator is each app's subscriber to channels.TerminateChannel on this node.
type terminator struct {
	s     *Server
	appID string
}

func (t terminator) SocketID() string { return "\x00terminator" }

// Send closes the named user's sockets on this node; closeWith never blocks.
func (t terminator) Send(frame []byte) {
	for _, conn := range t.s.sockets.userConns(t.appID, string(frame)) {
		conn.closeWith(CloseTerminated)
	}
}
