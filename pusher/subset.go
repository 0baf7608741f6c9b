package pusher

import "iter"

// subSet is a socket's subscriptions by channel name. Most sockets hold one or a few
// channels: up to subSetSmall live in a slice (one 48-byte allocation for the first
// channel) instead of a map (a 416-byte group and its header even for one entry, which was
// a fifth of an idle subscribed connection's memory, issue 25); past that a map keeps
// lookups constant. The zero value is empty. Guarded by Conn.subsMu like the map was.
type subSet struct {
	few  []subEntry
	many map[string]subscription // non-nil once the set outgrew few (few is then nil)
}

type subEntry struct {
	name string
	sub  subscription
}

// subSetSmall bounds the linear search; a ninth channel moves the set into a map.
const subSetSmall = 8

func (s *subSet) get(name string) (subscription, bool) {
	if s.many != nil {
		sub, ok := s.many[name]
		return sub, ok
	}
	for i := range s.few {
		if s.few[i].name == name {
			return s.few[i].sub, true
		}
	}
	return subscription{}, false
}

func (s *subSet) set(name string, sub subscription) {
	if s.many != nil {
		s.many[name] = sub
		return
	}
	for i := range s.few {
		if s.few[i].name == name {
			s.few[i].sub = sub
			return
		}
	}
	if len(s.few) < subSetSmall {
		if s.few == nil {
			s.few = make([]subEntry, 0, 1)
		}
		s.few = append(s.few, subEntry{name, sub})
		return
	}
	s.many = make(map[string]subscription, 2*subSetSmall)
	for _, e := range s.few {
		s.many[e.name] = e.sub
	}
	s.many[name] = sub
	s.few = nil
}

// del removes name and returns what it held.
func (s *subSet) del(name string) (subscription, bool) {
	if s.many != nil {
		sub, ok := s.many[name]
		delete(s.many, name)
		return sub, ok
	}
	for i := range s.few {
		if s.few[i].name == name {
			sub := s.few[i].sub
			last := len(s.few) - 1
			s.few[i] = s.few[last]
			s.few[last] = subEntry{} // no stale strings pinned by the backing array
			s.few = s.few[:last]
			return sub, true
		}
	}
	return subscription{}, false
}

func (s *subSet) len() int {
	if s.many != nil {
		return len(s.many)
	}
	return len(s.few)
}

// all yields every subscription; the set must not change meanwhile.
func (s *subSet) all() iter.Seq2[string, subscription] {
	return func(yield func(string, subscription) bool) {
		if s.many != nil {
			for name, sub := range s.many {
				if !yield(name, sub) {
					return
				}
			}
			return
		}
		for _, e := range s.few {
			if !yield(e.name, e.sub) {
				return
			}
		}
	}
}
