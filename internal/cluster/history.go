package cluster

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/reverbgo/reverbgo/channels"
	"github.com/reverbgo/reverbgo/internal/redisx"
	"github.com/reverbgo/reverbgo/internal/wsframe"
)

var (
	historyAppendScript = redisx.Script("channels_history_append")
	historySinceScript  = redisx.Script("channels_history_since")
	historyRotateScript = redisx.Script("channels_history_rotate")
)

// RedisHistory is the cluster History: each channel's serial, epoch and history list live
// under the hash tag of the channel's topic (KeySpace.HistoryKeys), so one script assigns,
// keeps and publishes together (AppendCmd), and on Cluster the channels spread with their
// topics. Every key expires history_ttl after the channel's last publish; the list is
// trimmed to history_size on each one: nothing grows without a bound.
type RedisHistory struct {
	rdb     redis.UniversalClient
	keys    *KeySpace
	sharded bool
	base    string        // this process's epoch prefix
	next    atomic.Uint64 // makes each epoch candidate unique
}

var _ channels.History = (*RedisHistory)(nil)

// NewRedisHistory keeps histories in rdb under keys' names.
func NewRedisHistory(rdb redis.UniversalClient, keys *KeySpace) *RedisHistory {
	return &RedisHistory{rdb: rdb, keys: keys, sharded: IsCluster(rdb), base: channels.NewEpoch()}
}

// scripter is where the history's scripts run: on a node's Redis layer its pub/sub plane,
// the master the broker's writer appends to (on Sentinel the watcher's, which a read through
// go-redis's failover client may not be during a switch: it would read the demoted master
// and replay too little).
func (h *RedisHistory) scripter() redis.Scripter {
	if rc, ok := h.rdb.(*redisx.Client); ok {
		return rc.Plane()
	}
	return h.rdb
}

// epochCandidate is the epoch a script takes when the channel has none: unique per call, so
// a channel whose keys vanished never gets an epoch a client already holds.
func (h *RedisHistory) epochCandidate() string {
	return h.base + "-" + strconv.FormatUint(h.next.Add(1), 36)
}

// AppendCmd queues on pipe (or runs, with h's client as pipe) the script that gives frame
// the channel's next serial, keeps it, and, when topic is not "", PUBLISHes (SPUBLISH on
// Cluster) envPrefix followed by the new frame to topic: the broker writer's hook, one
// round trip per publish as before. node and seq (node "" = none) make a retry of a batch
// that did reach Redis a no-op: the script remembers each node's last sequence number per
// channel (for the TTL) and answers serial 0 to a number it has seen. known is the highest
// position the caller saw Redis give the channel (zero = none): when Redis now holds that
// epoch with a lower serial, it lost appends it had answered (a failover to a replica that
// lacked them, keys restored from a backup): the serial moves on past known rather than
// give a serial to a second event, and the history marks the lost ones (a resume that needs
// one is told too_old). Read the result with HistoryAppended.
func (h *RedisHistory) AppendCmd(ctx context.Context, pipe redis.Scripter, app, ch string, lim channels.HistoryLimits, except string, frame []byte, topic string, envPrefix []byte, node string, seq uint64, known channels.Position) *redis.Cmd {
	payload := wsframe.Payload(frame)
	if len(payload) > 0 {
		payload = payload[:len(payload)-1] // the script appends ,"serial":N}
	}
	serial, epoch, list, nodes := h.keys.HistoryKeys(app, ch)
	sharded := "0"
	if h.sharded {
		sharded = "1"
	}
	return pipe.EvalSha(ctx, historyAppendScript.Hash(), []string{serial, epoch, list, nodes},
		max(lim.Size, 1), max(int(lim.TTL.Seconds()), 1), h.epochCandidate(), except, payload, topic, sharded, envPrefix, node, seq,
		known.Epoch, known.Serial)
}

// LoadScripts loads the history scripts into rdb (every master on Cluster): AppendCmd
// sends only their hash, so a Redis that lost its script cache (a restart, a failover to a
// replica that never ran it) answers NOSCRIPT until they are loaded again.
func LoadScripts(ctx context.Context, rdb redis.Scripter) error {
	if err := historyAppendScript.Load(ctx, rdb).Err(); err != nil {
		return err
	}
	return historySinceScript.Load(ctx, rdb).Err()
}

// IsNoScript reports whether err is Redis's answer to an unknown script hash.
func IsNoScript(err error) bool { return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") }

// HistoryAppended reads an AppendCmd's result: the serial and the new frame.
func HistoryAppended(cmd *redis.Cmd) (uint64, []byte, error) {
	pos, f, err := HistoryAppendedAt(cmd)
	return pos.Serial, f, err
}

// HistoryAppendedAt reads an AppendCmd's result: the position it gave (serial 0: a retry
// that had already run) and the new frame.
func HistoryAppendedAt(cmd *redis.Cmd) (channels.Position, []byte, error) {
	res, err := cmd.Slice()
	if err != nil {
		return channels.Position{}, nil, err
	}
	if len(res) != 3 {
		return channels.Position{}, nil, errors.New("history: unexpected script reply")
	}
	n, _ := res[0].(int64)
	f, _ := res[1].(string)
	e, _ := res[2].(string)
	return channels.Position{Epoch: e, Serial: uint64(n)}, []byte(f), nil
}

// Append implements History (without a publish: the broker's writer uses AppendCmd).
// deliver runs after the script: across nodes the order is Redis's, carried by pub/sub.
func (h *RedisHistory) Append(ctx context.Context, app, ch string, lim channels.HistoryLimits, except string, frame []byte, deliver func(uint64, []byte)) (uint64, []byte, error) {
	if wsframe.Payload(frame) == nil {
		return 0, nil, errors.New("history: not a server frame")
	}
	cmd := h.AppendCmd(ctx, h.scripter(), app, ch, lim, except, frame, "", nil, "", 0, channels.Position{})
	if IsNoScript(cmd.Err()) {
		if err := LoadScripts(ctx, h.rdb); err != nil {
			return 0, nil, err
		}
		cmd = h.AppendCmd(ctx, h.scripter(), app, ch, lim, except, frame, "", nil, "", 0, channels.Position{})
	}
	n, f, err := HistoryAppended(cmd)
	if err == nil && deliver != nil {
		deliver(n, f)
	}
	return n, f, err
}

// Rotate gives the channel a new epoch if it still has epoch (which gave a serial to a
// second event), dropping its history; it returns the channel's epoch afterwards.
func (h *RedisHistory) Rotate(ctx context.Context, app, ch string, lim channels.HistoryLimits, epoch string) (string, error) {
	serial, epochKey, list, nodes := h.keys.HistoryKeys(app, ch)
	return historyRotateScript.Run(ctx, h.scripter(), []string{serial, epochKey, list, nodes},
		epoch, h.epochCandidate(), max(int(lim.TTL.Seconds()), 1)).Text()
}

// Position implements History.
func (h *RedisHistory) Position(ctx context.Context, app, ch string, lim channels.HistoryLimits) (channels.Position, error) {
	pos, _, _, err := h.since(ctx, app, ch, lim, -1)
	return pos, err
}

// Since implements History.
func (h *RedisHistory) Since(ctx context.Context, app, ch string, lim channels.HistoryLimits, after uint64) (channels.Position, []channels.HistoryEvent, bool, error) {
	if after > 1<<62 {
		after = 1 << 62 // above any serial: nothing to replay
	}
	return h.since(ctx, app, ch, lim, int64(after))
}

func (h *RedisHistory) since(ctx context.Context, app, ch string, lim channels.HistoryLimits, after int64) (channels.Position, []channels.HistoryEvent, bool, error) {
	serialKey, epochKey, list, _ := h.keys.HistoryKeys(app, ch)
	res, err := historySinceScript.Run(ctx, h.scripter(), []string{serialKey, epochKey, list},
		max(int(lim.TTL.Seconds()), 1), h.epochCandidate(), after).Slice()
	if err != nil {
		return channels.Position{}, nil, false, err
	}
	if len(res) < 3 {
		return channels.Position{}, nil, false, errors.New("history: unexpected script reply")
	}
	epoch, _ := res[0].(string)
	serial, _ := res[1].(int64)
	complete, _ := res[2].(int64)
	pos := channels.Position{Epoch: epoch, Serial: uint64(serial)}
	var evs []channels.HistoryEvent
	first := uint64(serial) - uint64(len(res)-3) + 1
	for i, r := range res[3:] {
		s, _ := r.(string)
		l, rest, ok := strings.Cut(s, ":")
		n, err := strconv.Atoi(l)
		if !ok || err != nil || n > len(rest) {
			return pos, nil, false, errors.New("history: malformed entry")
		}
		evs = append(evs, channels.HistoryEvent{Serial: first + uint64(i), Except: rest[:n], Frame: []byte(rest[n:])})
	}
	return pos, evs, complete == 1, nil
}
