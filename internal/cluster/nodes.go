package cluster

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// NodeRegistry is the cluster's one node registry: which nodes are alive (a heartbeat every
// NodeTimeout/10, dead after 8/10 of NodeTimeout of silence), and the reap of a dead node's
// state by a survivor. Presence, occupancy, the bridge's socket index and the webhooks'
// occupancy keep per-node state; each registers a NodeState with Track, and the registry
// calls it: Reap on a survivor for a dead node (and on this node for itself at Close),
// Resync on this node when the registry had lost it (reaped during a long pause, Redis
// restarted empty or failed over) and at the heartbeat after ResyncSoon, Tick on every
// heartbeat. A node is unlisted only after every NodeState reaped it, so a reaper that dies
// midway leaves the node for the next one.
//
// RedisNodes serves a cluster, MemoryNodes the nodes of one process (tests, and the shared
// suite channelstest.RunNodeRegistry runs against both).
type NodeRegistry interface {
	// NodeID is this node's id.
	NodeID() string
	// LiveNodes lists the nodes not yet dead, always including this one.
	LiveNodes(ctx context.Context) ([]string, error)
	// Track registers per-node state; call it before Start.
	Track(s NodeState)
	// Heartbeat marks this node alive, resyncs when the registry had lost it, ticks, runs
	// the resyncs ResyncSoon asked for and reaps the dead nodes. Start calls it every
	// NodeTimeout/10.
	Heartbeat(ctx context.Context) error
	// ResyncSoon makes the next heartbeat resync this node's state although the registry
	// still lists it (Redis may have lost writes: a failover).
	ResyncSoon()
	// Start heartbeats at once, then every NodeTimeout/10.
	Start()
	// Close stops the heartbeat, reaps this node's own state (every NodeState's Closing, then
	// Reap) and unlists it; later heartbeats fail with ErrNodeClosed.
	Close() error
}

// NodeState is one kind of per-node state kept by a NodeRegistry's user. Every func may be
// nil.
type NodeState struct {
	// Name names the state in the registry's logs (default: its key suffixes).
	Name string
	// Keys are per-node Redis key suffixes (RedisNodes.NodeKey): deleted when their node is
	// reaped, and bounded by a TTL the owner's heartbeat refreshes (see RedisNodes).
	Keys []string
	// BucketKeys are per-node key suffixes kept in every bucket (RedisNodes.NodeBucketKey),
	// under the same rules as Keys.
	BucketKeys []string
	// Reap removes a dead node's state, entries whose node heartbeated after cutoff excepted;
	// survivors may run it for the same node at once and each entry must go exactly once.
	Reap func(ctx context.Context, node string, cutoff time.Time) error
	// Resync writes this node's state again from memory after the registry lost the node,
	// and after ResyncSoon unless RejoinOnly.
	Resync func(ctx context.Context) error
	// RejoinOnly keeps Resync to the heartbeat that finds the node lost: the state repairs
	// the writes a failover lost by itself (presence compares its memberships with Redis,
	// RedisPresence.VerifySoon), so ResyncSoon leaves it alone.
	RejoinOnly bool
	// Tick runs on every heartbeat, after a rejoin's Resync (rejoined reports that one ran)
	// and before those ResyncSoon asked for.
	Tick func(ctx context.Context, rejoined bool) error
	// Closing runs at Close before this node's own Reap (last writes, retried leaves).
	Closing func(ctx context.Context)
}

// name is s.Name, or its key suffixes.
func (s NodeState) name() string {
	if s.Name != "" {
		return s.Name
	}
	return strings.Join(append(slices.Clone(s.Keys), s.BucketKeys...), "+")
}

// ErrNodeClosed is returned by Heartbeat after Close.
var ErrNodeClosed = errors.New("channels: node registry closed")

// nodeBackend is where a registry keeps its heartbeats: a Redis sorted set, or memory.
type nodeBackend interface {
	// beat records node's heartbeat at now, refreshes the TTL of its keys, and reports whether
	// the node was unknown or silent since before deadBefore (its state may be lost).
	beat(ctx context.Context, node string, now, deadBefore time.Time, keys []string) (rejoined bool, err error)
	// alive lists nodes whose last heartbeat is at or after since.
	alive(ctx context.Context, since time.Time) ([]string, error)
	// dead lists nodes whose last heartbeat is before the cutoff.
	dead(ctx context.Context, cutoff time.Time) ([]string, error)
	// mark records that node is being reaped (its heartbeat replaced by a "reaping" mark,
	// which no join accepts and which keeps it among the dead until unlisted) unless it
	// heartbeated after cutoff; false means it came back.
	mark(ctx context.Context, node string, cutoff time.Time) (bool, error)
	// unlist forgets a node still marked (and deletes its keys).
	unlist(ctx context.Context, node string, cutoff time.Time, keys []string) error
}

// nodes is the registry logic shared by RedisNodes and MemoryNodes.
type nodes struct {
	be      nodeBackend
	node    string
	timeout time.Duration
	log     *slog.Logger
	keyName func(node, suffix string) string
	// flatBuckets: every bucket key is a node key (the legacy layout), so keysOf counts
	// BucketKeys among Keys.
	flatBuckets bool

	mu     sync.Mutex
	states []NodeState

	// hb serialises heartbeats (the loop's and callers' such as a presence Join finding its
	// node unlisted) with Close; closed refuses every heartbeat after Close.
	hb     sync.Mutex
	closed atomic.Bool
	// soon asks the next heartbeat to resync every NodeState (ResyncSoon); retry holds the
	// indexes in states of those whose resync failed since, retried alone (under hb).
	soon  atomic.Bool
	retry map[int]bool

	stop     chan struct{}
	done     chan struct{}
	start    sync.Once
	started  bool
	stopOnce sync.Once
}

func newNodes(be nodeBackend, node string, timeout time.Duration, logger *slog.Logger, keyName func(node, suffix string) string) *nodes {
	if node == "" {
		node = NewNodeID()
	}
	if timeout <= 0 {
		timeout = DefaultNodeTimeout
	}
	if logger == nil {
		logger = slog.Default()
	}
	return &nodes{be: be, node: node, timeout: timeout, log: logger, keyName: keyName,
		stop: make(chan struct{}), done: make(chan struct{})}
}

// interval is the heartbeat period; deadAfter the silence after which a node is dead.
func (n *nodes) interval() time.Duration  { return n.timeout / 10 }
func (n *nodes) deadAfter() time.Duration { return n.timeout * 8 / 10 }

// NodeID implements NodeRegistry.
func (n *nodes) NodeID() string { return n.node }

// NodeTimeout is the registry's node timeout.
func (n *nodes) NodeTimeout() time.Duration { return n.timeout }

// Track implements NodeRegistry.
func (n *nodes) Track(s NodeState) {
	n.mu.Lock()
	n.states = append(n.states, s)
	n.mu.Unlock()
}

func (n *nodes) snapshot() []NodeState {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.states
}

// keysOf are every NodeState's per-node keys of node (with the bucket keys when those are
// node keys).
func keysOf(states []NodeState, node string, name func(node, suffix string) string, flat bool) []string {
	if name == nil {
		return nil
	}
	var out []string
	for _, s := range states {
		for _, k := range s.Keys {
			out = append(out, name(node, k))
		}
		if flat {
			for _, k := range s.BucketKeys {
				out = append(out, name(node, k))
			}
		}
	}
	return out
}

// LiveNodes implements NodeRegistry: a dead node's per-node state drops out of every answer
// at once, before a survivor reaps it.
func (n *nodes) LiveNodes(ctx context.Context) ([]string, error) {
	list, err := n.be.alive(ctx, time.Now().Add(-n.deadAfter()))
	if err != nil {
		return nil, err
	}
	for _, id := range list {
		if id == n.node {
			return list, nil
		}
	}
	return append(list, n.node), nil
}

// Heartbeat implements NodeRegistry.
func (n *nodes) Heartbeat(ctx context.Context) error {
	n.hb.Lock()
	defer n.hb.Unlock()
	if n.closed.Load() {
		return ErrNodeClosed
	}
	states := n.snapshot()
	now := time.Now()
	cutoff := now.Add(-n.deadAfter())
	rejoined, err := n.be.beat(ctx, n.node, now, cutoff, keysOf(states, n.node, n.keyName, n.flatBuckets))
	if err != nil {
		return err
	}
	if rejoined {
		// The resync below covers every ResyncSoon made so far, and every retry: none runs
		// again after it (one asked for meanwhile runs after the ticks).
		asked, retry := n.soon.Swap(false), n.retry
		n.retry = nil
		if failed, err := n.resync(ctx, states); err != nil {
			// The beat listed the node again, so the next heartbeat is no rejoin: the failed
			// state and those after it are retried alone from then on (a RejoinOnly one,
			// presence, repairs itself by its verify), never the whole rejoin again, which
			// a large node might fail at every beat.
			n.retry = retry
			for i := failed; i < len(states); i++ {
				if states[i].Resync != nil && !states[i].RejoinOnly {
					if n.retry == nil {
						n.retry = map[int]bool{}
					}
					n.retry[i] = true
				}
			}
			if asked {
				n.soon.Store(true)
			}
			return err
		}
	}
	for _, s := range states {
		if s.Tick != nil {
			if err := s.Tick(ctx, rejoined); err != nil {
				return err
			}
		}
	}
	n.resyncSoon(ctx, states)
	dead, err := n.be.dead(ctx, cutoff)
	if err != nil {
		return err
	}
	for _, node := range dead {
		if node == n.node {
			continue
		}
		if err := n.reap(ctx, states, node, cutoff); err != nil {
			return err
		}
		n.log.Info("reaped a dead node", "node", node, "by", n.node)
	}
	return nil
}

// resync runs every NodeState's Resync; on an error, failed is the index of the one that failed.
func (n *nodes) resync(ctx context.Context, states []NodeState) (failed int, err error) {
	for i, s := range states {
		if s.Resync != nil {
			if err := s.Resync(ctx); err != nil {
				return i, err
			}
		}
	}
	return 0, nil
}

// ResyncSoon makes the next heartbeat run every NodeState's Resync (but RejoinOnly ones).
// Call it when Redis may have lost writes while the node stayed listed: a Sentinel or
// Cluster failover promotes a replica that may lack the last writes (a bridge page's index
// entry, a written-through count), with the node's heartbeat intact and no rejoin to resync
// otherwise. A heartbeat that finds the node lost resyncs everything anyway and runs none
// twice; a Resync that fails is retried alone at the following heartbeat.
func (n *nodes) ResyncSoon() { n.soon.Store(true) }

// resyncSoon runs what ResyncSoon asked for and the retries of earlier failures (under hb,
// after the ticks: a presence verify that found lost writes asks for the others' resync).
func (n *nodes) resyncSoon(ctx context.Context, states []NodeState) {
	all := n.soon.Swap(false)
	if !all && len(n.retry) == 0 {
		return
	}
	for i, s := range states {
		if s.Resync == nil || s.RejoinOnly || !all && !n.retry[i] {
			continue
		}
		if err := s.Resync(ctx); err != nil {
			if n.retry == nil {
				n.retry = map[int]bool{}
			}
			n.retry[i] = true
			n.log.Warn("per-node state resync failed; retried at the next heartbeat", "state", s.name(), "error", err, "node", n.node)
			continue
		}
		delete(n.retry, i)
	}
}

// reap marks node as being reaped, so that nothing joins under it any more, runs every
// NodeState's Reap for it, then unlists it. A reaper that dies midway leaves it marked, among
// the dead, for the next one; a node that heartbeats meanwhile is no longer marked and stays.
func (n *nodes) reap(ctx context.Context, states []NodeState, node string, cutoff time.Time) error {
	if ok, err := n.be.mark(ctx, node, cutoff); err != nil || !ok {
		return err
	}
	for _, s := range states {
		if s.Reap != nil {
			if err := s.Reap(ctx, node, cutoff); err != nil {
				return err
			}
		}
	}
	return n.be.unlist(ctx, node, cutoff, keysOf(states, node, n.keyName, n.flatBuckets))
}

// Start implements NodeRegistry.
func (n *nodes) Start() {
	n.start.Do(func() {
		n.started = true
		go n.loop()
	})
}

func (n *nodes) loop() {
	defer close(n.done)
	t := time.NewTicker(n.interval())
	defer t.Stop()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), max(n.interval(), time.Second))
		if err := n.Heartbeat(ctx); err != nil && !errors.Is(err, ErrNodeClosed) {
			n.log.Warn("node heartbeat failed", "error", err, "node", n.node)
		}
		cancel()
		select {
		case <-n.stop:
			return
		case <-t.C:
		}
	}
}

// Close implements NodeRegistry.
func (n *nodes) Close() error {
	n.closed.Store(true)
	n.stopOnce.Do(func() { close(n.stop) })
	n.start.Do(func() {})
	if n.started {
		<-n.done
	}
	n.hb.Lock() // a heartbeat under way ends before the node reaps itself
	defer n.hb.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	states := n.snapshot()
	for _, s := range states {
		if s.Closing != nil {
			s.Closing(ctx)
		}
	}
	return n.reap(ctx, states, n.node, time.Now().Add(time.Hour))
}

// MemoryNodeSet is the heartbeat table that the MemoryNodes of one process share.
type MemoryNodeSet struct {
	mu   sync.Mutex
	seen map[string]time.Time
}

// NewMemoryNodeSet returns an empty table.
func NewMemoryNodeSet() *MemoryNodeSet { return &MemoryNodeSet{seen: map[string]time.Time{}} }

// MemoryNodes is a NodeRegistry over a MemoryNodeSet: several nodes of one process (tests)
// see each other, die and are reaped exactly as over Redis.
type MemoryNodes struct{ *nodes }

var _ NodeRegistry = (*MemoryNodes)(nil)

// NewMemoryNodes registers node (default a new id) in set.
func NewMemoryNodes(set *MemoryNodeSet, node string, timeout time.Duration, logger *slog.Logger) *MemoryNodes {
	return &MemoryNodes{newNodes(set, node, timeout, logger, nil)}
}

func (m *MemoryNodeSet) beat(_ context.Context, node string, now, deadBefore time.Time, _ []string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	prev, ok := m.seen[node]
	m.seen[node] = now
	return !ok || prev.Before(deadBefore), nil
}

func (m *MemoryNodeSet) alive(_ context.Context, since time.Time) ([]string, error) {
	return m.filter(func(t time.Time) bool { return !t.Before(since) }), nil
}

func (m *MemoryNodeSet) dead(_ context.Context, cutoff time.Time) ([]string, error) {
	return m.filter(func(t time.Time) bool { return t.Before(cutoff) }), nil
}

func (m *MemoryNodeSet) filter(keep func(time.Time) bool) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for node, t := range m.seen {
		if keep(t) {
			out = append(out, node)
		}
	}
	return out
}

// A zero time is the reaping mark.
func (m *MemoryNodeSet) mark(_ context.Context, node string, cutoff time.Time) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.seen[node]
	if ok && t.After(cutoff) {
		return false, nil
	}
	m.seen[node] = time.Time{}
	return true, nil
}

func (m *MemoryNodeSet) unlist(_ context.Context, node string, _ time.Time, _ []string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if t, ok := m.seen[node]; ok && t.IsZero() {
		delete(m.seen, node)
	}
	return nil
}
