package pusher

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/reverbgo/reverbgo/channels"
)

// Presence reconcile. Member events cross nodes over Redis pub/sub, which has no replay: while
// this node's Redis connection is down, and until it has subscribed again, the
// member_added / member_removed events other nodes publish never reach its sockets, which
// then keep ghost members and miss new ones for good. So after trouble (Health reported
// Redis unreachable, the node registry's heartbeat had to rejoin, or heartbeats stopped for a
// while) and two quiet heartbeat intervals (node_timeout/10 each: the other nodes have
// rejoined and retried their leaves meanwhile), the node reads every local presence
// channel's members from the store and tells its own subscribers only what they missed,
// against what they were told (the registry's announced sets, channels/announced.go). A
// failed pass is retried on the next interval. It runs on one goroutine of the node, each
// pass bounded by a deadline; delivering only queues frames, so no socket ever waits.

// presenceQuietIntervals is how many healthy intervals a reconcile waits for after trouble.
const presenceQuietIntervals = 2

type presenceReconcile struct {
	interval time.Duration

	mu       sync.Mutex
	troubled bool
	quiet    int       // healthy intervals since the last trouble
	lastBeat time.Time // the node registry's last successful heartbeat (PresenceHeartbeat)
	// off disables the reconcile (tests prove the fault without it).
	off bool
}

// startPresenceReconcile starts the reconcile loop of a clustered node (Health set).
func (s *Server) startPresenceReconcile() {
	if s.health == nil {
		return
	}
	secs := s.cfg.Scaling.NodeTimeout
	if secs <= 0 {
		secs = 10
	}
	s.reconcile.interval = time.Duration(secs) * time.Second / 10
	s.wg.Add(1)
	go s.presenceReconcileLoop()
}

// PresenceTrouble tells the node that its Redis view may have missed member events; a
// reconcile follows two quiet intervals later.
func (s *Server) PresenceTrouble() {
	r := &s.reconcile
	r.mu.Lock()
	r.troubled, r.quiet = true, 0
	r.mu.Unlock()
}

// PresenceHeartbeat is called on every successful node-registry heartbeat (a NodeState's
// Tick): a rejoin (the registry had lost this node, e.g. Redis restarted empty) or a gap of
// more than two intervals since the previous one (heartbeats failed) is trouble.
func (s *Server) PresenceHeartbeat(rejoined bool) {
	r := &s.reconcile
	now := time.Now()
	r.mu.Lock()
	first := r.lastBeat.IsZero() // a fresh node's first heartbeat always "rejoins"
	gap := !first && r.interval > 0 && now.Sub(r.lastBeat) > 2*r.interval+r.interval/2
	r.lastBeat = now
	if !first && (rejoined || gap) {
		r.troubled, r.quiet = true, 0
	}
	r.mu.Unlock()
}

func (s *Server) presenceReconcileLoop() {
	defer s.wg.Done()
	r := &s.reconcile
	t := time.NewTicker(r.interval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), max(r.interval, time.Second))
		healthy := len(s.health(ctx)) == 0
		cancel()
		r.mu.Lock()
		due := false
		if !healthy {
			r.troubled, r.quiet = true, 0
		} else if r.troubled {
			r.quiet++
			due = r.quiet >= presenceQuietIntervals && !r.off
		}
		r.mu.Unlock()
		if !due {
			continue
		}
		ctx, cancel = context.WithTimeout(context.Background(), max(5*r.interval, 2*time.Second))
		err := s.reconcilePresence(ctx)
		cancel()
		r.mu.Lock()
		if err == nil && r.quiet >= presenceQuietIntervals { // no new trouble meanwhile
			r.troubled, r.quiet = false, 0
		}
		r.mu.Unlock()
		if err != nil {
			s.log.Warn("presence reconcile failed; retrying on the next heartbeat", "error", err)
		}
	}
}

// reconcilePresence corrects every local presence channel's subscribers against the
// presence store. A Redis error stops the pass; a channel whose set kept changing is left
// for the next pass. Either way the caller runs the whole pass again (channels already
// corrected then differ no more).
func (s *Server) reconcilePresence(ctx context.Context) error {
	fixed := 0
	var busy error
	for _, ch := range s.reg.AnnouncedChannels() {
		var gone []string
		var missing []channels.Member
		ok := false
		// A member event arriving between the read and the diff would make the diff wrong
		// (a join read as absent, announced, then removed): read again, a few times.
		for try := 0; try < 3 && !ok; try++ {
			if err := ctx.Err(); err != nil {
				return err
			}
			v, has := s.reg.AnnouncedVersion(ch.App, ch.Channel)
			if !has {
				break
			}
			truth, err := s.reg.Presence().Members(ctx, ch.App, ch.Channel)
			if err != nil {
				return err
			}
			gone, missing, ok = s.reg.AnnouncedDiff(ch.App, ch.Channel, v, truth)
		}
		if !ok {
			if _, has := s.reg.AnnouncedVersion(ch.App, ch.Channel); has {
				busy = errors.New("presence reconcile: " + ch.Channel + " kept changing; next pass")
			}
			continue
		}
		for _, id := range gone {
			s.reg.DeliverLocal(memberRemoved(ch.App, ch.Channel, id, ""))
		}
		for _, m := range missing {
			s.reg.DeliverLocal(memberAdded(ch.App, ch.Channel, m.UserID, m.Info, ""))
		}
		fixed += len(gone) + len(missing)
	}
	if fixed > 0 {
		s.log.Info("presence reconciled after redis trouble", "events", fixed)
	}
	return busy
}
