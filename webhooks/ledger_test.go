package webhooks

import (
	"maps"
	"slices"
	"testing"
)

// TestLedger: what the ledger keeps and counts lost for sequences of pushes and reads,
// including reads answered late (sent before a push or before the wipe) and an overflow trim
// while a batch is in flight.
func TestLedger(t *testing.T) {
	type step struct {
		push  []int64      // seqs recorded under gen
		limit int          // the outbox limit of the pushes
		gen   string       // of the push or the read
		read  *outboxState // a read sent at the stamp of step stamp (see sentAt)
		stamp int          // index of the step before which the read was sent; -1: now
	}
	st := func(gen string, h, fs, fl int64) *outboxState { return &outboxState{gen: gen, h: h, fs: fs, fl: fl} }
	cases := []struct {
		name  string
		steps []step
		keep  []int64
		lost  int
	}{
		{"delivered are forgotten", []step{
			{push: []int64{1, 2, 3}, gen: "g1"},
			{read: st("g1", 2, 1, 0), stamp: -1},
		}, []int64{3}, 0},
		{"in flight kept", []step{
			{push: []int64{1, 2, 3}, gen: "g1"},
			{read: st("g1", 2, 1, 2), stamp: -1},
		}, []int64{1, 2, 3}, 0},
		{"trimmed while in flight forgotten", []step{
			{push: []int64{1, 2, 3, 4, 5, 6}, gen: "g1"},
			{read: st("g1", 4, 1, 2), stamp: -1}, // 1-2 in flight, 3-4 trimmed
		}, []int64{1, 2, 5, 6}, 0},
		{"wiped: a read finds no state", []step{
			{push: []int64{1, 2, 3}, gen: "g1"},
			{read: st("", 0, 0, 0), stamp: -1},
		}, nil, 3},
		{"wiped: a push finds a new generation", []step{
			{push: []int64{1, 2}, gen: "g1"},
			{push: []int64{1}, gen: "g2"},
		}, []int64{1}, 2},
		{"a push answered after the wipe was seen is lost", []step{
			{push: []int64{1}, gen: "g1"},
			{push: []int64{1}, gen: "g2"},
			{push: []int64{2}, gen: "g1"},
		}, []int64{1}, 2},
		{"a read sent before a push decides nothing about it", []step{
			{push: []int64{1}, gen: "g1"},
			{read: st("", 0, 0, 0), stamp: 0}, // sent before the push
		}, []int64{1}, 0},
		{"never more than the cap", []step{
			{push: seqs(1, 1005), gen: "g1", limit: 1},
		}, seqs(4, 1005), 0}, // ledgerCap(1) = 1002
		{"a late read of the old generation is ignored", []step{
			{push: []int64{1, 2}, gen: "g1"},
			{push: []int64{1}, gen: "g2"},
			{read: st("g1", 0, 0, 0), stamp: 1},
		}, []int64{1}, 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := newLedger()
			stamps := make([]uint64, len(c.steps))
			for i := range c.steps {
				stamps[i] = l.begin()
				s := c.steps[i]
				if s.read == nil {
					for _, q := range s.push {
						l.record("k", s.gen, q, s.limit)
					}
					continue
				}
				t0 := l.begin()
				if s.stamp >= 0 {
					t0 = stamps[s.stamp]
				}
				l.observe("k", *s.read, t0)
			}
			var keep []int64
			if o := l.out["k"]; o != nil {
				keep = o.seqs
			}
			lost := l.take()
			if !slices.Equal(keep, c.keep) || lost["k"] != c.lost || len(lost) > 1 {
				t.Fatalf("kept %v lost %v, want %v and %d", keep, maps.Clone(lost), c.keep, c.lost)
			}
		})
	}
}

// seqs is from..to.
func seqs(from, to int64) []int64 {
	var out []int64
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}
