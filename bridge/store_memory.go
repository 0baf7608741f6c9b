package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"hash/maphash"
	"sync"
	"time"
)

// ErrStoreFull is returned when a MemoryStore map reached MaxEntries; it bounds memory even if
// expiry cannot keep up with a flood.
var ErrStoreFull = errors.New("bridge: store is full")

// MemoryStore is the single-node Store: one mutex makes every operation atomic by
// construction. Expired entries are dropped lazily on access and by a sweeper goroutine, so
// memory is bounded by the write rate times the TTLs (and by the caps).
//
// A call lives in two shapes. While it is open (bound, possibly answered, not yet settled by its
// waiter) it is a memCall with the full Binding and the result: about 500 B retained with small
// ids and results (TestMemoryStoreFootprint), so open calls cost rate × call duration × 500 B.
// Once the waiter settles it (ClaimTimeout) nothing but 403/409/410 answers can follow, so it
// shrinks to a pointer-free 24-byte tomb in a map keyed by a 128-bit id hash, plus a 16-byte
// expiry-queue slot: about 100 B measured with map overhead, and never scanned by the garbage
// collector. Tombs live LateGrace after settling (rate × LateGrace of them: 300,000 ≈ 30 MB at
// 5,000 calls/s and the default 60 s), expire in FIFO order, and never count against
// MaxEntries: at MaxTombstones the oldest is dropped early, so a very late duplicate gets 404
// instead of 409, but a new call never gets 503.
type MemoryStore struct {
	now        func() time.Time
	maxEntries int
	maxTombs   int

	mu        sync.Mutex
	manifests map[ConvKey]*memManifest
	calls     map[string]*memCall
	confirms  map[confirmKey]*memConfirm
	watchers  map[string]map[*memWatch]struct{} // only ids watched before they were bound
	tombs     map[tombKey]tomb
	tombQ     []tombKey // settling order = expiry order when LateGrace is constant
	tombHead  int

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
	grace   time.Duration // how far the binding's TTL reaches past its deadline
	wake    chan struct{} // made by the first Watch, closed by the winning ClaimResult
}

// tombKey is a call id hashed to 128 bits with a per-process seed: a fixed-size, pointer-free
// map key (a collision is as likely as guessing a UUID).
type tombKey [2]uint64

// tomb is a settled call: enough to answer 403 (owner), 422 (kind) and 409 (state) after the
// waiter is gone, and nothing the garbage collector has to scan.
type tomb struct {
	owner   uint64 // ownerFingerprint of the binding's Key and ClientID
	expires int64  // unix nanoseconds
	state   uint8  // callResult or callTimeout
	kind    uint8  // tombCall or tombDescribe
}

const (
	tombCall = iota
	tombDescribe
)

var tombSeeds = [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}

func tombKeyOf(id string) tombKey {
	return tombKey{maphash.String(tombSeeds[0], id), maphash.String(tombSeeds[1], id)}
}

// confirmKey namespaces a confirmId by its app (see Store.GetConfirm).
type confirmKey struct {
	app string
	id  string
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
	// MaxEntries per map (manifests, open calls, confirmations); default 1,000,000. Open calls
	// are bounded far below by MaxInFlight per conversation; this is the last line.
	MaxEntries int
	// MaxTombstones bounds settled calls kept for 409/410 answers (default 1,000,000, about
	// 100 MB). rate × LateGrace are live: 300,000 at 5,000 calls/s with the default 60 s, so
	// the default holds about 16,000 calls/s before tombs are dropped early (never an error).
	MaxTombstones int
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
	if o.MaxTombstones <= 0 {
		o.MaxTombstones = 1_000_000
	}
	s := &MemoryStore{
		now: o.Now, maxEntries: o.MaxEntries, maxTombs: o.MaxTombstones,
		manifests: map[ConvKey]*memManifest{}, calls: map[string]*memCall{},
		confirms: map[confirmKey]*memConfirm{}, watchers: map[string]map[*memWatch]struct{}{},
		tombs: map[tombKey]tomb{},
		stop:  make(chan struct{}), done: make(chan struct{}),
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
	s.expireTombs(now)
}

// Len reports the number of live entries per map (for tests and debugging); calls counts open
// calls and tombstones.
func (s *MemoryStore) Len() (manifests, calls, confirms int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.manifests), len(s.calls) + len(s.tombs), len(s.confirms)
}

// Tombstones reports how many settled calls are kept.
func (s *MemoryStore) Tombstones() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.tombs)
}

// expireTombs pops the expiry queue while its head is expired (or the map is over its cap),
// so expiry costs O(expired) instead of a scan under the lock. A head that is not expired
// stops it even if a later entry is (only possible with a mixed LateGrace); that entry is
// still treated as absent on access and popped in turn.
func (s *MemoryStore) expireTombs(now time.Time) {
	ns := now.UnixNano()
	for s.tombHead < len(s.tombQ) {
		k := s.tombQ[s.tombHead]
		if t, ok := s.tombs[k]; ok {
			if ns < t.expires && len(s.tombs) <= s.maxTombs {
				break
			}
			delete(s.tombs, k)
		}
		s.tombQ[s.tombHead] = tombKey{}
		s.tombHead++
	}
	// Reuse the queue's front once most of it is consumed, keeping the pop amortized O(1).
	if s.tombHead > 1024 && s.tombHead*2 >= len(s.tombQ) {
		n := copy(s.tombQ, s.tombQ[s.tombHead:])
		s.tombQ, s.tombHead = s.tombQ[:n], 0
	}
}

// tomb returns the live tomb of id.
func (s *MemoryStore) tomb(id string, now time.Time) (tomb, bool) {
	if len(s.tombs) == 0 {
		return tomb{}, false
	}
	t, ok := s.tombs[tombKeyOf(id)]
	if !ok || now.UnixNano() >= t.expires {
		return tomb{}, false
	}
	return t, true
}

// settle replaces the open call e with its tomb, kept LateGrace past now but never beyond the
// binding's own TTL.
func (s *MemoryStore) settle(id string, e *memCall, now time.Time) {
	delete(s.calls, id)
	exp := now.Add(e.grace)
	if exp.After(e.expires) {
		exp = e.expires
	}
	kind := uint8(tombCall)
	if e.b.Kind == KindDescribe {
		kind = tombDescribe
	}
	k := tombKeyOf(id)
	s.tombs[k] = tomb{owner: ownerFingerprint(e.b.Key, e.b.ClientID), expires: exp.UnixNano(),
		state: uint8(e.state), kind: kind}
	s.tombQ = append(s.tombQ, k)
	s.expireTombs(now)
}

func (s *MemoryStore) manifest(k ConvKey, now time.Time) *memManifest {
	return live(s.manifests, k, now)
}

func (s *MemoryStore) call(id string, now time.Time) *memCall { return live(s.calls, id, now) }

func (s *MemoryStore) confirm(app, id string, now time.Time) *memConfirm {
	return live(s.confirms, confirmKey{app, id}, now)
}

// expiring is an entry with a deadline; live drops it on the read that finds it expired.
type expiring interface {
	*memManifest | *memCall | *memConfirm
	deadline() time.Time
}

func (e *memManifest) deadline() time.Time { return e.expires }
func (e *memCall) deadline() time.Time     { return e.expires }
func (e *memConfirm) deadline() time.Time  { return e.expires }

func live[K comparable, V expiring](m map[K]V, k K, now time.Time) V {
	e := m[k]
	if e != nil && !now.Before(e.deadline()) {
		delete(m, k)
		var zero V
		return zero
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

// GetManifest implements Store. The returned Tools slice is shared and must not be modified.
func (s *MemoryStore) GetManifest(_ context.Context, k ConvKey) (*Manifest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.manifest(k, s.now())
	if e == nil {
		return nil, nil
	}
	m := e.m // Tools is shared, not copied: the stored slice is never modified (PutManifest copies)
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
	if _, ok := s.tomb(b.ID, now); ok {
		return ErrExists
	}
	if len(s.calls) >= s.maxEntries {
		return ErrStoreFull
	}
	s.calls[b.ID] = &memCall{b: b, expires: now.Add(ttl), grace: max(0, ttl-b.Deadline.Sub(now))}
	return nil
}

// GetBinding implements Store.
func (s *MemoryStore) GetBinding(_ context.Context, id string) (*Binding, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	e := s.call(id, now)
	if e == nil {
		t, ok := s.tomb(id, now)
		if !ok {
			return nil, nil
		}
		kind := KindCall
		if t.kind == tombDescribe {
			kind = KindDescribe
		}
		return &Binding{ID: id, Kind: kind, fingerprint: t.owner}, nil
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
		if t, ok := s.tomb(id, clock); ok {
			if t.state == callTimeout {
				return ClaimTimedOut, nil
			}
			return ClaimDuplicate, nil
		}
		return ClaimNotFound, nil
	case e.state == callResult:
		return ClaimDuplicate, nil
	case e.state == callTimeout:
		return ClaimTimedOut, nil
	case now.After(e.b.Deadline):
		return ClaimLate, nil
	}
	if confirm != nil {
		if s.confirm(confirm.Key.App, confirm.ConfirmID, clock) != nil {
			return ClaimConfirmTaken, nil
		}
		if len(s.confirms) >= s.maxEntries {
			return ClaimNotFound, ErrStoreFull
		}
		s.confirms[confirmKey{confirm.Key.App, confirm.ConfirmID}] = &memConfirm{c: *confirm, expires: clock.Add(confirmTTL)}
	}
	e.state, e.result = callResult, append(json.RawMessage(nil), result...)
	if e.wake != nil {
		close(e.wake)
	}
	for w := range s.watchers[id] {
		close(w.ch)
	}
	delete(s.watchers, id)
	return Claimed, nil
}

// ClaimTimeout implements Store. It settles the call: the result is handed out here, once, and
// the entry shrinks to a tomb; a repeated ClaimTimeout then reports (nil, false) for an
// answered call.
func (s *MemoryStore) ClaimTimeout(_ context.Context, id string) (json.RawMessage, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	e := s.call(id, now)
	if e == nil {
		t, ok := s.tomb(id, now)
		return nil, !ok || t.state == callTimeout, nil
	}
	var res json.RawMessage
	if e.state == callResult {
		res = e.result // no copy: the entry is dropped below
	} else {
		e.state = callTimeout
	}
	s.settle(id, e, now)
	return res, e.state == callTimeout, nil
}

// closedWake is returned by Watch when the result is already there.
var closedWake = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func noRelease() {}

// Watch implements Store. A bound call keeps one wake channel in its entry (no allocation per
// watcher beyond the channel, nothing to release); an id watched before it is bound falls back
// to the watchers map.
func (s *MemoryStore) Watch(id string) (<-chan struct{}, func()) {
	s.mu.Lock()
	now := s.now()
	if e := s.call(id, now); e != nil {
		if e.state == callResult {
			s.mu.Unlock()
			return closedWake, noRelease
		}
		if e.wake == nil {
			e.wake = make(chan struct{})
		}
		ch := e.wake
		s.mu.Unlock()
		return ch, noRelease
	}
	if t, ok := s.tomb(id, now); ok && t.state == callResult {
		s.mu.Unlock()
		return closedWake, noRelease
	}
	w := &memWatch{ch: make(chan struct{})}
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
func (s *MemoryStore) GetConfirm(_ context.Context, app, confirmID string) (*ConfirmBinding, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.confirm(app, confirmID, s.now())
	if e == nil {
		return nil, nil
	}
	c := e.c
	return &c, nil
}

// ClaimConfirm implements Store.
func (s *MemoryStore) ClaimConfirm(_ context.Context, app, confirmID string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.confirm(app, confirmID, s.now())
	if e == nil || e.claimed {
		return false, nil
	}
	e.claimed = true
	return true, nil
}

var _ Store = (*MemoryStore)(nil)
