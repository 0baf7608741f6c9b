// Package channels keeps which sockets are subscribed to which channel of which app, presence
// membership and cache-channel replay, and fans pre-encoded frames out to local subscribers.
// It knows nothing of JSON or WebSockets: frames are opaque bytes built once by the caller.
// The seams under it (Broker, PresenceStore, History, CacheReader, Occupancy and the rest of
// seams.go) each have an in-memory implementation for a single node here; their Redis
// implementations, for a cluster of nodes, are in internal/cluster. channels never imports a
// Redis client (TestRedisFree).
package channels

import "strings"

// Kind is a channel's type, decided by its name prefix.
type Kind uint8

// Channel kinds.
const (
	Public Kind = iota
	Private
	Presence
	PrivateEncrypted
	PrivateEncryptedCache
	Cache
	PrivateCache
	PresenceCache
	ServerToUser
)

// ServerToUserPrefix names a signed-in user's own channel.
const ServerToUserPrefix = "#server-to-user-"

// MaxNameLength is Pusher's channel-name limit.
const MaxNameLength = 164

// KindOf classifies name; the longest matching prefix wins.
func KindOf(name string) Kind {
	switch {
	case strings.HasPrefix(name, "private-encrypted-cache-"):
		return PrivateEncryptedCache
	case strings.HasPrefix(name, "private-encrypted-"):
		return PrivateEncrypted
	case strings.HasPrefix(name, "private-cache-"):
		return PrivateCache
	case strings.HasPrefix(name, "presence-cache-"):
		return PresenceCache
	case strings.HasPrefix(name, "cache-"):
		return Cache
	case strings.HasPrefix(name, "private-"):
		return Private
	case strings.HasPrefix(name, "presence-"):
		return Presence
	case strings.HasPrefix(name, ServerToUserPrefix):
		return ServerToUser
	}
	return Public
}

// IsPresence reports whether members are tracked.
func (k Kind) IsPresence() bool { return k == Presence || k == PresenceCache }

// IsCache reports whether the last event is replayed to new subscribers.
func (k Kind) IsCache() bool {
	return k == Cache || k == PrivateCache || k == PresenceCache || k == PrivateEncryptedCache
}

// NeedsAuth reports whether subscribing needs an app signature.
func (k Kind) NeedsAuth() bool {
	return k == Private || k == Presence || k == PrivateEncrypted || k == PrivateEncryptedCache ||
		k == PrivateCache || k == PresenceCache
}

// AllowsClientEvents reports whether client- events may be sent on the channel at all
// (encrypted channels carry only app ciphertext; public ones have no authenticated members).
func (k Kind) AllowsClientEvents() bool {
	return k == Private || k == Presence || k == PrivateCache || k == PresenceCache
}

// TerminateChannel carries terminate_connections to every node: its frames are a user id,
// and each node's server is its only subscriber. Internal names start with a NUL byte, so
// no client can name them (ValidName) and listings and counters skip them.
const TerminateChannel = "\x00terminate"

// IsInternal reports whether name is a server-to-server channel.
func IsInternal(name string) bool { return strings.HasPrefix(name, "\x00") }

// ValidName reports whether name matches ^#?[-a-zA-Z0-9_=@,.;]+$ within MaxNameLength.
func ValidName(name string) bool {
	if len(name) == 0 || len(name) > MaxNameLength {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '-' || c == '_' || c == '=' || c == '@' || c == ',' || c == '.' || c == ';':
		case c == '#' && i == 0 && len(name) > 1:
		default:
			return false
		}
	}
	return true
}
