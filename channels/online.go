package channels

import "context"

// Online users (Pusher's watchlist).
//
// A user is online while at least one of their connections is signed in (pusher:signin),
// anywhere in the cluster. The count is kept by the PresenceStore under OnlineChannel, an
// internal presence "channel" no client can name: each signed-in connection is a member, so
// Join reports a user's first signed-in connection in the cluster and Leave the last one,
// and the store's node registry bounds the state (a dead node's connections are reaped by
// the survivors and reported through OnGone, like any presence member). Transitions are
// announced to every node on WatchlistChannel (frames are a user id), through the broker
// like any publish; each node's server then reads the users' state again (PresenceLookup)
// and tells the sockets that watch them.

// OnlineChannel is the internal presence channel whose members are the signed-in users. No
// client can name it (it fails ValidName) and, unlike the registry's internal channels, it
// holds no NUL byte: cluster.RedisPresence separates the fields of its node entries with NUL.
const OnlineChannel = "\x01online"

// WatchlistChannel carries "this user's online state changed" between nodes: its frames
// are a user id.
const WatchlistChannel = "\x00watchlist"

// PresenceLookup is implemented by a PresenceStore that can tell, for a few users, whether
// each is a member of a channel, without listing every member.
type PresenceLookup interface {
	// Present reports, for each of users in order, whether they are a member of the channel.
	Present(ctx context.Context, app, channel string, users []string) ([]bool, error)
}

var (
	_ PresenceLookup = (*MemoryPresence)(nil)
)

// Present implements PresenceLookup.
func (p *MemoryPresence) Present(_ context.Context, app, channel string, users []string) ([]bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	members := p.channels[key{app, channel}]
	out := make([]bool, len(users))
	for i, u := range users {
		_, out[i] = members[u]
	}
	return out, nil
}
