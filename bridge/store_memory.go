package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"
)

// ErrStoreFull is returned when a MemoryStore map reached MaxEntries; it bounds memory even if
// expiry cannot keep up with a flood.
var ErrStoreFull = errors.New("bridge: store is full")

// MemoryStore is the single-node Store: one mutex makes every operation atomic by
// construction. Expired entries are dropped lazily on access and by a sweeper goroutine, so
// memory is bounded by the write rate times the TTLs (and by MaxEntries).
type MemoryStore struct {
	now        func() time.Time
	maxEntries int

	mu        sync.Mutex
	manifests map[ConvKey]*memManifest
	calls     map[string]*memCall
	confirms  map[string]*memConfirm
	watchers  map[string]map[*memWatch]struct{}

	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
}

type memManifest struct {
	m       Manifest
	expires time.Time
}

const (
	callOpen = iota
	callResult
	callTimeout
)

type memCall struct {
	b       Binding
	state   int
	result  json.RawMessage
	expires time.Time
}

type memConfirm struct {
	c       ConfirmBinding
	claimed bool
	expires time.Time
}

type memWatch struct{ ch chan struct{} }

// MemoryOptions tune a MemoryStore; zero values take the documented defaults.
type MemoryOptions struct {
	// Now is the clock for TTLs (default time.Now).
	Now func() time.Time
	// SweepInterval between full expiry sweeps (default 30s; < 0 disables the sweeper).
	SweepInterval time.Duration
	// MaxEntries per map (manifests, calls, confirmations); default 1,000,000.
	MaxEntries int
}

// NewMemoryStore starts a MemoryStore; Close stops its sweeper.
func NewMemoryStore(o MemoryOptions) *MemoryStore {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.SweepInterval == 0 {
		o.SweepInterval = 30 * time.Second
	}
	if o.MaxEntries <= 0 {
		o.MaxEntries = 1_000_000
	}
	s := &MemoryStore{
		now: o.Now, maxEntries: o.MaxEntries,
		manifests: map[ConvKey]*memManifest{}, calls: map[string]*memCall{},
		confirms: map[string]*memConfirm{}, watchers: map[string]map[*memWatch]struct{}{},
		stop: make(chan struct{}), done: make(chan struct{}),
	}
	if o.SweepInterval > 0 {
		go s.sweeper(o.SweepInterval)
	} else {
		close(s.done)
	}
	return s
}

// Close stops the sweeper. The store stays usable (expiry is then lazy only).
func (s *MemoryStore) Close() error {
	s.stopOnce.Do(func() { close(s.stop) })
	<-s.done
	return nil
}

func (s *MemoryStore) sweeper(every time.Duration) {
	defer close(s.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.Sweep()
		}
	}
}

// Sweep drops every expired entry now.
func (s *MemoryStore) Sweep() {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	for k, e := range s.manifests {
		if !now.Before(e.expires) {
			delete(s.manifests, k)
		}
	}
	for k, e := range s.calls {
		if !now.Before(e.expires) {
			delete(s.calls, k)
		}
	}
	for k, e := range s.confirms {
		if !now.Before(e.expires) {
			delete(s.confirms, k)
		}
	}
}

// Len reports the number of live entries per map (for tests and debugging).
func (s *MemoryStore) Len() (manifests, calls, confirms int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.manifests), len(s.calls), len(s.confirms)
}

func (s *MemoryStore) manifest(k ConvKey, now time.Time) *memManifest {
	e := s.manifests[k]
	if e != nil && !now.Before(e.expires) {
		delete(s.manifests, k)
		return nil
	}
	return e
}

func (s *MemoryStore) call(id string, now time.Time) *memCall {
	e := s.calls[id]
	if e != nil && !now.Before(e.expires) {
		delete(s.calls, id)
		return nil
	}
	return e
}

func (s *MemoryStore) confirm(id string, now time.Time) *memConfirm {
	e := s.confirms[id]
	if e != nil && !now.Before(e.expires) {
		delete(s.confirms, id)
		return nil
	}
	return e
}

// PutManifest implements Store.
func (s *MemoryStore) PutManifest(_ context.Context, k ConvKey, m Manifest, ttl time.Duration) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	cur := s.manifest(k, now)
	if cur != nil && cur.m.ClientID == m.ClientID && cur.m.Rev > m.Rev {
		return false, nil
	}
	if cur == nil && len(s.manifests) >= s.maxEntries {
		return false, ErrStoreFull
	}
	m.Tools = append([]Tool(nil), m.Tools...)
	s.manifests[k] = &memManifest{m: m, expires: now.Add(ttl)}
	return true, nil
}

// GetManifest implements Store.
func (s *MemoryStore) GetManifest(_ context.Context, k ConvKey) (*Manifest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.manifest(k, s.now())
	if e == nil {
		return nil, nil
	}
	m := e.m
	m.Tools = append([]Tool(nil), e.m.Tools...)
	return &m, nil
}

// ChangeRev implements Store.
func (s *MemoryStore) ChangeRev(_ context.Context, k ConvKey, clientID string, rev int64, ttl time.Duration) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	e := s.manifest(k, now)
	if e == nil || e.m.ClientID != clientID {
		return false, nil
	}
	if rev > e.m.Rev {
		e.m.Rev = rev
	}
	e.expires = now.Add(ttl)
	return true, nil
}

// Bind implements Store.
func (s *MemoryStore) Bind(_ context.Context, b Binding, ttl time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if s.call(b.ID, now) != nil {
		return ErrExists
	}
	if len(s.calls) >= s.maxEntries {
		return ErrStoreFull
	}
	s.calls[b.ID] = &memCall{b: b, expires: now.Add(ttl)}
	return nil
}

// GetBinding implements Store.
func (s *MemoryStore) GetBinding(_ context.Context, id string) (*Binding, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.call(id, s.now())
	if e == nil {
		return nil, nil
	}
	b := e.b
	return &b, nil
}

// ClaimResult implements Store.
func (s *MemoryStore) ClaimResult(_ context.Context, id string, result json.RawMessage, now time.Time,
	confirm *ConfirmBinding, confirmTTL time.Duration) (ClaimOutcome, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	clock := s.now()
	e := s.call(id, clock)
	switch {
	case e == nil:
		return ClaimNotFound, nil
	case e.state == callResult:
		return ClaimDuplicate, nil
	case e.state == callTimeout:
		return ClaimTimedOut, nil
	case now.After(e.b.Deadline):
		return ClaimLate, nil
	}
	if confirm != nil {
		if s.confirm(confirm.ConfirmID, clock) != nil {
			return ClaimConfirmTaken, nil
		}
		if len(s.confirms) >= s.maxEntries {
			return ClaimNotFound, ErrStoreFull
		}
		s.confirms[confirm.ConfirmID] = &memConfirm{c: *confirm, expires: clock.Add(confirmTTL)}
	}
	e.state, e.result = callResult, append(json.RawMessage(nil), result...)
	for w := range s.watchers[id] {
		close(w.ch)
	}
	delete(s.watchers, id)
	return Claimed, nil
}

// ClaimTimeout implements Store.
func (s *MemoryStore) ClaimTimeout(_ context.Context, id string) (json.RawMessage, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.call(id, s.now())
	switch {
	case e == nil:
		return nil, true, nil
	case e.state == callResult:
		return append(json.RawMessage(nil), e.result...), false, nil
	}
	e.state = callTimeout
	return nil, true, nil
}

// Watch implements Store.
func (s *MemoryStore) Watch(id string) (<-chan struct{}, func()) {
	w := &memWatch{ch: make(chan struct{})}
	s.mu.Lock()
	if e := s.call(id, s.now()); e != nil && e.state == callResult {
		s.mu.Unlock()
		close(w.ch)
		return w.ch, func() {}
	}
	set := s.watchers[id]
	if set == nil {
		set = map[*memWatch]struct{}{}
		s.watchers[id] = set
	}
	set[w] = struct{}{}
	s.mu.Unlock()
	return w.ch, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if set := s.watchers[id]; set != nil {
			delete(set, w)
			if len(set) == 0 {
				delete(s.watchers, id)
			}
		}
	}
}

// GetConfirm implements Store.
func (s *MemoryStore) GetConfirm(_ context.Context, confirmID string) (*ConfirmBinding, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.confirm(confirmID, s.now())
	if e == nil {
		return nil, nil
	}
	c := e.c
	return &c, nil
}

// ClaimConfirm implements Store.
func (s *MemoryStore) ClaimConfirm(_ context.Context, confirmID string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.confirm(confirmID, s.now())
	if e == nil || e.claimed {
		return false, nil
	}
	e.claimed = true
	return true, nil
}

var _ Store = (*MemoryStore)(nil)
