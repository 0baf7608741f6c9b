package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"hash/maphash"
	"time"
)

// ConvKey identifies one page conversation: the manifest, calls and confirmations of one
// app, user and conversation are only ever matched against the same key.
type ConvKey struct {
	App          string `json:"app"`
	User         string `json:"user"`
	Conversation string `json:"conversation"`
}

// Binding is what a call id is bound to before its message is broadcast (MUST 2). A result is
// accepted only from the same key and clientId.
type Binding struct {
	ID        string    `json:"id"`
	Key       ConvKey   `json:"key"`
	ClientID  string    `json:"clientId"`
	Kind      string    `json:"kind"` // KindCall or KindDescribe
	Tool      string    `json:"tool"`
	ToolUseID string    `json:"toolUseId,omitempty"`
	Deadline  time.Time `json:"deadline"`

	// fingerprint stands in for Key and ClientID (then empty) in the binding of a call the
	// MemoryStore has settled: its tomb keeps 8 bytes instead of four strings. See Matches.
	fingerprint uint64
}

// Matches reports whether a result from conversation k and page clientID may answer this call
// (else 403). It compares the fingerprint when the binding is a settled call's stand-in.
func (b *Binding) Matches(k ConvKey, clientID string) bool {
	if b.fingerprint != 0 {
		return b.fingerprint == ownerFingerprint(k, clientID)
	}
	return b.Key == k && b.ClientID == clientID
}

var ownerSeed = maphash.MakeSeed()

// ownerFingerprint hashes a binding's owner with a per-process seed; never 0. A collision
// (2^-64, not steerable without the seed) only turns a 403 into a 409: both refuse the result.
func ownerFingerprint(k ConvKey, clientID string) uint64 {
	var h maphash.Hash
	h.SetSeed(ownerSeed)
	for _, s := range [...]string{k.App, k.User, k.Conversation, clientID} {
		_, _ = h.WriteString(s)
		_ = h.WriteByte(0)
	}
	if v := h.Sum64(); v != 0 {
		return v
	}
	return 1
}

// ConfirmBinding is what a needs_confirmation's confirmId is bound to (MUST 5).
type ConfirmBinding struct {
	ConfirmID string  `json:"confirmId"`
	Key       ConvKey `json:"key"`
	ClientID  string  `json:"clientId"`
	CallID    string  `json:"callId"`
	ToolUseID string  `json:"toolUseId,omitempty"`
}

// ClaimOutcome is the answer of Store.ClaimResult.
type ClaimOutcome int

const (
	// Claimed: the result won the call; it is stored and the waiter is woken.
	Claimed ClaimOutcome = iota
	// ClaimNotFound: the id is unknown or expired (404).
	ClaimNotFound
	// ClaimDuplicate: a result was already accepted (409).
	ClaimDuplicate
	// ClaimTimedOut: the waiter already claimed the call as timed out (409).
	ClaimTimedOut
	// ClaimLate: the deadline passed but the waiter has not claimed yet (410). Nothing is
	// changed, so the waiter's timeout claim still succeeds.
	ClaimLate
	// ClaimConfirmTaken: the result's confirmId is already bound (409). Nothing is changed.
	ClaimConfirmTaken
)

// ErrExists is returned by Bind when the id is already bound (a UUID collision).
var ErrExists = errors.New("bridge: id already bound")

// Store holds the bridge's shared state. Every method must be atomic on its own: the memory
// store is (one mutex), a Redis store does it with SET NX PX and Lua. It is deliberately narrow so
// that a cluster-wide implementation stays small.
type Store interface {
	// PutManifest stores m for k with ttl, unless the stored manifest has the same clientId and
	// a higher rev (out-of-order POSTs; the highest rev wins). A manifest from another clientId
	// always replaces (a reload or second tab takes over new calls). stored reports which.
	PutManifest(ctx context.Context, k ConvKey, m Manifest, ttl time.Duration) (stored bool, err error)
	// GetManifest returns the current manifest or nil.
	GetManifest(ctx context.Context, k ConvKey) (*Manifest, error)
	// ChangeRev raises the rev of k's manifest to rev if clientID is its clientId and rev is
	// higher, refreshing ttl. current is false when there is no manifest or clientID is not
	// the current one.
	ChangeRev(ctx context.Context, k ConvKey, clientID string, rev int64, ttl time.Duration) (current bool, err error)

	// Bind records b, unclaimed, for ttl (which outlives b.Deadline so that late results get
	// 410/409 rather than 404). ErrExists if b.ID is bound.
	Bind(ctx context.Context, b Binding, ttl time.Duration) error
	// GetBinding returns the binding of id or nil. Once the call is settled (ClaimTimeout) a
	// store may return a compact stand-in with only ID and Kind: compare owners with
	// Binding.Matches, never with Key and ClientID.
	GetBinding(ctx context.Context, id string) (*Binding, error)
	// ClaimResult atomically claims call id for a page result: duplicate and timed-out claims
	// lose, a result after the binding's deadline (compared with now) is ClaimLate, and when
	// confirm is not nil its confirmId is bound add-if-absent for confirmTTL in the same step
	// (ClaimConfirmTaken if already bound). On Claimed the result is stored and every Watch of
	// id fires.
	ClaimResult(ctx context.Context, id string, result json.RawMessage, now time.Time,
		confirm *ConfirmBinding, confirmTTL time.Duration) (ClaimOutcome, error)
	// ClaimTimeout is the waiter's side of the race: it claims id as timed out and returns
	// timedOut true, or, when a result won, returns that result. An unknown id counts as
	// timed out. It settles the call: the result is handed out to this one call, and a store
	// may then keep only what 409/410 answers need (a repeat may return a nil result).
	ClaimTimeout(ctx context.Context, id string) (result json.RawMessage, timedOut bool, err error)
	// Watch returns a channel that is closed once a result for id has been claimed (here or,
	// for a shared store, on any node), and a func to release it. A missed wake-up is safe: the
	// waiter calls ClaimTimeout at its deadline and gets the stored result.
	Watch(id string) (<-chan struct{}, func())

	// GetConfirm returns the binding of confirmID in app or nil. ConfirmIds are chosen by
	// pages, so each app has its own namespace (another tenant's page cannot take a
	// predictable id first); within an app the binding's user, conversation and clientId are
	// compared by the caller, so a confirmed from the wrong socket is a 403, not a 404.
	GetConfirm(ctx context.Context, app, confirmID string) (*ConfirmBinding, error)
	// ClaimConfirm claims confirmID of app once; false if it was already claimed or is
	// unknown.
	ClaimConfirm(ctx context.Context, app, confirmID string) (bool, error)
}
