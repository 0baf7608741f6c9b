package config

import (
	"strings"
	"testing"
)

func TestRecoveryDefaults(t *testing.T) {
	var a App
	a.applyDefaults()
	r := a.Recovery
	if r.Enabled || r.HistorySize != 100 || r.HistoryTTL != 300 || len(r.Channels) != 1 || r.Channels[0] != "*" {
		t.Fatalf("defaults = %+v", r)
	}
}

func TestRecoveryValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    Recovery
		want string // "" = valid
	}{
		{"defaults", Recovery{Enabled: true, HistorySize: 100, HistoryTTL: 300, Channels: []string{"*"}}, ""},
		{"max size", Recovery{HistorySize: 10000, HistoryTTL: 1, Channels: []string{"*"}}, ""},
		{"size over max", Recovery{HistorySize: 10001, HistoryTTL: 1, Channels: []string{"*"}}, "apps[0].recovery.history_size: must be at most 10000"},
		{"negative size", Recovery{HistorySize: -1, HistoryTTL: 1, Channels: []string{"*"}}, "apps[0].recovery.history_size"},
		{"negative ttl", Recovery{HistorySize: 1, HistoryTTL: -5, Channels: []string{"*"}}, "apps[0].recovery.history_ttl"},
		{"empty pattern", Recovery{HistorySize: 1, HistoryTTL: 1, Channels: []string{" "}}, "apps[0].recovery.channels[0]: must not be empty"},
		{"bad glob", Recovery{HistorySize: 1, HistoryTTL: 1, Channels: []string{"private-*", "[x"}}, "apps[0].recovery.channels[1]: is not a valid glob"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := &validator{}
			tc.r.validate(v, "apps[0].recovery")
			var got string
			for _, e := range v.errs {
				got += e.Error() + "\n"
			}
			if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
				t.Fatalf("errors = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestRecoveryChannel(t *testing.T) {
	patterns := []string{"private-orders.*", "news", "chat-?", "room-[ab]-x"}
	for _, tc := range []struct {
		ch   string
		want bool
	}{
		{"private-orders.1", true},
		{"private-orders.", true},
		{"private-order", false},
		{"news", true},
		{"news2", false},
		{"chat-1", true},
		{"chat-12", false},
		{"room-a-x", true},
		{"room-c-x", false},
	} {
		compiled := Recovery{Enabled: true, Channels: patterns}
		compiled.compile()
		raw := Recovery{Enabled: true, Channels: patterns} // never validated: path.Match each time
		off := Recovery{Channels: patterns}
		off.compile()
		if got := compiled.Channel(tc.ch); got != tc.want {
			t.Errorf("compiled %q = %v, want %v", tc.ch, got, tc.want)
		}
		if got := raw.Channel(tc.ch); got != tc.want {
			t.Errorf("uncompiled %q = %v, want %v", tc.ch, got, tc.want)
		}
		if off.Channel(tc.ch) {
			t.Errorf("disabled matched %q", tc.ch)
		}
	}
	all := Recovery{Enabled: true, Channels: []string{"*"}}
	all.compile()
	if !all.Channel("presence-x") || !all.Channel("#server-to-user-1") {
		t.Error(`"*" must match every channel`)
	}
}

func TestRecoveryFromYAML(t *testing.T) {
	clearEnv(t)
	cfg, err := Load(writeFile(t, "apps: [{app_id: a, key: k, secret: s, recovery: {enabled: true, history_size: 20, channels: [\"private-*\"]}}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	r := cfg.Apps[0].Recovery
	if !r.Enabled || r.HistorySize != 20 || r.HistoryTTL != 300 || !r.Channel("private-x") || r.Channel("public") {
		t.Fatalf("recovery = %+v", r)
	}
	if _, err := Load(writeFile(t, "apps: [{app_id: a, key: k, secret: s, recovery: {history_size: 20000}}]\n")); err == nil ||
		!strings.Contains(err.Error(), "apps[0].recovery.history_size") {
		t.Fatalf("history_size 20000: err = %v", err)
	}
}
