package testutil

import (
	"slices"
	"strings"
	"sync"
)

// Sockets is a fake socket lookup for the bridge (bridge.Sockets and bridge.Occupancy):
// the sockets a test registers with Set, each with its app and channels. Every channel under
// Prefix carries the page token PageToken(socket id), returned hashed by Hash as the Pusher
// server returns it; other channels carry none. (Hash is bridge.TokenHash: this package cannot
// import the bridge, whose own tests use it.)
type Sockets struct {
	Hash   func(token string) string
	Prefix string

	mu sync.Mutex
	m  map[string]fakeSocket
}

type fakeSocket struct {
	app      string
	channels []string
}

// PageToken is the page token the fake sockets were issued, a test's X-Toolmark-Token.
func PageToken(socketID string) string { return "token-of-" + socketID }

// Set registers (or replaces) a socket of app subscribed to channels.
func (s *Sockets) Set(id, app string, channels ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]fakeSocket{}
	}
	s.m[id] = fakeSocket{app, slices.Clone(channels)}
}

// Remove forgets a socket, as when its page closed.
func (s *Sockets) Remove(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, id)
}

// RemoveApp forgets every socket of app.
func (s *Sockets) RemoveApp(app string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, sock := range s.m {
		if sock.app == app {
			delete(s.m, id)
		}
	}
}

// SocketConversation implements bridge.ConversationSockets as pusher.Server does: the
// channels are read in place and only the matching one's token is hashed.
func (s *Sockets) SocketConversation(id, conversation string, parse func(string) (string, string, bool)) (appID, user, tokenHash string, n int, ok bool) {
	s.mu.Lock()
	sock, ok := s.m[id]
	s.mu.Unlock()
	if !ok {
		return "", "", "", 0, false
	}
	hashed := false
	for _, ch := range sock.channels {
		if u, cv, ok := parse(ch); ok && cv == conversation {
			user, hashed, n = u, strings.HasPrefix(ch, s.Prefix), n+1
		}
	}
	if hashed {
		tokenHash = s.Hash(PageToken(id))
	}
	return sock.app, user, tokenHash, n, true
}

// Subscriptions implements bridge.Sockets.
func (s *Sockets) Subscriptions(id string) (string, map[string]string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sock, ok := s.m[id]
	if !ok {
		return "", nil, false
	}
	subs := make(map[string]string, len(sock.channels))
	for _, ch := range sock.channels {
		subs[ch] = ""
		if strings.HasPrefix(ch, s.Prefix) {
			subs[ch] = s.Hash(PageToken(id))
		}
	}
	return sock.app, subs, true
}

// Subscribed implements bridge.Occupancy: whether any registered socket of app is
// subscribed to channel.
func (s *Sockets) Subscribed(app, channel string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sock := range s.m {
		if sock.app == app && slices.Contains(sock.channels, channel) {
			return true
		}
	}
	return false
}
