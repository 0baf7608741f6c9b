package channels

import "sync/atomic"

// kindNames are the channel-type labels of metrics, one per Kind.
var kindNames = [...]string{
	Public:                "public",
	Private:               "private",
	Presence:              "presence",
	PrivateEncrypted:      "private-encrypted",
	PrivateEncryptedCache: "private-encrypted-cache",
	Cache:                 "cache",
	PrivateCache:          "private-cache",
	PresenceCache:         "presence-cache",
	ServerToUser:          "server-to-user",
}

// KindCount is the number of channel kinds (for arrays indexed by Kind).
const KindCount = len(kindNames)

// String is the kind's label in metrics ("public", "private-encrypted", ...).
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "unknown"
}

// deliveryStats are fan-out counters, added once per DeliverLocal call (n deliveries and
// n*len(frame) bytes), never per subscriber, so counting costs two atomic adds a broadcast.
type deliveryStats struct {
	frames atomic.Uint64
	bytes  atomic.Uint64
}

func (d *deliveryStats) add(n, frameLen int) {
	if n > 0 {
		d.frames.Add(uint64(n))
		d.bytes.Add(uint64(n) * uint64(frameLen))
	}
}

// Deliveries reports the frames queued on local sockets by broadcasts (DeliverLocal) since
// the registry was built, and their total size in bytes.
func (r *Registry) Deliveries() (frames, bytes uint64) {
	return r.sent.frames.Load(), r.sent.bytes.Load()
}

// KindCounts is one app's local channel and subscription counts by kind.
type KindCounts struct {
	Channels      [KindCount]int
	Subscriptions [KindCount]int
}

// Census walks the registry and counts this node's occupied channels and their
// subscriptions per app and kind (internal channels excluded). It takes each shard's read
// lock briefly and is meant for a metrics scrape, not for the hot path.
func (r *Registry) Census() map[string]*KindCounts {
	out := make(map[string]*KindCounts)
	for i := range r.shards {
		s := &r.shards[i]
		s.mu.RLock()
		for k, ch := range s.channels {
			if IsInternal(k.name) {
				continue
			}
			ch.mu.RLock()
			n := len(ch.subs)
			ch.mu.RUnlock()
			if n == 0 {
				continue
			}
			o := out[k.app]
			if o == nil {
				o = &KindCounts{}
				out[k.app] = o
			}
			kind := KindOf(k.name)
			o.Channels[kind]++
			o.Subscriptions[kind] += n
		}
		s.mu.RUnlock()
	}
	return out
}
