// Package storetest is the conformance suite every bridge.Store must pass: the memory store
// runs it in CI and a Redis store runs the same cases, so the HTTP layer can rely on the
// Store contract rather than on one implementation.
package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reverbgo/reverbgo/bridge"
)

// Run runs every case against fresh stores from newStore.
func Run(t *testing.T, newStore func(t *testing.T) bridge.Store) {
	cases := []struct {
		name string
		f    func(*testing.T, bridge.Store)
	}{
		{"ManifestHighestRevWins", manifestHighestRevWins},
		{"ManifestNewClientReplaces", manifestNewClientReplaces},
		{"ManifestIsolatedByKey", manifestIsolatedByKey},
		{"ChangeRev", changeRev},
		{"ManifestExpires", manifestExpires},
		{"BindAddIfAbsent", bindAddIfAbsent},
		{"ClaimResultOnce", claimResultOnce},
		{"ClaimLateThenTimeout", claimLateThenTimeout},
		{"ClaimTimeoutReturnsResult", claimTimeoutReturnsResult},
		{"ClaimUnknown", claimUnknown},
		{"SettledCallStillAnswers", settledCallStillAnswers},
		{"WatchWakes", watchWakes},
		{"WatchAfterClaim", watchAfterClaim},
		{"ConfirmBindAndClaim", confirmBindAndClaim},
		{"ConfirmTakenLeavesCallOpen", confirmTakenLeavesCallOpen},
		{"ConfirmNamespacedByApp", confirmNamespacedByApp},
		{"RaceResultVsTimeout", raceResultVsTimeout},
		{"RaceDuplicateResults", raceDuplicateResults},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.f(t, newStore(t)) })
	}
}

var ctx = context.Background()

func key(conv string) bridge.ConvKey {
	return bridge.ConvKey{App: "app1", User: "u1", Conversation: conv}
}

func manifest(client string, rev int64, names ...string) bridge.Manifest {
	m := bridge.Manifest{ClientID: client, Rev: rev, Tools: []bridge.Tool{}}
	yes := true
	for _, n := range names {
		m.Tools = append(m.Tools, bridge.Tool{Name: n, LLMName: "l_" + n, Description: "d",
			Hints: bridge.Hints{ReadOnly: &yes}})
	}
	return m
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func get(t *testing.T, s bridge.Store, k bridge.ConvKey) *bridge.Manifest {
	t.Helper()
	m, err := s.GetManifest(ctx, k)
	must(t, err)
	return m
}

func manifestHighestRevWins(t *testing.T, s bridge.Store) {
	k := key("c1")
	if m := get(t, s, k); m != nil {
		t.Fatalf("fresh store has manifest %+v", m)
	}
	for _, step := range []struct {
		rev    int64
		stored bool
		want   int64
	}{{5, true, 5}, {3, false, 5}, {5, true, 5}, {9, true, 9}, {0, false, 9}} {
		stored, err := s.PutManifest(ctx, k, manifest("a", step.rev, fmt.Sprint("t", step.rev)), time.Hour)
		must(t, err)
		if stored != step.stored {
			t.Fatalf("rev %d: stored = %v, want %v", step.rev, stored, step.stored)
		}
		if m := get(t, s, k); m == nil || m.Rev != step.want {
			t.Fatalf("after rev %d: manifest %+v, want rev %d", step.rev, m, step.want)
		}
	}
	m := get(t, s, k)
	if len(m.Tools) != 1 || m.Tools[0].Name != "t9" || m.Tools[0].Hints.ReadOnly == nil || !*m.Tools[0].Hints.ReadOnly {
		t.Fatalf("tools not kept: %+v", m.Tools)
	}
}

func manifestNewClientReplaces(t *testing.T, s bridge.Store) {
	k := key("c1")
	_, err := s.PutManifest(ctx, k, manifest("a", 9), time.Hour)
	must(t, err)
	stored, err := s.PutManifest(ctx, k, manifest("b", 1), time.Hour)
	must(t, err)
	if m := get(t, s, k); !stored || m.ClientID != "b" || m.Rev != 1 {
		t.Fatalf("new clientId did not replace: stored=%v %+v", stored, m)
	}
}

func manifestIsolatedByKey(t *testing.T, s bridge.Store) {
	_, err := s.PutManifest(ctx, key("c1"), manifest("a", 1), time.Hour)
	must(t, err)
	for _, k := range []bridge.ConvKey{key("c2"), {App: "app2", User: "u1", Conversation: "c1"}, {App: "app1", User: "u2", Conversation: "c1"}} {
		if m := get(t, s, k); m != nil {
			t.Fatalf("%+v sees manifest of another key", k)
		}
	}
}

func changeRev(t *testing.T, s bridge.Store) {
	k := key("c1")
	cur, err := s.ChangeRev(ctx, k, "a", 3, time.Hour)
	must(t, err)
	if cur {
		t.Fatal("ChangeRev without manifest reported current")
	}
	_, err = s.PutManifest(ctx, k, manifest("a", 5), time.Hour)
	must(t, err)
	for _, step := range []struct {
		client string
		rev    int64
		cur    bool
		want   int64
	}{{"a", 8, true, 8}, {"a", 2, true, 8}, {"b", 20, false, 8}} {
		cur, err := s.ChangeRev(ctx, k, step.client, step.rev, time.Hour)
		must(t, err)
		if cur != step.cur || get(t, s, k).Rev != step.want {
			t.Fatalf("changed %s/%d: current=%v rev=%d", step.client, step.rev, cur, get(t, s, k).Rev)
		}
	}
}

// eventually polls cond for up to 5 s; stores may expire lazily or via a sweeper.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting: %s", what)
}

func manifestExpires(t *testing.T, s bridge.Store) {
	k := key("c1")
	_, err := s.PutManifest(ctx, k, manifest("a", 1), 50*time.Millisecond)
	must(t, err)
	eventually(t, "manifest expiry", func() bool { return get(t, s, k) == nil })
}

func binding(id string, deadline time.Time) bridge.Binding {
	return bridge.Binding{ID: id, Key: key("c1"), ClientID: "a", Kind: bridge.KindCall, Tool: "t",
		ToolUseID: "toolu_1", Deadline: deadline}
}

func bindAddIfAbsent(t *testing.T, s bridge.Store) {
	b := binding("id1", time.Now().Add(time.Minute).Truncate(time.Millisecond))
	must(t, s.Bind(ctx, b, time.Hour))
	if err := s.Bind(ctx, b, time.Hour); err != bridge.ErrExists {
		t.Fatalf("second Bind = %v, want ErrExists", err)
	}
	got, err := s.GetBinding(ctx, "id1")
	must(t, err)
	if got == nil || got.Key != b.Key || got.ClientID != b.ClientID || got.Kind != b.Kind ||
		got.Tool != b.Tool || got.ToolUseID != b.ToolUseID || !got.Deadline.Equal(b.Deadline) {
		t.Fatalf("GetBinding = %+v, want %+v", got, b)
	}
	if got, err := s.GetBinding(ctx, "nope"); err != nil || got != nil {
		t.Fatalf("unknown binding = %+v, %v", got, err)
	}
}

var okResult = json.RawMessage(`{"status":"ok"}`)

func claim(t *testing.T, s bridge.Store, id string, now time.Time, c *bridge.ConfirmBinding) bridge.ClaimOutcome {
	t.Helper()
	o, err := s.ClaimResult(ctx, id, okResult, now, c, time.Hour)
	must(t, err)
	return o
}

func claimResultOnce(t *testing.T, s bridge.Store) {
	now := time.Now()
	must(t, s.Bind(ctx, binding("id1", now.Add(time.Minute)), time.Hour))
	if o := claim(t, s, "id1", now, nil); o != bridge.Claimed {
		t.Fatalf("first claim = %v", o)
	}
	if o := claim(t, s, "id1", now, nil); o != bridge.ClaimDuplicate {
		t.Fatalf("second claim = %v, want duplicate", o)
	}
	res, timedOut, err := s.ClaimTimeout(ctx, "id1")
	must(t, err)
	if timedOut || string(res) != string(okResult) {
		t.Fatalf("ClaimTimeout after result = %s, %v", res, timedOut)
	}
}

func claimLateThenTimeout(t *testing.T, s bridge.Store) {
	now := time.Now()
	must(t, s.Bind(ctx, binding("id1", now), time.Hour))
	if o := claim(t, s, "id1", now.Add(time.Millisecond), nil); o != bridge.ClaimLate {
		t.Fatalf("late claim = %v, want late", o)
	}
	if _, timedOut, err := s.ClaimTimeout(ctx, "id1"); err != nil || !timedOut {
		t.Fatalf("timeout after late result: %v %v", timedOut, err)
	}
	if o := claim(t, s, "id1", now, nil); o != bridge.ClaimTimedOut {
		t.Fatalf("claim after timeout = %v, want timed out", o)
	}
}

func claimTimeoutReturnsResult(t *testing.T, s bridge.Store) {
	now := time.Now()
	must(t, s.Bind(ctx, binding("id1", now.Add(time.Minute)), time.Hour))
	if _, timedOut, err := s.ClaimTimeout(ctx, "id1"); err != nil || !timedOut {
		t.Fatalf("first timeout claim: %v %v", timedOut, err)
	}
	if _, timedOut, err := s.ClaimTimeout(ctx, "id1"); err != nil || !timedOut {
		t.Fatalf("second timeout claim: %v %v", timedOut, err)
	}
}

// settledCallStillAnswers: after the waiter settled a call, its binding still tells the owner
// from others (403) and its claims still say duplicate or timed out (409), not unknown (404).
func settledCallStillAnswers(t *testing.T, s bridge.Store) {
	now := time.Now()
	for _, tc := range []struct {
		id       string
		answered bool
		want     bridge.ClaimOutcome
	}{{"answered", true, bridge.ClaimDuplicate}, {"timedout", false, bridge.ClaimTimedOut}} {
		b := binding(tc.id, now.Add(time.Minute))
		must(t, s.Bind(ctx, b, time.Hour))
		if tc.answered {
			claim(t, s, tc.id, now, nil)
		}
		res, timedOut, err := s.ClaimTimeout(ctx, tc.id)
		must(t, err)
		if timedOut == tc.answered || tc.answered && string(res) != string(okResult) {
			t.Fatalf("%s: settle = %s, %v", tc.id, res, timedOut)
		}
		got, err := s.GetBinding(ctx, tc.id)
		must(t, err)
		if got == nil || got.Kind != bridge.KindCall || !got.Matches(b.Key, b.ClientID) ||
			got.Matches(b.Key, "other") || got.Matches(key("c2"), b.ClientID) {
			t.Fatalf("%s: settled binding %+v", tc.id, got)
		}
		if o := claim(t, s, tc.id, now, nil); o != tc.want {
			t.Fatalf("%s: claim after settling = %v, want %v", tc.id, o, tc.want)
		}
		if _, timedOut, err := s.ClaimTimeout(ctx, tc.id); err != nil || timedOut == tc.answered {
			t.Fatalf("%s: second settle = %v, %v", tc.id, timedOut, err)
		}
	}
}

func claimUnknown(t *testing.T, s bridge.Store) {
	if o := claim(t, s, "nope", time.Now(), nil); o != bridge.ClaimNotFound {
		t.Fatalf("unknown claim = %v", o)
	}
	if _, timedOut, err := s.ClaimTimeout(ctx, "nope"); err != nil || !timedOut {
		t.Fatalf("unknown timeout claim: %v %v", timedOut, err)
	}
	ok, err := s.ClaimConfirm(ctx, key("c1").App, "nope")
	must(t, err)
	if ok {
		t.Fatal("unknown confirm claimed")
	}
	if c, err := s.GetConfirm(ctx, key("c1").App, "nope"); err != nil || c != nil {
		t.Fatalf("unknown confirm = %+v %v", c, err)
	}
}

func watchWakes(t *testing.T, s bridge.Store) {
	now := time.Now()
	must(t, s.Bind(ctx, binding("id1", now.Add(time.Minute)), time.Hour))
	ch, release := s.Watch("id1")
	defer release()
	other, release2 := s.Watch("id2")
	defer release2()
	go func() { _, _ = s.ClaimResult(ctx, "id1", okResult, now, nil, time.Hour) }()
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("watch not woken")
	}
	select {
	case <-other:
		t.Fatal("watch of another id woken")
	default:
	}
}

func watchAfterClaim(t *testing.T, s bridge.Store) {
	now := time.Now()
	must(t, s.Bind(ctx, binding("id1", now.Add(time.Minute)), time.Hour))
	claim(t, s, "id1", now, nil)
	ch, release := s.Watch("id1")
	release() // releasing must be safe whether or not it fired
	_ = ch
}

func confirmBindAndClaim(t *testing.T, s bridge.Store) {
	now := time.Now()
	must(t, s.Bind(ctx, binding("id1", now.Add(time.Minute)), time.Hour))
	cb := &bridge.ConfirmBinding{ConfirmID: "f1", Key: key("c1"), ClientID: "a", CallID: "id1", ToolUseID: "toolu_1"}
	if o := claim(t, s, "id1", now, cb); o != bridge.Claimed {
		t.Fatalf("claim with confirm = %v", o)
	}
	got, err := s.GetConfirm(ctx, key("c1").App, "f1")
	must(t, err)
	if got == nil || *got != *cb {
		t.Fatalf("GetConfirm = %+v, want %+v", got, cb)
	}
	for i, want := range []bool{true, false, false} {
		ok, err := s.ClaimConfirm(ctx, key("c1").App, "f1")
		must(t, err)
		if ok != want {
			t.Fatalf("ClaimConfirm #%d = %v", i, ok)
		}
	}
}

func confirmTakenLeavesCallOpen(t *testing.T, s bridge.Store) {
	now := time.Now()
	must(t, s.Bind(ctx, binding("id1", now.Add(time.Minute)), time.Hour))
	must(t, s.Bind(ctx, binding("id2", now.Add(time.Minute)), time.Hour))
	cb := &bridge.ConfirmBinding{ConfirmID: "f1", Key: key("c1"), ClientID: "a", CallID: "id1"}
	claim(t, s, "id1", now, cb)
	cb2 := *cb
	cb2.CallID = "id2"
	if o := claim(t, s, "id2", now, &cb2); o != bridge.ClaimConfirmTaken {
		t.Fatalf("reused confirmId = %v, want taken", o)
	}
	if got, _ := s.GetConfirm(ctx, key("c1").App, "f1"); got == nil || got.CallID != "id1" {
		t.Fatalf("confirm rebound: %+v", got)
	}
	if o := claim(t, s, "id2", now, nil); o != bridge.Claimed {
		t.Fatalf("call consumed by rejected claim: %v", o)
	}
}

// confirmNamespacedByApp: the same confirmId bound by two apps both succeed, each visible
// and claimable only in its own; within one app a second user or conversation cannot bind
// it again (409), and GetConfirm returns the first binding, whose key the bridge compares.
func confirmNamespacedByApp(t *testing.T, s bridge.Store) {
	now := time.Now()
	keys := []bridge.ConvKey{
		{App: "app1", User: "u1", Conversation: "c1"},
		{App: "app2", User: "u1", Conversation: "c1"},
	}
	for i, k := range keys {
		id := fmt.Sprintf("ns%d", i)
		b := binding(id, now.Add(time.Minute))
		b.Key = k
		must(t, s.Bind(ctx, b, time.Hour))
		cb := &bridge.ConfirmBinding{ConfirmID: "f1", Key: k, ClientID: "a", CallID: id}
		if o := claim(t, s, id, now, cb); o != bridge.Claimed {
			t.Fatalf("%+v: binding confirmId f1 = %v, want claimed", k, o)
		}
	}
	for i, other := range []bridge.ConvKey{
		{App: "app1", User: "u2", Conversation: "c1"},
		{App: "app1", User: "u1", Conversation: "c2"},
	} {
		id := fmt.Sprintf("other%d", i)
		b := binding(id, now.Add(time.Minute))
		b.Key = other
		must(t, s.Bind(ctx, b, time.Hour))
		cb := &bridge.ConfirmBinding{ConfirmID: "f1", Key: other, ClientID: "a", CallID: id}
		if o := claim(t, s, id, now, cb); o != bridge.ClaimConfirmTaken {
			t.Fatalf("%+v: rebinding app1's confirmId f1 = %v, want taken", other, o)
		}
	}
	for i, k := range keys {
		got, err := s.GetConfirm(ctx, k.App, "f1")
		must(t, err)
		if got == nil || got.Key != k || got.CallID != fmt.Sprintf("ns%d", i) {
			t.Fatalf("%+v: GetConfirm = %+v", k, got)
		}
	}
	ok, err := s.ClaimConfirm(ctx, keys[0].App, "f1")
	must(t, err)
	if !ok {
		t.Fatal("first claim refused")
	}
	if ok, err := s.ClaimConfirm(ctx, keys[1].App, "f1"); err != nil || !ok {
		t.Fatalf("another app's claim of the same confirmId: %v %v", ok, err)
	}
}

// raceResultVsTimeout: per call exactly one side wins, and the loser sees the winner.
func raceResultVsTimeout(t *testing.T, s bridge.Store) {
	now := time.Now()
	const calls = 50
	for i := 0; i < calls; i++ {
		id := fmt.Sprint("race", i)
		must(t, s.Bind(ctx, binding(id, now.Add(time.Minute)), time.Hour))
		var wg sync.WaitGroup
		var resultWon, timeoutWon atomic.Int32
		var sawResult atomic.Int32
		for g := 0; g < 8; g++ {
			wg.Add(2)
			go func() {
				defer wg.Done()
				if o, err := s.ClaimResult(ctx, id, okResult, now, nil, time.Hour); err == nil && o == bridge.Claimed {
					resultWon.Add(1)
				}
			}()
			go func() {
				defer wg.Done()
				res, timedOut, err := s.ClaimTimeout(ctx, id)
				if err != nil {
					return
				}
				if !timedOut && res != nil {
					sawResult.Add(1)
				}
			}()
		}
		wg.Wait()
		_, timedOut, _ := s.ClaimTimeout(ctx, id)
		if timedOut {
			timeoutWon.Add(1)
		}
		if resultWon.Load()+timeoutWon.Load() != 1 {
			t.Fatalf("%s: result won %d times, timeout %d", id, resultWon.Load(), timeoutWon.Load())
		}
		if timeoutWon.Load() == 1 && sawResult.Load() > 0 {
			t.Fatalf("%s: timeout won but a waiter saw a result", id)
		}
	}
}

func raceDuplicateResults(t *testing.T, s bridge.Store) {
	now := time.Now()
	must(t, s.Bind(ctx, binding("dup", now.Add(time.Minute)), time.Hour))
	var wg sync.WaitGroup
	var won, dup atomic.Int32
	for g := 0; g < 32; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o, err := s.ClaimResult(ctx, "dup", okResult, now, nil, time.Hour)
			switch {
			case err != nil:
			case o == bridge.Claimed:
				won.Add(1)
			case o == bridge.ClaimDuplicate:
				dup.Add(1)
			}
		}()
	}
	wg.Wait()
	if won.Load() != 1 || dup.Load() != 31 {
		t.Fatalf("won %d, duplicate %d", won.Load(), dup.Load())
	}
}
