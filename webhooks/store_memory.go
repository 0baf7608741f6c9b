package webhooks

import (
	"context"
	"sort"
	"sync"
	"time"
)

// MemoryStore is the single-process Store: everything lives in this process and is lost
// with it. It is the product for one node, not a test double.
type MemoryStore struct {
	mu        sync.Mutex
	outboxes  map[string]*memOutbox
	occupied  map[string]bool      // field(app, channel) -> occupied (by this process)
	holds     map[string]time.Time // hold member -> due
	cacheMiss map[string]bool      // field -> cache_miss sent this occupation
}

type memOutbox struct {
	queue    [][]byte
	inflight [][]byte
	since    time.Time // when inflight was formed
	owner    string
	until    time.Time // lease expiry (monotonic)
}

var _ Store = (*MemoryStore)(nil)

// NewMemoryStore returns an empty store.
func NewMemoryStore() *MemoryStore {
	return &MemoryStore{
		outboxes: map[string]*memOutbox{}, occupied: map[string]bool{},
		holds: map[string]time.Time{}, cacheMiss: map[string]bool{},
	}
}

func (s *MemoryStore) box(key string) *memOutbox {
	ob := s.outboxes[key]
	if ob == nil {
		ob = &memOutbox{}
		s.outboxes[key] = ob
	}
	return ob
}

// push appends under s.mu.
func (s *MemoryStore) push(out Out) int {
	dropped := 0
	for _, k := range out.Keys {
		ob := s.box(k)
		ob.queue = append(ob.queue, out.Raw)
		if out.Limit > 0 && len(ob.queue) > out.Limit {
			n := len(ob.queue) - out.Limit
			clear(ob.queue[:n]) // let the dropped bytes be collected
			ob.queue = ob.queue[n:]
			dropped += n
		}
	}
	return dropped
}

// Push implements Store.
func (s *MemoryStore) Push(_ context.Context, out Out) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.push(out), nil
}

// Claim implements Store.
func (s *MemoryStore) Claim(_ context.Context, key, owner string, max int, lease time.Duration, at time.Time) (Batch, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ob := s.box(key)
	now := time.Now()
	if ob.owner != "" && ob.owner != owner && now.Before(ob.until) {
		return Batch{}, false, nil
	}
	if len(ob.inflight) == 0 && len(ob.queue) > 0 {
		n := min(max, len(ob.queue))
		ob.since = at
		ob.inflight = append([][]byte(nil), ob.queue[:n]...)
		clear(ob.queue[:n])
		ob.queue = ob.queue[n:]
		if len(ob.queue) == 0 {
			ob.queue = nil // release the backing array of a burst
		}
	}
	if len(ob.inflight) == 0 {
		delete(s.outboxes, key)
		return Batch{}, true, nil
	}
	ob.owner, ob.until = owner, now.Add(lease)
	return Batch{Events: append([][]byte(nil), ob.inflight...), Since: ob.since}, true, nil
}

// Renew implements Store.
func (s *MemoryStore) Renew(_ context.Context, key, owner string, lease time.Duration) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ob := s.outboxes[key]
	if ob == nil || ob.owner != owner {
		return false, nil
	}
	ob.until = time.Now().Add(lease)
	return true, nil
}

// Ack implements Store.
func (s *MemoryStore) Ack(_ context.Context, key, owner string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ob := s.outboxes[key]
	if ob == nil || ob.owner != owner {
		return false, nil
	}
	ob.inflight = nil
	return true, nil
}

// Release implements Store.
func (s *MemoryStore) Release(_ context.Context, key, owner string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ob := s.outboxes[key]; ob != nil && ob.owner == owner {
		ob.owner = ""
	}
	return nil
}

// Size implements Store.
func (s *MemoryStore) Size(_ context.Context, key string) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ob := s.outboxes[key]
	if ob == nil {
		return 0, nil
	}
	return len(ob.queue) + len(ob.inflight), nil
}

// Total is the number of events in every outbox, for exact Stats without a round trip.
func (s *MemoryStore) Total() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, ob := range s.outboxes {
		n += len(ob.queue) + len(ob.inflight)
	}
	return n
}

// Occupy implements Store.
func (s *MemoryStore) Occupy(_ context.Context, app, channel string, out Out) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := field(app, channel)
	if s.occupied[f] {
		return false, nil
	}
	s.occupied[f] = true
	m := Hold{Kind: HoldVacated, App: app, Channel: channel}.member()
	if _, held := s.holds[m]; held {
		delete(s.holds, m)
		return false, nil
	}
	s.push(out)
	return true, nil
}

// Vacate implements Store.
func (s *MemoryStore) Vacate(_ context.Context, app, channel string, due time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := field(app, channel)
	if !s.occupied[f] {
		return nil
	}
	delete(s.occupied, f)
	s.holds[Hold{Kind: HoldVacated, App: app, Channel: channel}.member()] = due
	return nil
}

// MemberAdd implements Store.
func (s *MemoryStore) MemberAdd(_ context.Context, app, channel, user string, out Out) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := Hold{Kind: HoldRemoved, App: app, Channel: channel, User: user}.member()
	if _, held := s.holds[m]; held {
		delete(s.holds, m)
		return false, nil
	}
	s.push(out)
	return true, nil
}

// MemberRemove implements Store.
func (s *MemoryStore) MemberRemove(_ context.Context, app, channel, user string, due time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.holds[Hold{Kind: HoldRemoved, App: app, Channel: channel, User: user}.member()] = due
	return nil
}

// CacheMiss implements Store.
func (s *MemoryStore) CacheMiss(_ context.Context, app, channel string, out Out) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := field(app, channel)
	if s.cacheMiss[f] {
		return false, nil
	}
	s.cacheMiss[f] = true
	s.push(out)
	return true, nil
}

// Count implements Store.
func (s *MemoryStore) Count(_ context.Context, app, channel string, due time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := Hold{Kind: HoldCount, App: app, Channel: channel}.member()
	if _, ok := s.holds[m]; !ok {
		s.holds[m] = due
	}
	return nil
}

// Due implements Store.
func (s *MemoryStore) Due(_ context.Context, now time.Time, max int) ([]Hold, error) {
	s.mu.Lock()
	type due struct {
		m  string
		at time.Time
	}
	var list []due
	for m, at := range s.holds {
		if !at.After(now) {
			list = append(list, due{m, at})
		}
	}
	s.mu.Unlock()
	sort.Slice(list, func(i, j int) bool { return list[i].at.Before(list[j].at) })
	var out []Hold
	for _, d := range list {
		if len(out) == max {
			break
		}
		if h, ok := parseHold(d.m); ok {
			out = append(out, h)
		}
	}
	return out, nil
}

// Fire implements Store.
func (s *MemoryStore) Fire(_ context.Context, h Hold, now time.Time, out Out) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := h.member()
	at, ok := s.holds[m]
	if !ok || at.After(now) {
		return false, nil
	}
	delete(s.holds, m)
	if h.Kind == HoldVacated {
		delete(s.cacheMiss, field(h.App, h.Channel))
	}
	s.push(out)
	return true, nil
}

// Lost implements Store: what is in memory is lost only with the process.
func (s *MemoryStore) Lost() map[string]int { return nil }

// flushHolds makes every hold due now; Close uses it so a process that stops does not take
// its held vacated/removed events with it.
func (s *MemoryStore) flushHolds(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for m := range s.holds {
		s.holds[m] = now
	}
}
