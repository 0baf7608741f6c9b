package testutil

import (
	"maps"
	"testing"

	"github.com/reverbgo/reverbgo/config"
)

// The fakes stand in for real lookups in other packages' tests, so their own rules are
// pinned here: a fake that answered wrongly would let those tests pass for the wrong reason.

func TestSocketsCarryTokensOnlyUnderPrefix(t *testing.T) {
	s := &Sockets{Hash: func(tok string) string { return "h(" + tok + ")" }, Prefix: "private-toolmark."}
	s.Set("1.1", "app1", "presence-room", "private-toolmark.u1.c1")
	s.Set("2.1", "app2", "private-toolmark.u1.c1")
	app, subs, ok := s.Subscriptions("1.1")
	want := map[string]string{"presence-room": "", "private-toolmark.u1.c1": "h(token-of-1.1)"}
	if !ok || app != "app1" || !maps.Equal(subs, want) {
		t.Fatalf("1.1 = %q %q %v", app, subs, ok)
	}
	if !s.Subscribed("app2", "private-toolmark.u1.c1") || s.Subscribed("app2", "presence-room") {
		t.Fatal("Subscribed does not follow the registered channels of the app")
	}
	s.RemoveApp("app1")
	if _, _, ok := s.Subscriptions("1.1"); ok {
		t.Fatal("RemoveApp kept a socket of the app")
	}
	s.Remove("2.1")
	if s.Subscribed("app2", "private-toolmark.u1.c1") {
		t.Fatal("Remove kept the socket")
	}
}

func TestAppsLookUpByIDAndKey(t *testing.T) {
	a := Apps{{ID: "a1", Key: "k1"}, {ID: "a2", Key: "k2"}}
	if a.AppByID("a2") != a[1] || a.AppByKey("k1") != a[0] || a.AppByID("k1") != nil || a.AppByKey("a1") != nil {
		t.Fatal("lookups mix ids and keys")
	}
	if got := a.AllApps(); len(got) != 2 || got[0] != a[0] {
		t.Fatalf("AllApps = %v", got)
	}
	var _ interface{ AppByID(string) *config.App } = a
}

func TestEmitterRecordsAppAndEvent(t *testing.T) {
	var e Emitter
	e.Emit("a1", map[string]any{"name": "x"})
	got := e.All()
	if len(got) != 1 || got[0].App != "a1" || got[0].Event["name"] != "x" {
		t.Fatalf("All = %v", got)
	}
}
