package bridge

import (
	"context"
	"sort"
	"strings"
	"sync"
)

// The socket index.
//
// A page POSTs to whichever node its load balancer picked, which need not be the node that
// holds its WebSocket. To check X-Socket-ID and the page token there, the bridge keeps an
// index of the sockets subscribed to Toolmark channels: socket id -> app and channels, each
// with the SHA-256 of the page token issued with that subscription. The registry feeds it
// (channels.Watch with ChannelPrefix), the Pusher server hands it each token's hash just
// before the subscription it belongs to (SetCredential), and the socket lookup reads it for
// sockets on other nodes (pusher.Server.Subscriptions, through pusher.ClusterView).
//
// MemorySocketIndex indexes one node's sockets; RedisSocketIndex writes the same state
// through to Redis, one hash per node, so that every node can look a socket up.

// SocketIndex is the bridge's socket index. Subscribed and Unsubscribed are a
// channels.Occupancy, called for the channels it indexes only.
type SocketIndex interface {
	Subscribed(app, channel, socketID string)
	Unsubscribed(app, channel, socketID string)
	// SetCredential records the credential hash (TokenHash of the page token) that the index
	// stores with the socket's next subscription to channel or, when the socket is already
	// subscribed to it, replaces the stored one. It must not contain NUL or \x01.
	SetCredential(app, channel, socketID, credential string)
	// Socket finds an indexed socket: its app and indexed channels, each mapped to its
	// credential hash ("" when none).
	Socket(ctx context.Context, socketID string) (app string, subs map[string]string, ok bool, err error)
}

// indexedSocket is one socket's entry: its app and indexed channel -> credential hash.
type indexedSocket struct {
	app  string
	subs map[string]string
}

// MemorySocketIndex is the index of this node's sockets alone: what a single node needs, and
// the local state RedisSocketIndex writes through (and writes again when Redis lost it).
type MemorySocketIndex struct {
	mu      sync.Mutex
	sockets map[string]*indexedSocket
	creds   map[string]string // socket NUL channel -> credential for the next Subscribed
}

var _ SocketIndex = (*MemorySocketIndex)(nil)

// NewMemorySocketIndex returns an empty index.
func NewMemorySocketIndex() *MemorySocketIndex {
	return &MemorySocketIndex{sockets: map[string]*indexedSocket{}, creds: map[string]string{}}
}

// Subscribed implements SocketIndex.
func (m *MemorySocketIndex) Subscribed(app, channel, socketID string) {
	m.subscribed(app, channel, socketID)
}

// subscribed indexes the subscription and returns the socket's entry as encoded for Redis.
func (m *MemorySocketIndex) subscribed(app, channel, socketID string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.sockets[socketID]
	if s == nil {
		s = &indexedSocket{app: app, subs: map[string]string{}}
		m.sockets[socketID] = s
	}
	ck := socketID + "\x00" + channel
	s.subs[channel] = m.creds[ck]
	delete(m.creds, ck)
	return encodeIndexed(s)
}

// Unsubscribed implements SocketIndex.
func (m *MemorySocketIndex) Unsubscribed(app, channel, socketID string) {
	m.unsubscribed(channel, socketID)
}

// unsubscribed forgets the subscription and returns the socket's entry as encoded for
// Redis, "" when the socket has no indexed channel left.
func (m *MemorySocketIndex) unsubscribed(channel, socketID string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.creds, socketID+"\x00"+channel)
	s := m.sockets[socketID]
	if s == nil {
		return ""
	}
	delete(s.subs, channel)
	if len(s.subs) == 0 {
		delete(m.sockets, socketID)
		return ""
	}
	return encodeIndexed(s)
}

// SetCredential implements SocketIndex. A subscription already indexed keeps its place;
// its new hash reaches Redis with the socket's next change or a resync (a repeated
// subscribe keeps the token already issued, so the hash is then unchanged anyway).
func (m *MemorySocketIndex) SetCredential(_, channel, socketID, credential string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s := m.sockets[socketID]; s != nil {
		if _, ok := s.subs[channel]; ok {
			s.subs[channel] = credential
			return
		}
	}
	m.creds[socketID+"\x00"+channel] = credential
}

// Socket implements SocketIndex; it never fails.
func (m *MemorySocketIndex) Socket(_ context.Context, socketID string) (string, map[string]string, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.sockets[socketID]
	if s == nil {
		return "", nil, false, nil
	}
	subs := make(map[string]string, len(s.subs))
	for ch, cred := range s.subs {
		subs[ch] = cred
	}
	return s.app, subs, true, nil
}

// encoded returns every socket's entry as encoded for Redis.
func (m *MemorySocketIndex) encoded() map[string]any {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]any, len(m.sockets))
	for id, s := range m.sockets {
		out[id] = encodeIndexed(s)
	}
	return out
}

// encodeIndexed is "app NUL channel[\x01credential] NUL ...", channels sorted: channel
// names never hold either byte, nor does a credential hash.
func encodeIndexed(s *indexedSocket) string {
	parts := make([]string, 0, len(s.subs)+1)
	parts = append(parts, s.app)
	for ch, cred := range s.subs {
		if cred != "" {
			ch += "\x01" + cred
		}
		parts = append(parts, ch)
	}
	sort.Strings(parts[1:])
	return strings.Join(parts, "\x00")
}

// decodeIndexed reverses encodeIndexed.
func decodeIndexed(v string) (app string, subs map[string]string) {
	parts := strings.Split(v, "\x00")
	subs = make(map[string]string, len(parts)-1)
	for _, p := range parts[1:] {
		ch, cred, _ := strings.Cut(p, "\x01")
		subs[ch] = cred
	}
	return parts[0], subs
}
