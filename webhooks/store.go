package webhooks

import (
	"context"
	"strings"
	"time"
)

// Store is the seam under the Dispatcher: the outboxes (one ordered queue per app+URL, with a
// lease so that one delivery loop in the whole cluster sends a given outbox's batches) and
// the small state behind Pusher's webhook semantics (which channels are occupied, which
// vacated/removed events are being held, whether a cache_miss was sent this occupation).
//
// MemoryStore serves one process; RedisStore shares everything between the nodes of a
// cluster, so decisions are cluster-wide and queued events survive a node's restart or
// crash. Both pass the shared suite in package webhooks/storetest.
//
// Every method that emits takes an Out: the encoded event and the outboxes it goes to, so a
// decision and the enqueue it causes are one atomic step (a crash cannot take one without
// the other).
type Store interface {
	// Push appends out.Raw to every outbox in out.Keys, dropping the oldest queued (not
	// in-flight) events beyond out.Limit; it returns how many were dropped.
	Push(ctx context.Context, out Out) (dropped int, err error)
	// Claim leases outbox key to owner for lease and returns its in-flight batch: the one a
	// previous owner left unacknowledged (it crashed or lost the lease), else up to max
	// queued events, oldest first, moved to in-flight (its Since is then now). ok is false
	// while another owner holds an unexpired lease. An empty batch releases the lease.
	Claim(ctx context.Context, key, owner string, max int, lease time.Duration, now time.Time) (batch Batch, ok bool, err error)
	// Renew extends owner's lease; false means the lease was lost (expired and taken).
	Renew(ctx context.Context, key, owner string, lease time.Duration) (bool, error)
	// Ack forgets the in-flight batch if owner still holds the lease; false means another
	// owner has taken it over (and will send it again).
	Ack(ctx context.Context, key, owner string) (bool, error)
	// Release gives up owner's lease, keeping any in-flight batch for the next owner.
	Release(ctx context.Context, key, owner string) error
	// Size is the number of queued plus in-flight events of an outbox.
	Size(ctx context.Context, key string) (int, error)
	// Lost returns, per outbox, the events this node queued that the store lost without
	// sending or dropping them (a Redis restarted without persistence, or wiped), as far as
	// Size and Ack have shown since the last call, and forgets them. MemoryStore loses none.
	Lost() map[string]int

	// Occupy records that this node's first local subscriber joined a channel. When it makes
	// the channel occupied cluster-wide it cancels a held channel_vacated (the channel came
	// back within the hold: nothing is sent) or, if none was held, pushes out
	// (channel_occupied). A repeated Occupy by the same node is a no-op.
	Occupy(ctx context.Context, app, channel string, out Out) (emitted bool, err error)
	// Vacate records that this node's last local subscriber left. When the channel becomes
	// vacated cluster-wide a channel_vacated hold is due at due. A Vacate without Occupy
	// is a no-op.
	Vacate(ctx context.Context, app, channel string, due time.Time) error
	// MemberAdd cancels a held member_removed of the user (rejoined within the hold:
	// nothing is sent) or, if none was held, pushes out (member_added).
	MemberAdd(ctx context.Context, app, channel, user string, out Out) (emitted bool, err error)
	// MemberRemove holds a member_removed until due.
	MemberRemove(ctx context.Context, app, channel, user string, due time.Time) error
	// CacheMiss pushes out (cache_miss) only for the first miss of the channel's current
	// occupation; the occupation ends when its channel_vacated fires.
	CacheMiss(ctx context.Context, app, channel string, out Out) (emitted bool, err error)
	// Count schedules a subscription_count hold at due unless one is already scheduled
	// (so a burst of changes yields one event: a debounce with a bounded delay).
	Count(ctx context.Context, app, channel string, due time.Time) error
	// Due lists up to max holds whose time has come.
	Due(ctx context.Context, now time.Time, max int) ([]Hold, error)
	// Fire takes a due hold and pushes out in the same step; false means it was cancelled or
	// taken by another node meanwhile. Firing a channel_vacated ends the occupation.
	Fire(ctx context.Context, h Hold, now time.Time, out Out) (fired bool, err error)
}

// Batch is an outbox's in-flight events and when they were first claimed: the batch's
// first attempt, which stays with it when another owner (or this one, after losing the
// lease) claims it again, so RetryFor counts from there.
type Batch struct {
	Events [][]byte
	Since  time.Time
}

// Out is an encoded event and the outboxes it goes to. No keys is valid: the decision is
// still recorded, nothing is queued.
type Out struct {
	Keys  []string
	Raw   []byte
	Limit int
}

// HoldKind is what a hold sends when it fires.
type HoldKind byte

// The hold kinds; the byte is the first character of the hold's member in a store.
const (
	HoldVacated HoldKind = 'v' // channel_vacated
	HoldRemoved HoldKind = 'r' // member_removed
	HoldCount   HoldKind = 'c' // subscription_count
)

// Hold is one delayed event.
type Hold struct {
	Kind    HoldKind
	App     string
	Channel string
	User    string // HoldRemoved only
}

// member encodes a hold as a string: kind, app, channel and user separated by NUL, which a
// validated app id, channel name or user id cannot contain in a way that is ambiguous (the
// user id, which may contain anything, comes last).
func (h Hold) member() string {
	s := string(h.Kind) + "\x00" + h.App + "\x00" + h.Channel
	if h.Kind == HoldRemoved {
		s += "\x00" + h.User
	}
	return s
}

func parseHold(s string) (Hold, bool) {
	f := strings.SplitN(s, "\x00", 4)
	if len(f) < 3 || len(f[0]) != 1 {
		return Hold{}, false
	}
	h := Hold{Kind: HoldKind(f[0][0]), App: f[1], Channel: f[2]}
	switch h.Kind {
	case HoldRemoved:
		if len(f) != 4 {
			return Hold{}, false
		}
		h.User = f[3]
	case HoldVacated, HoldCount:
		if len(f) != 3 {
			return Hold{}, false
		}
	default:
		return Hold{}, false
	}
	return h, true
}

// field is a channel's key in occupancy state.
func field(app, channel string) string { return app + "\x00" + channel }
