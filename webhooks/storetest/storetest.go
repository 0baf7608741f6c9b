// Package storetest is the conformance suite every webhooks.Store must pass: the memory
// store and the Redis store (on miniredis and, when REVERBGO_TEST_REDIS_URL is set, on a
// real server) run the same cases, so the Dispatcher can rely on the Store contract rather
// than on one implementation. Cases that need several nodes run only for stores that
// share state (NewStores returns more than one node).
package storetest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/reverbgo/reverbgo/webhooks"
)

// NewStores returns n nodes of one cluster (one shared backend), fresh for the test. A store
// that cannot be shared returns only one, whatever n is.
type NewStores func(t *testing.T, n int) Nodes

// Nodes are the stores of a cluster's nodes, each registered with its node's registry (a
// cluster.NodeRegistry, as cmd/reverbgo does).
type Nodes struct {
	Stores []webhooks.Store
	// Elapse lets d pass for the backend's expiries (a sleep, or miniredis's FastForward
	// plus a sleep for the process's own clock).
	Elapse func(time.Duration)
	// Kill makes node i dead: it heartbeats no more, and returns once the other nodes'
	// registries reaped it (nil for a store that is not shared).
	Kill func(t *testing.T, i int)
}

// elapse is the current case's; cases run sequentially.
var elapse func(time.Duration)

// Run runs every case.
func Run(t *testing.T, newStores NewStores) {
	cases := []struct {
		name  string
		nodes int
		f     func(*testing.T, Nodes)
	}{
		{"ClaimAckOrder", 1, claimAckOrder},
		{"PushLimitDropsOldestQueued", 1, pushLimit},
		{"LeaseExclusive", 1, leaseExclusive},
		{"LeaseExpiryTakeover", 1, leaseTakeover},
		{"EmptyClaimReleases", 1, emptyClaimReleases},
		{"OccupyVacateHoldFire", 1, occupyVacateFire},
		{"ReoccupyCancelsHold", 1, reoccupyCancels},
		{"RejoinCancelsRemoved", 1, rejoinCancels},
		{"CacheMissOncePerOccupation", 1, cacheMissOnce},
		{"CountDebounce", 1, countDebounce},
		{"FireNotBeforeDue", 1, fireNotBeforeDue},
		{"Isolation", 1, isolation},
		{"OccupancyClusterWide", 2, occupancyClusterWide},
		{"HoldAcrossNodes", 2, holdAcrossNodes},
		{"DeadNodeReaped", 2, deadNodeReaped},
		{"OneFireAcrossNodes", 2, oneFire},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			nodes := newStores(t, c.nodes)
			elapse = nodes.Elapse
			if len(nodes.Stores) < c.nodes {
				t.Skipf("needs %d nodes of one shared store", c.nodes)
			}
			c.f(t, nodes)
		})
	}
}

var ctx = context.Background()

const (
	lease = time.Minute
	app   = "app1"
)

func out(raw string, keys ...string) webhooks.Out {
	return webhooks.Out{Keys: keys, Raw: []byte(raw)}
}

func strs(b [][]byte) []string {
	s := make([]string, len(b))
	for i, x := range b {
		s[i] = string(x)
	}
	return s
}

func push(t *testing.T, s webhooks.Store, key string, raws ...string) {
	t.Helper()
	for _, r := range raws {
		if _, err := s.Push(ctx, out(r, key)); err != nil {
			t.Fatal(err)
		}
	}
}

func claim(t *testing.T, s webhooks.Store, key, owner string, max int) ([]string, bool) {
	t.Helper()
	b, ok, err := s.Claim(ctx, key, owner, max, lease, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return strs(b.Events), ok
}

func wantClaim(t *testing.T, s webhooks.Store, key, owner string, max int, want ...string) {
	t.Helper()
	got, ok := claim(t, s, key, owner, max)
	if !ok || !slices.Equal(got, want) {
		t.Fatalf("Claim(%s, %s) = %v ok=%v, want %v", key, owner, got, ok, want)
	}
}

func ack(t *testing.T, s webhooks.Store, key, owner string, want bool) {
	t.Helper()
	ok, err := s.Ack(ctx, key, owner)
	if err != nil || ok != want {
		t.Fatalf("Ack(%s, %s) = %v, %v; want %v", key, owner, ok, err, want)
	}
}

func size(t *testing.T, s webhooks.Store, key string) int {
	t.Helper()
	n, err := s.Size(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func due(t *testing.T, s webhooks.Store, now time.Time) []webhooks.Hold {
	t.Helper()
	hs, err := s.Due(ctx, now, 100)
	if err != nil {
		t.Fatal(err)
	}
	return hs
}

func fire(t *testing.T, s webhooks.Store, h webhooks.Hold, now time.Time, o webhooks.Out) bool {
	t.Helper()
	ok, err := s.Fire(ctx, h, now, o)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

func claimAckOrder(t *testing.T, c Nodes) {
	s := c.Stores
	st := s[0]
	push(t, st, "k", "0", "1", "2", "3", "4")
	if n := size(t, st, "k"); n != 5 {
		t.Fatalf("Size = %d", n)
	}
	wantClaim(t, st, "k", "a", 3, "0", "1", "2")
	// Until acknowledged, the same batch comes back: a retry or a new owner sends it again.
	wantClaim(t, st, "k", "a", 3, "0", "1", "2")
	if n := size(t, st, "k"); n != 5 {
		t.Fatalf("Size with a batch in flight = %d, want 5", n)
	}
	ack(t, st, "k", "a", true)
	wantClaim(t, st, "k", "a", 3, "3", "4")
	ack(t, st, "k", "a", true)
	wantClaim(t, st, "k", "a", 3)
	if n := size(t, st, "k"); n != 0 {
		t.Fatalf("Size = %d", n)
	}
}

func pushLimit(t *testing.T, c Nodes) {
	s := c.Stores
	st := s[0]
	push(t, st, "k", "0")
	wantClaim(t, st, "k", "a", 1, "0") // in flight: never trimmed
	total := 0
	for i := 1; i <= 6; i++ {
		n, err := st.Push(ctx, webhooks.Out{Keys: []string{"k", "k2"}, Raw: []byte(fmt.Sprint(i)), Limit: 3})
		if err != nil {
			t.Fatal(err)
		}
		total += n
	}
	if total != 6 {
		t.Fatalf("dropped %d, want 6 (3 per outbox)", total)
	}
	ack(t, st, "k", "a", true)
	wantClaim(t, st, "k", "a", 10, "4", "5", "6")
	wantClaim(t, st, "k2", "a", 10, "4", "5", "6")
}

func leaseExclusive(t *testing.T, c Nodes) {
	s := c.Stores
	st := s[0]
	push(t, st, "k", "0", "1")
	wantClaim(t, st, "k", "a", 1, "0")
	if got, ok := claim(t, st, "k", "b", 1); ok || got != nil && len(got) > 0 {
		t.Fatalf("second owner claimed %v ok=%v while the lease is held", got, ok)
	}
	ack(t, st, "k", "b", false)
	if ok, err := st.Renew(ctx, "k", "b", lease); err != nil || ok {
		t.Fatalf("Renew by non-owner = %v %v", ok, err)
	}
	if ok, err := st.Renew(ctx, "k", "a", lease); err != nil || !ok {
		t.Fatalf("Renew by owner = %v %v", ok, err)
	}
	ack(t, st, "k", "a", true)
	if err := st.Release(ctx, "k", "b"); err != nil { // not b's: no effect
		t.Fatal(err)
	}
	if _, ok := claim(t, st, "k", "b", 1); ok {
		t.Fatal("Release by a non-owner freed the lease")
	}
	if err := st.Release(ctx, "k", "a"); err != nil {
		t.Fatal(err)
	}
	wantClaim(t, st, "k", "b", 1, "1")
}

func leaseTakeover(t *testing.T, c Nodes) {
	s := c.Stores
	st := s[0]
	push(t, st, "k", "0", "1")
	first := time.UnixMilli(1_700_000_000_000)
	if b, ok, err := st.Claim(ctx, "k", "a", 1, 50*time.Millisecond, first); err != nil || !ok || !b.Since.Equal(first) {
		t.Fatal(b.Since, ok, err)
	}
	if _, ok := claim(t, st, "k", "b", 1); ok {
		t.Fatal("claimed before the lease expired")
	}
	elapse(100 * time.Millisecond)
	// The batch keeps the time of its first claim: RetryFor counts from there on any owner.
	b, ok, err := st.Claim(ctx, "k", "b", 1, lease, first.Add(time.Minute))
	if err != nil || !ok || !slices.Equal(strs(b.Events), []string{"0"}) || !b.Since.Equal(first) {
		t.Fatalf("new owner got %v since %v ok=%v %v, want the unacknowledged batch [0] since %v", strs(b.Events), b.Since, ok, err, first)
	}
	ack(t, st, "k", "a", false) // the old owner learns it lost the batch
	if ok, _ := st.Renew(ctx, "k", "a", lease); ok {
		t.Fatal("old owner renewed a lost lease")
	}
	ack(t, st, "k", "b", true)
	next := first.Add(2 * time.Minute)
	if b, ok, err := st.Claim(ctx, "k", "b", 1, lease, next); err != nil || !ok || !slices.Equal(strs(b.Events), []string{"1"}) || !b.Since.Equal(next) {
		t.Fatalf("next batch %v since %v ok=%v %v, want [1] since %v", strs(b.Events), b.Since, ok, err, next)
	}
}

func emptyClaimReleases(t *testing.T, c Nodes) {
	s := c.Stores
	st := s[0]
	push(t, st, "k", "0")
	wantClaim(t, st, "k", "a", 1, "0")
	ack(t, st, "k", "a", true)
	wantClaim(t, st, "k", "a", 1) // empty: lease released
	push(t, st, "k", "1")
	wantClaim(t, st, "k", "b", 1, "1")
}

func occupyVacateFire(t *testing.T, c Nodes) {
	s := c.Stores
	st := s[0]
	now := time.Now()
	if ok, err := st.Occupy(ctx, app, "c", out("occ", "k")); err != nil || !ok {
		t.Fatalf("Occupy = %v %v", ok, err)
	}
	if ok, _ := st.Occupy(ctx, app, "c", out("occ", "k")); ok {
		t.Fatal("a repeated Occupy emitted again")
	}
	if err := st.Vacate(ctx, app, "nope", now); err != nil { // never occupied: no-op
		t.Fatal(err)
	}
	if err := st.Vacate(ctx, app, "c", now.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if hs := due(t, st, now); len(hs) != 0 {
		t.Fatalf("due before the hold ends: %v", hs)
	}
	hs := due(t, st, now.Add(time.Second))
	want := webhooks.Hold{Kind: webhooks.HoldVacated, App: app, Channel: "c"}
	if len(hs) != 1 || hs[0] != want {
		t.Fatalf("Due = %v, want [%v]", hs, want)
	}
	if !fire(t, st, hs[0], now.Add(time.Second), out("vac", "k")) {
		t.Fatal("Fire = false")
	}
	if fire(t, st, hs[0], now.Add(time.Second), out("vac", "k")) {
		t.Fatal("a hold fired twice")
	}
	wantClaim(t, st, "k", "a", 10, "occ", "vac")
}

func reoccupyCancels(t *testing.T, c Nodes) {
	s := c.Stores
	st := s[0]
	now := time.Now()
	mustOccupy(t, st, "c", true)
	if err := st.Vacate(ctx, app, "c", now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	mustOccupy(t, st, "c", false) // within the hold: neither vacated nor a second occupied
	if hs := due(t, st, now.Add(2*time.Hour)); len(hs) != 0 {
		t.Fatalf("the cancelled hold is still due: %v", hs)
	}
	wantClaim(t, st, "k", "a", 10, "occ")
}

func mustOccupy(t *testing.T, st webhooks.Store, ch string, want bool) {
	t.Helper()
	ok, err := st.Occupy(ctx, app, ch, out("occ", "k"))
	if err != nil || ok != want {
		t.Fatalf("Occupy(%s) = %v %v, want %v", ch, ok, err, want)
	}
}

func rejoinCancels(t *testing.T, c Nodes) {
	s := c.Stores
	st := s[0]
	now := time.Now()
	if ok, _ := st.MemberAdd(ctx, app, "presence-c", "u1", out("add", "k")); !ok {
		t.Fatal("first MemberAdd did not emit")
	}
	if err := st.MemberRemove(ctx, app, "presence-c", "u1", now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := st.MemberRemove(ctx, app, "presence-c", "u2", now); err != nil {
		t.Fatal(err)
	}
	if ok, _ := st.MemberAdd(ctx, app, "presence-c", "u1", out("add", "k")); ok {
		t.Fatal("a rejoin within the hold emitted member_added")
	}
	hs := due(t, st, now.Add(2*time.Hour))
	want := webhooks.Hold{Kind: webhooks.HoldRemoved, App: app, Channel: "presence-c", User: "u2"}
	if len(hs) != 1 || hs[0] != want {
		t.Fatalf("Due = %v, want only u2's removal", hs)
	}
}

func cacheMissOnce(t *testing.T, c Nodes) {
	s := c.Stores
	st := s[0]
	now := time.Now()
	mustOccupy(t, st, "cache-c", true)
	for i, want := range []bool{true, false, false} {
		if ok, err := st.CacheMiss(ctx, app, "cache-c", out("miss", "k")); err != nil || ok != want {
			t.Fatalf("CacheMiss #%d = %v %v, want %v", i, ok, err, want)
		}
	}
	// Re-occupied within the hold: still the same occupation.
	_ = st.Vacate(ctx, app, "cache-c", now.Add(time.Hour))
	mustOccupy(t, st, "cache-c", false)
	if ok, _ := st.CacheMiss(ctx, app, "cache-c", out("miss", "k")); ok {
		t.Fatal("cache_miss again within one occupation")
	}
	// Vacated for real: the next occupation gets its own cache_miss.
	_ = st.Vacate(ctx, app, "cache-c", now)
	for _, h := range due(t, st, now) {
		fire(t, st, h, now, webhooks.Out{})
	}
	mustOccupy(t, st, "cache-c", true)
	if ok, _ := st.CacheMiss(ctx, app, "cache-c", out("miss", "k")); !ok {
		t.Fatal("no cache_miss in a new occupation")
	}
	wantClaim(t, st, "k", "a", 10, "occ", "miss", "occ", "miss")
}

func countDebounce(t *testing.T, c Nodes) {
	s := c.Stores
	st := s[0]
	now := time.Now()
	for i := range 5 {
		if err := st.Count(ctx, app, "c", now.Add(time.Duration(i+1)*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	if hs := due(t, st, now.Add(time.Second-time.Millisecond)); len(hs) != 0 {
		t.Fatalf("due early: %v", hs)
	}
	hs := due(t, st, now.Add(time.Second))
	if len(hs) != 1 || hs[0].Kind != webhooks.HoldCount {
		t.Fatalf("Due = %v, want one subscription_count at the first change + window", hs)
	}
	fire(t, st, hs[0], now.Add(time.Second), out("count", "k"))
	if err := st.Count(ctx, app, "c", now.Add(3*time.Second)); err != nil { // a new window
		t.Fatal(err)
	}
	if hs := due(t, st, now.Add(3*time.Second)); len(hs) != 1 {
		t.Fatalf("Due after a new change = %v", hs)
	}
}

func fireNotBeforeDue(t *testing.T, c Nodes) {
	s := c.Stores
	st := s[0]
	now := time.Now()
	h := webhooks.Hold{Kind: webhooks.HoldRemoved, App: app, Channel: "presence-c", User: "u"}
	if fire(t, st, h, now, out("x", "k")) {
		t.Fatal("fired a hold that does not exist")
	}
	_ = st.MemberRemove(ctx, app, "presence-c", "u", now.Add(time.Minute))
	if fire(t, st, h, now, out("x", "k")) {
		t.Fatal("fired before its time")
	}
	if n := size(t, st, "k"); n != 0 {
		t.Fatalf("a refused Fire queued %d events", n)
	}
	if !fire(t, st, h, now.Add(time.Minute), out("x", "k")) {
		t.Fatal("not fired at its time")
	}
}

func isolation(t *testing.T, c Nodes) {
	s := c.Stores
	st := s[0]
	mustOccupy(t, st, "c", true)
	if ok, _ := st.Occupy(ctx, "app2", "c", out("occ2", "k")); !ok {
		t.Fatal("another app's channel of the same name is a channel of its own")
	}
	push(t, st, "k2", "x")
	wantClaim(t, st, "k", "a", 10, "occ", "occ2")
	wantClaim(t, st, "k2", "a", 10, "x")
}

func occupancyClusterWide(t *testing.T, c Nodes) {
	s := c.Stores
	a, b := s[0], s[1]
	now := time.Now()
	mustOccupy(t, a, "c", true)
	mustOccupy(t, b, "c", false) // already occupied by node a
	_ = a.Vacate(ctx, app, "c", now)
	if hs := due(t, b, now); len(hs) != 0 {
		t.Fatalf("vacated while node b still has subscribers: %v", hs)
	}
	_ = b.Vacate(ctx, app, "c", now)
	if hs := due(t, a, now); len(hs) != 1 || hs[0].Kind != webhooks.HoldVacated {
		t.Fatalf("Due = %v, want the channel vacated once the last node left", hs)
	}
}

func holdAcrossNodes(t *testing.T, c Nodes) {
	s := c.Stores
	a, b := s[0], s[1]
	now := time.Now()
	mustOccupy(t, a, "presence-c", true)
	_, _ = a.MemberAdd(ctx, app, "presence-c", "u", out("add", "k"))
	// The user leaves through node a and rejoins through node b within the hold.
	_ = a.MemberRemove(ctx, app, "presence-c", "u", now.Add(time.Hour))
	_ = a.Vacate(ctx, app, "presence-c", now.Add(time.Hour))
	mustOccupy(t, b, "presence-c", false)
	if ok, _ := b.MemberAdd(ctx, app, "presence-c", "u", out("add", "k")); ok {
		t.Fatal("member_added on node b after the user left node a within the hold")
	}
	if hs := due(t, a, now.Add(2*time.Hour)); len(hs) != 0 {
		t.Fatalf("holds left: %v", hs)
	}
	wantClaim(t, b, "k", "a", 10, "occ", "add")
}

func deadNodeReaped(t *testing.T, c Nodes) {
	a, b := c.Stores[0], c.Stores[1]
	mustOccupy(t, a, "only-a", true)
	mustOccupy(t, a, "both", true)
	mustOccupy(t, b, "both", false)
	// Node a stops heartbeating; b's registry reaps it: what only a had is vacated.
	c.Kill(t, 0)
	now := time.Now()
	hs := due(t, b, now)
	want := webhooks.Hold{Kind: webhooks.HoldVacated, App: app, Channel: "only-a"}
	if len(hs) != 1 || hs[0] != want {
		t.Fatalf("Due after reaping = %v, want [%v]", hs, want)
	}
	// Reaping again finds nothing more; "both" still counts node b.
	c.Kill(t, 0)
	if hs := due(t, b, now.Add(time.Second)); len(hs) != 1 {
		t.Fatalf("a second reap added holds: %v", hs)
	}
	_ = b.Vacate(ctx, app, "both", now)
	if hs := due(t, b, now.Add(time.Second)); len(hs) != 2 {
		t.Fatalf("Due = %v, want both channels vacated", hs)
	}
}

func oneFire(t *testing.T, c Nodes) {
	s := c.Stores
	a, b := s[0], s[1]
	now := time.Now()
	_ = a.MemberRemove(ctx, app, "presence-c", "u", now)
	h := due(t, a, now)[0]
	fa := fire(t, a, h, now, out("rm", "k"))
	fb := fire(t, b, h, now, out("rm", "k"))
	if fa == fb {
		t.Fatalf("Fire on a = %v, on b = %v: want exactly one", fa, fb)
	}
	wantClaim(t, a, "k", "x", 10, "rm")
}
