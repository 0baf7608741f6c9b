package pusher

import (
	"context"

	"github.com/reverbgo/reverbgo/channels"
)

// MemberBack announces a user the presence store joined again on its own as the user's first
// socket in a channel (a membership this node holds that Redis had lost: this node reaped
// during a long pause, Redis restarted empty or failed over). Other nodes' clients were told
// the user left (or never heard of it), so every subscriber gets member_added (the member's
// own socket too: the reap's member_removed reached it as well), and the webhook fires. The
// store calls it once per cluster per such user.
func (s *Server) MemberBack(appID, channel, _ string, m channels.Member) {
	if err := s.reg.Publish(context.Background(), memberAdded(appID, channel, m.UserID, m.Info, "")); err != nil {
		s.log.Warn("member_added not published to other nodes", "app", appID, "channel", channel, "error", err)
	}
	if s.wants(appID, "member_added") {
		s.emit(appID, map[string]any{"name": "member_added", "channel": channel, "user_id": m.UserID})
	}
}
