package webhooks

import (
	"slices"
	"sync"
)

// ledger is a RedisStore's record of the events this node queued and has not yet seen done
// (delivered, given up or trimmed), so that events a Redis wipe took (a restart without
// persistence, a FLUSHALL, a failover to an empty replica) are counted dropped instead of
// vanishing unseen.
//
// Every outbox has a state hash in Redis beside its lists: a generation (a fresh id chosen
// by whichever node created the hash), e (the sequence number of the last event queued),
// h (of the last event taken from the queue, by a claim or by the overflow trim) and fs (the
// first of the in-flight batch). The queue therefore holds e's in (h, e] and the in-flight
// list [fs, fs+len). A push returns each event's (generation, sequence) and the ledger keeps
// the sequence; every read of the state (each poll's Size, this node's own Acks) forgets the
// ones no longer queued or in flight. When a read or a push shows another generation (or
// none), the hash was lost with everything queued under it, and what the ledger still holds
// of the old generation is exactly this node's share of the loss. Each node counts only the
// events it queued, so two nodes never count one event twice, and nothing is sent again (no
// duplicate by design).
//
// Bounded: a poll leaves only what is still queued or in flight, which OutboxLimit bounds;
// and an outbox never keeps more than ledgerCap(limit) (a safety valve for a roll from a
// version that does not keep the state, whose claims do not advance it: the oldest are
// forgotten, which can only under-count).
// The count errs on the high side in one case: an event of this node that another node
// delivered within the last poll interval before the wipe is counted lost.
type ledger struct {
	mu    sync.Mutex
	clock uint64 // stamps reads (begin) and records, to order them
	out   map[string]*ledgerOutbox
	lost  map[string]int // outbox key -> events lost since the last take
}

type ledgerOutbox struct {
	gen  string  // the generation seqs belong to ("" once a read found no state)
	prev string  // the generation before gen: an event recorded under it was lost
	seqs []int64 // ascending
	at   uint64  // clock of the last record
}

// outboxState is one read of an outbox's state hash: gen "" when there is none; fl is the
// length of the in-flight list.
type outboxState struct {
	gen       string
	h, fs, fl int64
}

func newLedger() *ledger {
	return &ledger{out: map[string]*ledgerOutbox{}, lost: map[string]int{}}
}

// begin stamps a read about to be sent.
func (l *ledger) begin() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.clock++
	return l.clock
}

// ledgerCap bounds an outbox's entries: far above what its queue (at most limit) and its
// batch in flight can hold. limit 0 (unbounded queue) leaves the bound to the polls.
func ledgerCap(limit int) int {
	if limit <= 0 {
		return 0
	}
	return 2*limit + 1000
}

// record keeps an event this node queued as seq under gen into an outbox of limit (see
// ledgerCap). Pushes may answer out of order (the op queue and the hold ticker push
// concurrently), so a push's generation is compared with both the current and the
// previous one.
func (l *ledger) record(key, gen string, seq int64, limit int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.clock++
	o := l.out[key]
	if o == nil {
		o = &ledgerOutbox{gen: gen}
		l.out[key] = o
	}
	switch {
	case gen == o.gen:
	case gen == o.prev && o.prev != "":
		l.lost[key]++ // queued just before the wipe, answered after a push that saw it
		return
	default: // a generation after ours: what we hold of ours was lost
		l.lose(key, o, gen)
	}
	if i, found := slices.BinarySearch(o.seqs, seq); !found {
		o.seqs = slices.Insert(o.seqs, i, seq)
	}
	if c := ledgerCap(limit); c > 0 && len(o.seqs) > c {
		o.seqs = slices.Delete(o.seqs, 0, len(o.seqs)-c)
	}
	o.at = l.clock
}

// observe applies a read of key's state sent at t0 (begin).
func (l *ledger) observe(key string, st outboxState, t0 uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	o := l.out[key]
	if o == nil {
		return
	}
	switch {
	case st.gen == o.gen:
		o.prune(st)
	case st.gen == o.prev && o.prev != "":
		return // a read from before the wipe, answered late
	case o.at < t0:
		// Every event held was queued (and acknowledged by Redis) before this read was sent,
		// and the read finds another generation or none: they were lost.
		l.lose(key, o, st.gen)
	default:
		return // a push answered after this read was sent; the next read decides
	}
	if len(o.seqs) == 0 {
		delete(l.out, key)
	}
}

func (l *ledger) lose(key string, o *ledgerOutbox, gen string) {
	if n := len(o.seqs); n > 0 {
		l.lost[key] += n
	}
	if o.gen != "" {
		o.prev = o.gen
	}
	o.gen, o.seqs = gen, o.seqs[:0]
}

// prune forgets the sequences that are neither queued (> h) nor in flight.
func (o *ledgerOutbox) prune(st outboxState) {
	if st.fl <= 0 {
		i, _ := slices.BinarySearch(o.seqs, st.h+1)
		o.seqs = slices.Delete(o.seqs, 0, i)
		return
	}
	i, _ := slices.BinarySearch(o.seqs, st.fs)
	o.seqs = slices.Delete(o.seqs, 0, i)
	// Trimmed while a batch was in flight: (fs+fl-1, h] is gone too.
	from, _ := slices.BinarySearch(o.seqs, st.fs+st.fl)
	to, _ := slices.BinarySearch(o.seqs, st.h+1)
	if from < to {
		o.seqs = slices.Delete(o.seqs, from, to)
	}
}

// take returns and forgets the events lost per outbox since the last take.
func (l *ledger) take() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.lost) == 0 {
		return nil
	}
	out := l.lost
	l.lost = map[string]int{}
	return out
}
