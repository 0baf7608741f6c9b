package pusher

import (
	"reflect"

	"github.com/reverbgo/reverbgo/channels"
	"github.com/reverbgo/reverbgo/config"
)

// appTable is the apps of one configuration, indexed: immutable once stored in Server.apps,
// so a lookup is one atomic load and a map read, and a reload replaces it whole.
type appTable struct {
	byID  map[string]*appState
	byKey map[string]*appState
	list  []*appState // byID's values, in config order (totalConns, metrics)
}

// cfg is the app's configuration now: a reload may swap it (a new secret, new limits) while
// the app's sockets stay open, so read it once per use rather than keeping it.
func (a *appState) cfg() *config.App { return a.conf.Load() }

func (s *Server) appByID(id string) *appState { return s.apps.Load().byID[id] }

func (s *Server) appList() []*appState { return s.apps.Load().list }

// AppIDs lists the ids of the apps now configured (they change with ReloadApps).
func (s *Server) AppIDs() []string {
	list := s.appList()
	ids := make([]string, len(list))
	for i, a := range list {
		ids[i] = a.cfg().ID
	}
	return ids
}

// RecoveryServed reports whether this server keeps recovery history: without it (no app
// enabled recovery at start) an app that enables it later gets resumes answered not_enabled.
func (s *Server) RecoveryServed() bool { return s.history != nil }

// newAppTable indexes apps, reusing old's appState (and so the live counters and sockets)
// for every app id old already has. keep, if not nil, gives the configuration to store for
// a kept app (ReloadApps keeps what cannot change live).
func newAppTable(apps []config.App, old *appTable, keep func(prev, next *config.App) *config.App) *appTable {
	t := &appTable{byID: make(map[string]*appState, len(apps)), byKey: make(map[string]*appState, len(apps))}
	for i := range apps {
		next := &apps[i]
		a := (*appState)(nil)
		if old != nil {
			a = old.byID[next.ID]
		}
		if a == nil {
			a = &appState{}
			a.conf.Store(next)
			a.hist = historyLimits(&next.Recovery)
		} else if keep != nil {
			a.conf.Store(keep(a.cfg(), next))
		}
		t.byID[next.ID] = a
		t.byKey[next.Key] = a
		t.list = append(t.list, a)
	}
	return t
}

// AppChanges is what ReloadApps did, by app id.
type AppChanges struct {
	Added, Removed, Changed, Disabled, Enabled []string
}

// ReloadApps makes apps (a validated configuration's, not modified afterwards) the
// server's apps. An added app accepts connections at once; a removed app's sockets are
// closed with 4001 and a disabled one's with 4003; a kept app's new configuration (secret,
// limits) applies from now on to every use that reads it, its sockets stay open, except its
// recovery settings, kept as they were. Unchanged
// apps are not touched. The table is swapped in one atomic store: a lookup sees the old
// apps or the new ones, never a mix. Calls must not overlap (cmd/reverbgo makes them from
// its one signal loop).
func (s *Server) ReloadApps(apps []config.App) AppChanges {
	var ch AppChanges
	old := s.apps.Load()
	keep := func(prev, next *config.App) *config.App {
		if reflect.DeepEqual(prev, next) {
			return prev
		}
		ch.Changed = append(ch.Changed, next.ID)
		if !reflect.DeepEqual(prev.Recovery, next.Recovery) {
			// A kept app's recovery stays as started (its history limits, hist, are fixed):
			// the caller reports it as needing a restart.
			c := *next
			c.Recovery = prev.Recovery
			next = &c
		}
		switch {
		case prev.IsEnabled() && !next.IsEnabled():
			ch.Disabled = append(ch.Disabled, next.ID)
		case !prev.IsEnabled() && next.IsEnabled():
			ch.Enabled = append(ch.Enabled, next.ID)
		}
		return next
	}
	t := newAppTable(apps, old, keep)
	s.apps.Store(t)
	closing := map[*appState]CloseReason{}
	for _, a := range old.list {
		id := a.cfg().ID
		switch {
		case t.byID[id] == nil:
			ch.Removed = append(ch.Removed, id)
			closing[a] = CloseAppNotFound
			s.reg.Unsubscribe(id, channels.TerminateChannel, terminator{}.SocketID())
		case !a.cfg().IsEnabled():
			closing[a] = CloseAppDisabled
		}
	}
	for _, a := range t.list {
		if old.byID[a.cfg().ID] == nil {
			ch.Added = append(ch.Added, a.cfg().ID)
			s.reg.Subscribe(a.cfg().ID, channels.TerminateChannel, terminator{s: s, appID: a.cfg().ID})
		}
	}
	if len(closing) > 0 {
		// After the store: a socket registering meanwhile either is in the table walked
		// here or sees the new table in register (admitted).
		s.sockets.each(func(c *Conn) {
			if reason, ok := closing[c.app]; ok {
				c.closeWith(reason)
			}
		})
	}
	return ch
}

// admitted reports whether the app a socket was accepted for is still configured and
// enabled (a reload may have removed or disabled it during the handshake).
func (s *Server) admitted(a *appState) bool {
	return s.appByID(a.cfg().ID) == a && a.cfg().IsEnabled()
}
