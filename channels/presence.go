package channels

import (
	"context"
	"sort"
	"sync"
)

// Member is one user in a presence channel. Info is the raw JSON user_info.
type Member struct {
	UserID string
	Info   []byte
}

// PresenceStore tracks presence membership by user, counting each user's sockets so that
// member_added fires on a user's first socket and member_removed on the last one.
type PresenceStore interface {
	// Join records socketID as a connection of m.UserID and reports whether it is the
	// user's first connection in the channel.
	Join(ctx context.Context, app, channel, socketID string, m Member) (first bool, err error)
	// Leave removes socketID and reports whether it was the user's last connection.
	Leave(ctx context.Context, app, channel, socketID, userID string) (last bool, err error)
	// Members lists the distinct users, ordered by user id.
	Members(ctx context.Context, app, channel string) ([]Member, error)
}

type presenceUser struct {
	info    []byte
	sockets map[string]struct{}
}

// MemoryPresence is the single-node PresenceStore.
type MemoryPresence struct {
	mu       sync.Mutex
	channels map[key]map[string]*presenceUser
}

var _ PresenceStore = (*MemoryPresence)(nil)

// NewMemoryPresence returns an empty store.
func NewMemoryPresence() *MemoryPresence {
	return &MemoryPresence{channels: make(map[key]map[string]*presenceUser)}
}

// Join implements PresenceStore.
func (p *MemoryPresence) Join(_ context.Context, app, channel, socketID string, m Member) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := key{app, channel}
	users := p.channels[k]
	if users == nil {
		users = make(map[string]*presenceUser)
		p.channels[k] = users
	}
	u := users[m.UserID]
	first := u == nil
	if first {
		u = &presenceUser{sockets: make(map[string]struct{}, 1)}
		users[m.UserID] = u
	}
	u.info = m.Info
	u.sockets[socketID] = struct{}{}
	return first, nil
}

// Leave implements PresenceStore.
func (p *MemoryPresence) Leave(_ context.Context, app, channel, socketID, userID string) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := key{app, channel}
	users := p.channels[k]
	u := users[userID]
	if u == nil {
		return false, nil
	}
	if _, ok := u.sockets[socketID]; !ok {
		return false, nil
	}
	delete(u.sockets, socketID)
	if len(u.sockets) > 0 {
		return false, nil
	}
	delete(users, userID)
	if len(users) == 0 {
		delete(p.channels, k)
	}
	return true, nil
}

// Members implements PresenceStore.
func (p *MemoryPresence) Members(_ context.Context, app, channel string) ([]Member, error) {
	p.mu.Lock()
	users := p.channels[key{app, channel}]
	out := make([]Member, 0, len(users))
	for id, u := range users {
		out = append(out, Member{UserID: id, Info: u.info})
	}
	p.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].UserID < out[j].UserID })
	return out, nil
}
