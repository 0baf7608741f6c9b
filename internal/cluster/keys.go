package cluster

import (
	"hash/fnv"
	"strconv"
)

// Key names: the one place that builds the names of what a cluster keeps in Redis (keys and
// pub/sub channels), so that the layout can be read, and changed, in one file.
//
// Two layouts. The legacy one (scaling.routing: broadcast, what earlier versions wrote) puts
// everything under one Redis Cluster hash tag, "{reverbgo:<channel>}:", so one master
// carries the whole cluster. The spread one (routing: interest) puts each channel's routed
// pub/sub channel and its cache key under the tag of the channel's bucket: KeyBuckets tags
// chosen so that their hash slots sit evenly over the 16384 slots, which on a Cluster whose
// masters own slot ranges spreads the publishes evenly over the masters (and a node needs one
// shard-subscription connection per bucket, not per master it happens to reach). In the
// spread layout presence hashes, each node's membership set and count hash of a bucket
// (NodeBucketKey) and the socket index (SocketBucket) move to the buckets too, and each
// bucket keeps its copy of the node liveness the presence scripts check (GateKeys,
// nodes_gate.go); the node set, heartbeats and epochs keep the node-level tag.

// KeyBuckets is the number of slot buckets channels are spread over (spread layout).
const KeyBuckets = 64

// clusterSlots is Redis Cluster's slot count.
const clusterSlots = 16384

// KeySpace names one cluster's keys and pub/sub channels.
type KeySpace struct {
	node    string // node-level prefix "{reverbgo:<channel>}:"
	channel string // the broadcast pub/sub channel
	spread  bool
	buckets [KeyBuckets]string // bucket prefixes "{reverbgo:<channel>:<n>}:" (spread only)
}

// Channel is the cluster's scaling.channel (the broadcast pub/sub channel).
func (k *KeySpace) Channel() string { return k.channel }

// NewKeySpace names the keys of the cluster whose scaling.channel is channel; spread selects
// the spread layout (interest routing), otherwise every name is the legacy one.
func NewKeySpace(channel string, spread bool) *KeySpace {
	if channel == "" {
		channel = DefaultScalingChannel
	}
	k := &KeySpace{node: "{" + DefaultRedisPrefix + channel + "}:", channel: channel, spread: spread}
	base := DefaultRedisPrefix + channel + ":"
	for b := range k.buckets {
		if !spread {
			k.buckets[b] = k.node
			continue
		}
		// The first tag "<base><n>" whose slot falls in the bucket's share of the slots.
		lo, hi := b*clusterSlots/KeyBuckets, (b+1)*clusterSlots/KeyBuckets
		for n := 0; ; n++ {
			tag := base + strconv.Itoa(n)
			if s := int(crc16(tag) % clusterSlots); s >= lo && s < hi {
				k.buckets[b] = "{" + tag + "}:"
				break
			}
		}
	}
	return k
}

// LegacyKeySpace is the single-tag layout under prefix (tests and stores built before the
// key space was configurable): every name starts with prefix.
func LegacyKeySpace(prefix string) *KeySpace {
	k := &KeySpace{node: prefix, channel: DefaultScalingChannel}
	for b := range k.buckets {
		k.buckets[b] = prefix
	}
	return k
}

// Spread reports whether channels are spread over the buckets.
func (k *KeySpace) Spread() bool { return k.spread }

// Prefix is the node-level prefix (heartbeats, node set, per-node state; the webhooks' keys
// under it). Its braces are a Redis Cluster hash tag: every key under it lands in one slot, so
// the Lua scripts that touch several such keys at once run on Redis Cluster, and two clusters
// sharing a Redis with different scaling.channel never meet.
func (k *KeySpace) Prefix() string { return k.node }

// ToolmarkPrefix is the prefix of the bridge's keys and pub/sub channels (its RedisStore and
// RedisFeed), under the node-level tag.
func (k *KeySpace) ToolmarkPrefix() string { return k.node + "toolmark:" }

// Buckets is how many distinct bucket prefixes there are (1 in the legacy layout).
func (k *KeySpace) Buckets() int {
	if k.spread {
		return KeyBuckets
	}
	return 1
}

// BucketPrefix is bucket b's prefix (the node-level one in the legacy layout).
func (k *KeySpace) BucketPrefix(b int) string { return k.buckets[b] }

// Bucket is the channel's bucket (0 in the legacy layout).
func (k *KeySpace) Bucket(app, ch string) int {
	if !k.spread {
		return 0
	}
	return BucketOf(app + "\x00" + ch)
}

// BucketOf is the bucket of any per-channel or per-socket identity s.
func BucketOf(s string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(s))
	return int(h.Sum32() % KeyBuckets)
}

// ChannelPrefix is the prefix of the channel's keys.
func (k *KeySpace) ChannelPrefix(app, ch string) string { return k.buckets[k.Bucket(app, ch)] }

// ChannelKey is the key kind of the channel: "<prefix>kind:<channel>:<app>" (channel names
// cannot contain ':', so the name is unambiguous whatever the app id).
func (k *KeySpace) ChannelKey(kind, app, ch string) string {
	return k.ChannelPrefix(app, ch) + kind + ":" + ch + ":" + app
}

// NodeKey is a per-node key of the node-level slot.
func (k *KeySpace) NodeKey(node, suffix string) string { return k.node + "node:" + node + ":" + suffix }

// NodeBucketKey is a per-node key in bucket b (NodeKey in the legacy layout), for per-node
// state that scripts touch together with a channel's keys.
func (k *KeySpace) NodeBucketKey(node, suffix string, b int) string {
	return k.buckets[b] + "node:" + node + ":" + suffix
}

// BucketAnchor is node's own pub/sub channel in the slot of bucket prefix prefix ("" = the
// node-level one): a subscription connection is always subscribed to it, so that on Cluster
// it lands on the bucket's master with no topic left, and its probes travel on it.
func (k *KeySpace) BucketAnchor(prefix, node string) string {
	if prefix == "" {
		prefix = k.node
	}
	return prefix + "anchor:" + node
}

// BroadcastChannel is the single pub/sub channel of broadcast routing.
func (k *KeySpace) BroadcastChannel() string { return k.channel }

// Topic is the routed pub/sub channel of (app, ch) under interest routing. It carries its
// bucket's hash tag, so on Redis Cluster a node's shard subscriptions group into one
// connection per bucket.
func (k *KeySpace) Topic(app, ch string) string { return k.ChannelKey("m", app, ch) }

// crc16 is Redis Cluster's key-slot CRC (CRC-16/XMODEM).
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for j := 0; j < 8; j++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// Slot is the Redis Cluster slot of key (its hash tag's, when it has one).
func Slot(key string) int {
	for i := 0; i < len(key); i++ {
		if key[i] == '{' {
			for j := i + 1; j < len(key); j++ {
				if key[j] == '}' {
					if j > i+1 {
						return int(crc16(key[i+1:j]) % clusterSlots)
					}
					break
				}
			}
			break
		}
	}
	return int(crc16(key) % clusterSlots)
}

// HistoryKeys are a recovery channel's serial, epoch, history list and last sequence
// number per publishing node (history_redis.go). The append script publishes to the
// channel's pub/sub channel, and on Cluster a script's shard channel must be in its keys'
// slot: under interest routing they carry the hash tag of the channel's topic; under
// broadcast routing the broadcast channel's own slot ("{<channel>}:reverbgo:..."), where
// every publish goes anyway.
func (k *KeySpace) HistoryKeys(app, ch string) (serial, epoch, list, nodes string) {
	if !k.spread {
		p := "{" + k.channel + "}:" + DefaultRedisPrefix
		tail := ":" + ch + ":" + app
		return p + "hs" + tail, p + "he" + tail, p + "hl" + tail, p + "hn" + tail
	}
	return k.ChannelKey("hs", app, ch), k.ChannelKey("he", app, ch), k.ChannelKey("hl", app, ch), k.ChannelKey("hn", app, ch)
}

// The node liveness the spread layout keeps per bucket (nodes_gate.go): presence scripts of
// a channel in bucket b check b's gates instead of the node set, which lives in another slot.

// NodeSetKey is the node set (node -> last heartbeat ms), in the node-level slot.
func (k *KeySpace) NodeSetKey() string { return k.node + "nodes" }

// EpochKeys are the node-level epoch counter and the hash node -> the epoch of its current
// registration (spread layout only).
func (k *KeySpace) EpochKeys() (counter, epochs string) { return k.node + "epoch", k.node + "epochs" }

// GateKeys are bucket b's gates (hash node -> the epoch its gate is open for; absent =
// closed) and its floor (no gate opens for an epoch at or below it: the epochs reaped).
func (k *KeySpace) GateKeys(b int) (gates, floor string) {
	return k.buckets[b] + "gates", k.buckets[b] + "gatefloor"
}

// SocketBucket is the bucket of a socket's per-node entries (the bridge's socket index).
func (k *KeySpace) SocketBucket(socketID string) int {
	if !k.spread {
		return 0
	}
	return BucketOf(socketID)
}

// WebhookKeys names the webhooks' keys (webhooks.RedisStore): every one is under
// prefix+"{webhooks}:", whose first brace pair is the node-level prefix's hash tag, so the
// webhooks' scripts find all their keys in one slot.
type WebhookKeys struct{ p string }

// NewWebhookKeys names the webhooks' keys under prefix (KeySpace.Prefix in a cluster).
func NewWebhookKeys(prefix string) WebhookKeys { return WebhookKeys{p: prefix + "{webhooks}:"} }

// Queue is an outbox's queue of events.
func (k WebhookKeys) Queue(outbox string) string { return k.p + "q:" + outbox }

// Inflight is an outbox's batch in flight.
func (k WebhookKeys) Inflight(outbox string) string { return k.p + "f:" + outbox }

// Lease is an outbox's lease.
func (k WebhookKeys) Lease(outbox string) string { return k.p + "l:" + outbox }

// Since is the first claim of an outbox's batch in flight.
func (k WebhookKeys) Since(outbox string) string { return k.p + "t:" + outbox }

// State is an outbox's state (generation, sequences).
func (k WebhookKeys) State(outbox string) string { return k.p + "s:" + outbox }

// NodeSet is the channels a node occupies.
func (k WebhookKeys) NodeSet(node string) string { return k.p + "n:" + node }

// Occupancy is the channels' node counts.
func (k WebhookKeys) Occupancy() string { return k.p + "occ" }

// Holds is the held events.
func (k WebhookKeys) Holds() string { return k.p + "holds" }

// CacheMiss is the occupations whose cache_miss was sent.
func (k WebhookKeys) CacheMiss() string { return k.p + "cm" }

// ToolmarkKeys names the bridge's keys and pub/sub channels (bridge.RedisStore and
// RedisFeed), all under one prefix (KeySpace.ToolmarkPrefix in a cluster), so on Redis
// Cluster they share its hash tag.
type ToolmarkKeys struct{ p string }

// NewToolmarkKeys names the bridge's keys under prefix.
func NewToolmarkKeys(prefix string) ToolmarkKeys { return ToolmarkKeys{p: prefix} }

// Results is the pub/sub channel that wakes the nodes waiting for a call's result.
func (k ToolmarkKeys) Results() string { return k.p + "results" }

// Manifests is the pub/sub channel of manifest changes.
func (k ToolmarkKeys) Manifests() string { return k.p + "manifests" }

// Manifest is one conversation's manifest.
func (k ToolmarkKeys) Manifest(app, user, conversation string) string {
	return k.p + "m:" + app + ":" + user + ":" + conversation
}

// Call is one tool call.
func (k ToolmarkKeys) Call(id string) string { return k.p + "c:" + id }

// Confirm is one confirmation of app (its id holds no ':').
func (k ToolmarkKeys) Confirm(app, id string) string { return k.p + "f:" + app + ":" + id }

// NoConfirm is the key a claim without a confirmation names in its place (never written; in
// the same slot as the others).
func (k ToolmarkKeys) NoConfirm() string { return k.p + "f:-" }
