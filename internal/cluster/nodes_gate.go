package cluster

import (
	"context"
	"errors"
	"math"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/reverbgo/reverbgo/internal/redisx"
)

// The spread layout's node liveness. Presence hashes, counts and the socket index live in
// their channel's (or socket's) bucket, so on a Cluster they are spread over the masters; the
// node set stays in the node-level slot, where no presence script can read it. Each bucket
// therefore keeps its own copy of what the join script needs to know, a gate per node:
//
//   - GateKeys(b) gates: node -> the epoch its gate is open for (absent = closed). A presence
//     join of a channel in bucket b is refused unless its node's gate in b is open, and the
//     reap script reaps a node's memberships of b only while its gate there is closed.
//   - GateKeys(b) floor: the highest epoch a reaper closed in b. No gate opens for an epoch
//     at or below it, so a node that paused between its heartbeat and the opening of its
//     gates cannot open them after a survivor reaped and unlisted it.
//   - EpochKeys: a node-level counter and node -> epoch. A node takes a new epoch whenever it
//     (re)joins the registry (the beat script, atomically with its heartbeat: first start,
//     found unknown, silent too long, or marked as being reaped), then opens its gate in every
//     bucket before any state is written again (Resync).
//
// A reaper marks the node in the node set (as in the legacy layout; the mark answers the
// node's epoch E), closes its gates of epoch E in every bucket and raises every floor to E,
// reaps the node's memberships bucket by bucket, deletes its bucket keys where its gate is
// still closed, and unlists it only if it is still marked at epoch E. A node that came back
// meanwhile holds a newer epoch: its gates are not closed, its buckets are not reaped once it
// reopened them, and it is not unlisted. A reaper that dies midway leaves the node marked,
// its gates closed, for the next one. So an open gate always belongs to a listed node, and
// every membership to a node some survivor will reap, as in the legacy layout.
type gate struct {
	mu      sync.Mutex
	open    int64            // the epoch every gate of this node was confirmed open for
	rejoin  bool             // a rejoin whose gates failed to open: the next beat reports it
	above   int64            // a floor refused this node's epoch: the next beat takes one above it
	beats   int              // heartbeats, for the bucket keys' TTL refresh
	reaping map[string]int64 // node -> the epoch this reaper marked it at
}

var (
	gbeatScript     = redisx.Script("channels_gbeat")
	gmarkScript     = redisx.Script("channels_gmark")
	gunlistScript   = redisx.Script("channels_gunlist")
	gateOpenScript  = redisx.Script("channels_gate_open")
	gateCloseScript = redisx.Script("channels_gate_close")
	gateDropScript  = redisx.Script("channels_gate_drop")
)

// The gate scripts run in pipelines, one per bucket, where go-redis does not fall back from
// EVALSHA to EVAL: they are sent whole (rare: a new epoch, a reap).

// errGateRefused: a bucket's floor refused this node's epoch (it was reaped at that epoch).
var errGateRefused = errors.New("channels: gate refused the node's epoch")

// liveKey is what the presence scripts of bucket b check: the bucket's gates ("g") in the
// spread layout, the node set ("z") in the legacy one.
func (r *RedisNodes) liveKey(b int) (key, mode string) {
	if r.keys.Spread() {
		g, _ := r.keys.GateKeys(b)
		return g, "g"
	}
	return r.key(), "z"
}

// reapBound is what the reap script compares node's liveness with: the legacy layout's
// cutoff, or in the spread layout the epoch this reaper marked node at (any gate it did
// not close is newer). This node draining itself reaps whatever its gates say; a node not
// marked by this reaper is reaped only where its gates are closed.
func (r *RedisNodes) reapBound(node string, cutoff time.Time) int64 {
	if !r.keys.Spread() {
		return cutoff.UnixMilli()
	}
	r.gate.mu.Lock()
	defer r.gate.mu.Unlock()
	if e, ok := r.gate.reaping[node]; ok {
		return e
	}
	if node == r.node {
		return math.MaxInt64
	}
	return 0
}

// gatedBeat is the spread layout's heartbeat: the node set and this node's epoch, then its
// gates (opened for a new epoch, checked and repaired otherwise), then, every 10th beat, the
// TTL of its bucket keys.
func (r *RedisNodes) gatedBeat(ctx context.Context, node string, now, deadBefore time.Time, keys []string) (bool, error) {
	counter, epochs := r.keys.EpochKeys()
	g := &r.gate
	for attempt := 0; ; attempt++ {
		g.mu.Lock()
		above := g.above
		g.mu.Unlock()
		res, err := gbeatScript.Run(ctx, r.rdb, append([]string{r.key(), counter, epochs}, keys...),
			node, now.UnixMilli(), deadBefore.UnixMilli(), r.keyTTL().Milliseconds(), above).Int64Slice()
		if err != nil {
			return false, err
		}
		epoch := res[1]
		g.mu.Lock()
		g.rejoin = g.rejoin || res[0] == 1
		rejoined, opened := g.rejoin, g.open
		g.above = 0
		g.beats++
		refresh := rejoined || g.beats%10 == 0
		g.mu.Unlock()
		floor, err := r.openGates(ctx, epoch, opened != epoch)
		if errors.Is(err, errGateRefused) {
			// A floor is at or above the epoch (a reaper closed it, or a newer one of another
			// node's, before this gate opened; or the counter lost increments to a failover):
			// take a new epoch above it, now or at the next beat.
			g.mu.Lock()
			g.above = floor
			g.mu.Unlock()
			if attempt == 0 {
				continue
			}
		}
		if err != nil {
			return false, err
		}
		if refresh {
			if err := r.refreshBucketKeys(ctx, node); err != nil {
				return false, err
			}
		}
		g.mu.Lock()
		g.open, g.rejoin = epoch, false
		g.mu.Unlock()
		return rejoined, nil
	}
}

// openGates opens this node's gate of epoch in every bucket (all, or only those a check
// finds not open for it: lost to a failover). errGateRefused comes with the highest floor
// that refused it.
func (r *RedisNodes) openGates(ctx context.Context, epoch int64, all bool) (int64, error) {
	want := make([]int, 0, r.Buckets())
	if all {
		for b := range r.Buckets() {
			want = append(want, b)
		}
	} else {
		pipe := r.rdb.Pipeline()
		cmds := make([]*redis.StringCmd, r.Buckets())
		for b := range cmds {
			gates, _ := r.keys.GateKeys(b)
			cmds[b] = pipe.HGet(ctx, gates, r.node)
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return 0, err
		}
		for b, c := range cmds {
			if v, err := c.Int64(); err != nil || v != epoch {
				want = append(want, b)
			}
		}
	}
	if len(want) == 0 {
		return 0, nil
	}
	pipe := r.rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(want))
	for i, b := range want {
		gates, floor := r.keys.GateKeys(b)
		cmds[i] = gateOpenScript.Eval(ctx, pipe, []string{gates, floor}, r.node, epoch)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, err
	}
	var refused int64 = -1
	for _, c := range cmds {
		n, err := c.Int64()
		if err != nil {
			return 0, err
		}
		if n <= 0 && -n > refused {
			refused = -n
		}
	}
	if refused >= 0 {
		return refused, errGateRefused
	}
	return 0, nil
}

// refreshBucketKeys sets the TTL of this node's bucket keys (3×NodeTimeout, refreshed every
// NodeTimeout), in one pipeline.
func (r *RedisNodes) refreshBucketKeys(ctx context.Context, node string) error {
	suffixes := r.bucketSuffixes()
	if len(suffixes) == 0 {
		return nil
	}
	pipe := r.rdb.Pipeline()
	for b := range r.Buckets() {
		for _, s := range suffixes {
			pipe.PExpire(ctx, r.NodeBucketKey(node, s, b), r.keyTTL())
		}
	}
	_, err := pipe.Exec(ctx)
	return err
}

func (r *RedisNodes) bucketSuffixes() []string {
	var out []string
	for _, s := range r.snapshot() {
		out = append(out, s.BucketKeys...)
	}
	return out
}

// gatedMark marks node as being reaped (as the legacy mark) and closes its gates of the
// epoch it was marked at in every bucket; an error leaves it marked for the next reaper.
func (r *RedisNodes) gatedMark(ctx context.Context, node string, cutoff time.Time) (bool, error) {
	_, epochs := r.keys.EpochKeys()
	res, err := gmarkScript.Run(ctx, r.rdb, []string{r.key(), epochs}, node, cutoff.UnixMilli(), reapingMark).Int64Slice()
	if err != nil || res[0] == 0 {
		if err == nil { // it came back: a mark of an earlier reap is stale
			r.gate.mu.Lock()
			delete(r.gate.reaping, node)
			r.gate.mu.Unlock()
		}
		return false, err
	}
	epoch := res[1]
	// A node without an epoch (lost to a failover) has every gate closed, floors untouched.
	upTo, floor := epoch, epoch
	if epoch == 0 {
		upTo = math.MaxInt64
	}
	pipe := r.rdb.Pipeline()
	for b := range r.Buckets() {
		gates, fl := r.keys.GateKeys(b)
		gateCloseScript.Eval(ctx, pipe, []string{gates, fl}, node, upTo, floor)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return false, err
	}
	r.gate.mu.Lock()
	if r.gate.reaping == nil {
		r.gate.reaping = map[string]int64{}
	}
	r.gate.reaping[node] = upTo
	r.gate.mu.Unlock()
	return true, nil
}

// gatedUnlist deletes node's bucket keys in every bucket where its gate is still closed, and
// unlists it if it is still marked at the epoch this reaper marked; a node that came back is
// left alone.
func (r *RedisNodes) gatedUnlist(ctx context.Context, node string, keys []string) error {
	r.gate.mu.Lock()
	epoch, ok := r.gate.reaping[node]
	delete(r.gate.reaping, node)
	r.gate.mu.Unlock()
	if !ok {
		return nil
	}
	suffixes := r.bucketSuffixes()
	pipe := r.rdb.Pipeline()
	cmds := make([]*redis.Cmd, r.Buckets())
	for b := range cmds {
		gates, _ := r.keys.GateKeys(b)
		ks := []string{gates}
		for _, s := range suffixes {
			ks = append(ks, r.NodeBucketKey(node, s, b))
		}
		cmds[b] = gateDropScript.Eval(ctx, pipe, ks, node, epoch)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return err
	}
	for _, c := range cmds {
		if n, _ := c.Int(); n == 0 {
			return nil // it came back
		}
	}
	markEpoch := epoch
	if epoch == math.MaxInt64 {
		markEpoch = 0
	}
	_, epochs := r.keys.EpochKeys()
	return gunlistScript.Run(ctx, r.rdb, append([]string{r.key(), epochs}, keys...), node, reapingMark, markEpoch).Err()
}
