package mcp

import (
	"sync"

	"github.com/reverbgo/reverbgo/bridge"
)

// A token of an app's authorization server may carry no conversation_id: the authorization
// server knows the user, not which page they have open. Such a session follows the page the
// user used last in that app, i.e. the conversation whose manifest changed most recently, as
// the cluster-wide manifest feed announces it. A node knows the changes it has heard since it
// started; a page posts its manifest when it loads, so the next page the user opens is found.

// userKey is one app's user.
type userKey struct{ app, user string }

// follower remembers each user's most recently changed conversation, for at most max users
// (the oldest entries go first).
type follower struct {
	mu    sync.Mutex
	max   int
	seq   uint64
	conv  map[userKey]followed
	order []userKey // insertion order, for eviction; compacted as it grows
}

type followed struct {
	conv string
	seq  uint64
}

func newFollower(max int) *follower {
	return &follower{max: max, conv: map[userKey]followed{}}
}

// saw records that conversation k changed now; it reports whether that made k the user's
// latest (it was not already).
func (f *follower) saw(k bridge.ConvKey) bool {
	u := userKey{k.App, k.User}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq++
	prev, had := f.conv[u]
	f.conv[u] = followed{conv: k.Conversation, seq: f.seq}
	if !had {
		f.order = append(f.order, u)
		for len(f.conv) > f.max && len(f.order) > 0 {
			delete(f.conv, f.order[0])
			f.order = f.order[1:]
		}
		if len(f.order) > 2*f.max+16 { // drop entries for users no longer held
			kept := f.order[:0]
			for _, o := range f.order {
				if _, ok := f.conv[o]; ok {
					kept = append(kept, o)
				}
			}
			f.order = kept
		}
	}
	return !had || prev.conv != k.Conversation
}

// latest returns the user's most recently changed conversation, or "".
func (f *follower) latest(app, user string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.conv[userKey{app, user}].conv
}

// resolve returns the grant a request acts with: g itself, or for a following grant a copy
// naming the user's latest conversation (ok false when none is known).
func (s *Server) resolve(g *grant) (*grant, bool) {
	if !g.follow {
		return g, true
	}
	conv := s.follow.latest(g.key.App, g.key.User)
	if conv == "" {
		return g, false
	}
	r := *g
	r.key.Conversation = conv
	return &r, true
}
