package channels

import "sync"

// The announced sets: per local presence channel, the user ids this node's subscribers were
// told are members (the subscription_succeeded list, then every member_added / member_removed
// frame delivered locally, whichever node published it). Pub/sub has no replay, so member
// events published while this node's Redis subscription was down are lost for its sockets;
// after such trouble the server compares each set with the presence store (AnnouncedDiff) and
// delivers the missing events to its local sockets only (pusher/presence_reconcile.go).
// A set keeps the ids any local subscriber was told of and those every one was (see
// announcedSet); it exists only while its channel has a local subscriber and holds at most
// its app's max_presence_members ids. A member event says what it is in Message.Member (set
// by the server that encodes it, carried between nodes in the envelope): the frame is never
// read here.

// announcedSet is one channel's: any holds the ids some local subscriber was told (a
// ghost is looked for there: a member_removed for a user a client does not list is a
// no-op), all the ids every local subscriber was told (a missed member is looked for
// there: a subscriber that joined later seeds with a list the older ones may lack).
type announcedSet struct {
	any, all map[string]struct{}
	max      int    // 0 = no bound
	version  uint64 // counts the changes, so a diff can tell one happened since a read
}

type announced struct {
	mu   sync.Mutex
	sets map[key]*announcedSet
}

// AnnouncedMember pairs an app and a presence channel with an announced set.
type AnnouncedMember struct{ App, Channel string }

// SeedAnnounced records the members sent to a local subscriber in subscription_succeeded.
// max bounds the set (max_presence_members, 0 = none).
func (r *Registry) SeedAnnounced(app, name string, members []Member, max int) {
	a := &r.ann
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.sets == nil {
		a.sets = make(map[key]*announcedSet)
	}
	k := key{app, name}
	s := a.sets[k]
	if s == nil {
		s = &announcedSet{any: make(map[string]struct{}, len(members)), all: make(map[string]struct{}, len(members)), max: max}
		a.sets[k] = s
		for _, m := range members {
			s.add(m.UserID)
		}
		return
	}
	s.max = max
	s.version++
	told := make(map[string]struct{}, len(members))
	for _, m := range members {
		told[m.UserID] = struct{}{}
		if _, ok := s.any[m.UserID]; !ok && (s.max <= 0 || len(s.any) < s.max) {
			s.any[m.UserID] = struct{}{}
		}
	}
	for id := range s.all {
		if _, ok := told[id]; !ok {
			delete(s.all, id)
		}
	}
}

// add records a member every local subscriber was told about.
func (s *announcedSet) add(id string) {
	s.version++
	if _, ok := s.any[id]; !ok {
		if s.max > 0 && len(s.any) >= s.max {
			return
		}
		s.any[id] = struct{}{}
	}
	s.all[id] = struct{}{}
}

func (s *announcedSet) remove(id string) {
	s.version++
	delete(s.any, id)
	delete(s.all, id)
}

// dropAnnounced forgets a channel's set (its last local subscriber left).
func (r *Registry) dropAnnounced(k key) {
	a := &r.ann
	a.mu.Lock()
	delete(a.sets, k)
	a.mu.Unlock()
}

// noteAnnounced updates the channel's announced set with a member event delivered locally
// (m.Member; the frame is never read).
func (r *Registry) noteAnnounced(m Message) {
	if m.Member.Kind == NotMember || !KindOf(m.Channel).IsPresence() {
		return
	}
	a := &r.ann
	a.mu.Lock()
	if s := a.sets[key{m.AppID, m.Channel}]; s != nil {
		switch m.Member.Kind {
		case MemberAdded:
			s.add(m.Member.UserID)
		case MemberRemoved:
			s.remove(m.Member.UserID)
		}
	}
	a.mu.Unlock()
}

// AnnouncedChannels lists the channels with an announced set, dropping the sets of channels
// left without a local subscriber.
func (r *Registry) AnnouncedChannels() []AnnouncedMember {
	a := &r.ann
	a.mu.Lock()
	ks := make([]key, 0, len(a.sets))
	for k := range a.sets {
		ks = append(ks, k)
	}
	a.mu.Unlock()
	out := make([]AnnouncedMember, 0, len(ks))
	for _, k := range ks {
		if r.SubscriptionCount(k.app, k.name) == 0 {
			r.dropAnnounced(k)
			continue
		}
		out = append(out, AnnouncedMember{App: k.app, Channel: k.name})
	}
	return out
}

// AnnouncedVersion is the channel set's change count (ok false: no set); read it before the
// members AnnouncedDiff compares with.
func (r *Registry) AnnouncedVersion(app, name string) (version uint64, ok bool) {
	a := &r.ann
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.sets[key{app, name}]
	if s == nil {
		return 0, false
	}
	return s.version, true
}

// AnnouncedDiff compares a channel's announced set with the cluster's members: gone are
// ids some local subscriber was told of that are not among them, missing the members not
// every local subscriber was told of (a subscriber that has one already gets a repeated
// member_added: pusher-js updates the member and emits pusher:member_added again). ok is false when the channel
// has no set or when it changed since version was read (a member event arrived after the
// members were: compare again with a fresh read).
func (r *Registry) AnnouncedDiff(app, name string, version uint64, truth []Member) (gone []string, missing []Member, ok bool) {
	a := &r.ann
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.sets[key{app, name}]
	if s == nil || s.version != version {
		return nil, nil, false
	}
	in := make(map[string]struct{}, len(truth))
	for _, m := range truth {
		in[m.UserID] = struct{}{}
		if _, ok := s.all[m.UserID]; !ok {
			missing = append(missing, m)
		}
	}
	for id := range s.any {
		if _, ok := in[id]; !ok {
			gone = append(gone, id)
		}
	}
	return gone, missing, true
}
