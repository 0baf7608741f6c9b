package config

import (
	"fmt"
	"path"
	"strings"
)

// Recovery is apps[].recovery (issue 23): per-channel history and resume. On a recovery
// channel every event published through the HTTP API carries a per-channel serial, the
// channel keeps its last HistorySize events for HistoryTTL seconds after its last publish,
// and a client that resubscribes with {"resume":{"epoch","serial"}} gets what it missed.
// Off by default: nothing is kept, and frames are the Pusher protocol's, byte for byte.
type Recovery struct {
	Enabled bool `mapstructure:"enabled"`
	// HistorySize is how many events each recovery channel keeps (default 100, at most
	// MaxRecoveryHistorySize).
	HistorySize int `mapstructure:"history_size"`
	// HistoryTTL is how many seconds an idle channel's history (and serial) is kept after
	// its last publish (default 300); after that a resume gets epoch_changed.
	HistoryTTL int `mapstructure:"history_ttl"`
	// Channels are glob patterns (path.Match: '*', '?', '[...]') of the channels with
	// history (default ["*"]: every channel).
	Channels []string `mapstructure:"channels"`

	// match is the compiled Channels (compile); nil until then.
	match *channelMatcher
}

// Recovery defaults and bounds.
const (
	DefaultRecoveryHistorySize = 100
	DefaultRecoveryHistoryTTL  = 300
	// MaxRecoveryHistorySize bounds history_size: a replay is sent in one go on the
	// connection's task queue, and every channel may hold this many frames.
	MaxRecoveryHistorySize = 10000
)

func (r *Recovery) applyDefaults() {
	setInt(&r.HistorySize, DefaultRecoveryHistorySize)
	setInt(&r.HistoryTTL, DefaultRecoveryHistoryTTL)
	if len(r.Channels) == 0 {
		r.Channels = []string{"*"}
	}
}

func (r *Recovery) validate(v *validator, p string) {
	v.positive(p+".history_size", int64(r.HistorySize))
	if r.HistorySize > MaxRecoveryHistorySize {
		v.add(p+".history_size", "must be at most %d, got %d", MaxRecoveryHistorySize, r.HistorySize)
	}
	v.positive(p+".history_ttl", int64(r.HistoryTTL))
	for i, pat := range r.Channels {
		key := fmt.Sprintf("%s.channels[%d]", p, i)
		if strings.TrimSpace(pat) == "" {
			v.add(key, "must not be empty")
		} else if _, err := path.Match(pat, ""); err != nil {
			// A pattern path.Match cannot read would silently never match.
			v.add(key, "is not a valid glob pattern (*, ?, [...]): %q", pat)
		}
	}
	r.compile() // unused when Validate fails
}

// compile builds the matcher once (Validate calls it), so the publish path never parses a
// pattern: "*" matches everything at once, a pattern without a metacharacter is an exact
// name, "prefix*" a prefix test, anything else path.Match.
func (r *Recovery) compile() {
	m := &channelMatcher{}
	for _, pat := range r.Channels {
		switch meta := strings.IndexAny(pat, `*?[\`); {
		case pat == "*":
			m.all = true
		case meta < 0:
			m.exact = append(m.exact, pat)
		case meta == len(pat)-1 && pat[meta] == '*':
			m.prefixes = append(m.prefixes, pat[:meta])
		default:
			m.globs = append(m.globs, pat)
		}
	}
	r.match = m
}

// Channel reports whether channel keeps history: recovery is enabled and a pattern matches.
// Off, it is one field load.
func (r *Recovery) Channel(channel string) bool {
	if !r.Enabled {
		return false
	}
	if r.match == nil { // a hand-built Config that was never validated (tests): no caching,
		for _, pat := range r.Channels { // so concurrent readers never write
			if ok, _ := path.Match(pat, channel); ok {
				return true
			}
		}
		return false
	}
	return r.match.matches(channel)
}

type channelMatcher struct {
	all      bool
	exact    []string
	prefixes []string
	globs    []string
}

func (m *channelMatcher) matches(ch string) bool {
	if m.all {
		return true
	}
	for _, e := range m.exact {
		if ch == e {
			return true
		}
	}
	for _, p := range m.prefixes {
		if strings.HasPrefix(ch, p) { // channel names have no '/', which '*' would not match
			return true
		}
	}
	for _, g := range m.globs {
		if ok, _ := path.Match(g, ch); ok {
			return true
		}
	}
	return false
}
