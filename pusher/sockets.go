package pusher

import (
	"hash/maphash"
	"sync"
)

const socketShards = 64

// socketTable finds connections by socket id and by (app, user id), sharded so that
// connects and disconnects do not contend on one lock.
type socketTable struct {
	seed    maphash.Seed
	shards  [socketShards]socketShard
	usersMu sync.Mutex
	users   map[userKey]map[*Conn]struct{}
}

type socketShard struct {
	mu    sync.RWMutex
	conns map[string]*Conn
}

type userKey struct{ app, user string }

func newSocketTable() *socketTable {
	t := &socketTable{seed: maphash.MakeSeed(), users: make(map[userKey]map[*Conn]struct{})}
	for i := range t.shards {
		t.shards[i].conns = make(map[string]*Conn)
	}
	return t
}

func (t *socketTable) shard(id string) *socketShard {
	return &t.shards[maphash.String(t.seed, id)%socketShards]
}

// add registers c; it reports false if the id is already taken (a random collision).
func (t *socketTable) add(c *Conn) bool {
	s := t.shard(c.socketID)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, taken := s.conns[c.socketID]; taken {
		return false
	}
	s.conns[c.socketID] = c
	return true
}

func (t *socketTable) remove(c *Conn) {
	s := t.shard(c.socketID)
	s.mu.Lock()
	if s.conns[c.socketID] == c {
		delete(s.conns, c.socketID)
	}
	s.mu.Unlock()
}

func (t *socketTable) get(id string) *Conn {
	s := t.shard(id)
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.conns[id]
}

// each calls fn for every connection; fn must not block.
func (t *socketTable) each(fn func(*Conn)) {
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.RLock()
		for _, c := range s.conns {
			fn(c)
		}
		s.mu.RUnlock()
	}
}

// bindUser records that c belongs to user (signin or presence), for terminate_connections.
func (t *socketTable) bindUser(app, user string, c *Conn) {
	t.usersMu.Lock()
	defer t.usersMu.Unlock()
	k := userKey{app, user}
	set := t.users[k]
	if set == nil {
		set = make(map[*Conn]struct{}, 1)
		t.users[k] = set
	}
	set[c] = struct{}{}
}

func (t *socketTable) unbindUser(app, user string, c *Conn) {
	t.usersMu.Lock()
	defer t.usersMu.Unlock()
	k := userKey{app, user}
	if set := t.users[k]; set != nil {
		delete(set, c)
		if len(set) == 0 {
			delete(t.users, k)
		}
	}
}

// userConns returns a snapshot of the user's connections.
func (t *socketTable) userConns(app, user string) []*Conn {
	t.usersMu.Lock()
	defer t.usersMu.Unlock()
	set := t.users[userKey{app, user}]
	out := make([]*Conn, 0, len(set))
	for c := range set {
		out = append(out, c)
	}
	return out
}
