package redisx

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Bounds of the loop.
const (
	// maxPerCommand bounds one SUBSCRIBE's argument list.
	maxPerCommand = 1000
	// sendTimeout bounds one batch (or one re-make) on the wire.
	sendTimeout = 2 * time.Second
	// receivePoll is how long a receive waits before it looks whether its Sub moved on.
	receivePoll = 5 * time.Second
	// DefaultProbeEvery and DefaultProbeTimeout pace the end-to-end probe: a probe is
	// published through the client (the path every publish takes) on the Sub's anchor and
	// must come back on the subscription within the timeout, else the subscription is made
	// anew. Cluster notices its own changes (a server-sent sunsubscribe), so it probes slower.
	DefaultProbeEvery        = 500 * time.Millisecond
	DefaultProbeTimeout      = time.Second
	DefaultClusterProbeEvery = 2 * time.Second
)

// probePrefix starts a probe's payload; an owner never sees one.
const probePrefix = "rgprobe:"

// SubOptions configure a Sub.
type SubOptions struct {
	// Name labels the Sub in logs.
	Name string
	// Anchor is the channel the Sub is always subscribed to, first: probes travel on it and,
	// on Cluster, it picks the shard (every channel of a Sub must share its slot).
	Anchor string
	// ProbeID tells this Sub's probes from others' on a shared anchor (default: a unique id).
	ProbeID string
	// Want returns the channels the owner wants now, besides the anchor. It is called for
	// every re-make, after the Sub has taken the changes queued so far: an owner updates
	// its set first, then calls Change.
	Want func() []string
	// OnMessage gets every message of the anchor and the wanted channels but probes. Calls
	// come from one goroutine at a time, in the order Redis sent them.
	OnMessage func(channel, payload string)
	// OnConfirm runs when every change with a generation up to gen is in effect.
	OnConfirm func(gen uint64)
	// OnLost runs when the subscription may have stopped delivering: nothing is in effect
	// again until OnConfirm(gen) for the given gen. cause is one of the Cause constants.
	OnLost func(cause string, gen uint64)
	// OnRestored runs at the first confirmation after a loss.
	OnRestored func(cause string, down time.Duration)
	// ProbeEvery and ProbeTimeout pace the probe (defaults above; negative ProbeEvery: none).
	ProbeEvery, ProbeTimeout time.Duration
	Logger                   *slog.Logger
}

// Sub is one subscription connection kept equal to its owner's set. The owner changes the
// set with Change (subscribe/unsubscribe, batched into the next round trip and confirmed
// by a numbered PING on the same connection) and learns from OnConfirm when a change is in
// effect; after anything that may have changed what Redis delivers, the Sub throws the
// connection away and subscribes a fresh one to Want() — go-redis's own list of channels
// is never relied on.
type Sub struct {
	c    *Client
	opts SubOptions

	mu      sync.Mutex
	ops     map[string]bool // queued changes: true subscribe, false unsubscribe (last wins)
	gen     uint64          // the last generation sent
	leaving map[string]int  // channels with an UNSUBSCRIBE whose answer has not come
	remake  string          // cause of a wanted re-make ("" none)
	up      bool            // confirmed since the last loss
	down    bool            // a re-make failed since the last confirmation (Redis unreachable)
	lostAt  time.Time
	lostBy  string
	epoch   uint64        // the current connection's number
	retire  uint64        // the connection being replaced by a re-make (its pongs confirm nothing)
	drained chan struct{} // closed when the retiring connection answered its last PING
	ps      *redis.PubSub
	recv    chan struct{} // closed when the current connection's receive goroutine ends
	probeN  uint64
	probeAt time.Time // the outstanding probe's send time (zero: none)
	batches uint64    // round trips sent (batches and re-makes)

	kick   chan struct{}
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
}

// NewSub starts a Sub: its loop makes the connection at once, without blocking the caller.
func (c *Client) NewSub(opts SubOptions) *Sub {
	if opts.Logger == nil {
		opts.Logger = c.log
	}
	if opts.ProbeEvery == 0 {
		opts.ProbeEvery = DefaultProbeEvery
		if c.Sharded() {
			opts.ProbeEvery = DefaultClusterProbeEvery
		}
	}
	if opts.ProbeTimeout <= 0 {
		opts.ProbeTimeout = DefaultProbeTimeout
	}
	if opts.ProbeID == "" {
		opts.ProbeID = strconv.FormatUint(nextID(), 36)
	}
	if opts.Want == nil {
		opts.Want = func() []string { return nil }
	}
	s := &Sub{c: c, opts: opts, ops: map[string]bool{}, leaving: map[string]int{}, remake: "start",
		kick: make(chan struct{}, 1), done: make(chan struct{})}
	s.ctx, s.cancel = context.WithCancel(c.ctx)
	c.mu.Lock()
	c.subs[s] = struct{}{}
	c.mu.Unlock()
	c.onSwitch(func() { s.Remake(CauseFailover) })
	s.signal() // the first connection, without waiting for a probe tick (or with none)
	go s.run()
	return s
}

var (
	idMu sync.Mutex
	idN  = uint64(time.Now().UnixNano())
)

func nextID() uint64 {
	idMu.Lock()
	defer idMu.Unlock()
	idN++
	return idN
}

// Change queues subscribes and unsubscribes for the next round trip and returns the
// generation whose confirmation proves them. It never blocks.
func (s *Sub) Change(sub, unsub []string) uint64 {
	s.mu.Lock()
	for _, ch := range sub {
		s.ops[ch] = true
	}
	for _, ch := range unsub {
		s.ops[ch] = false
	}
	gen := s.gen + 1
	s.mu.Unlock()
	s.signal()
	return gen
}

// Remake throws the connection away and subscribes a fresh one to the owner's set. The Sub
// is no longer Up from this call on (not from when its loop gets to the re-make): a caller
// that waits for Up after asking for a re-make (the writer after a Sentinel switch) waits
// for the new connection, never for the one being thrown away.
func (s *Sub) Remake(cause string) {
	s.mu.Lock()
	if s.remake == "" {
		s.remake = cause
	}
	if s.up {
		s.up = false
		s.lostAt, s.lostBy = time.Now(), cause
	}
	s.mu.Unlock()
	s.signal()
}

// Up reports whether the subscription is confirmed live (since its last loss).
func (s *Sub) Up() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.up
}

// Down reports whether making the subscription failed since it was last confirmed: Redis
// is unreachable, so callers should not wait for a confirmation.
func (s *Sub) Down() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.down
}

// Batches is how many subscription round trips the Sub has sent (tests of batching).
func (s *Sub) Batches() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.batches
}

// Close ends the loop and the connection.
func (s *Sub) Close() {
	s.cancel()
	<-s.done
	s.c.mu.Lock()
	delete(s.c.subs, s)
	s.c.mu.Unlock()
}

func (s *Sub) signal() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// run is the Sub's loop: re-makes, batches and probes, one at a time.
func (s *Sub) run() {
	defer close(s.done)
	defer s.closeConn()
	var probe <-chan time.Time
	if s.opts.ProbeEvery > 0 {
		t := time.NewTicker(s.opts.ProbeEvery)
		defer t.Stop()
		probe = t.C
	}
	backoff := time.Duration(0)
	var retry <-chan time.Time
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-s.kick:
		case <-retry:
		case <-probe:
			s.checkProbe()
		}
		retry = nil
		s.mu.Lock()
		cause := s.remake
		s.mu.Unlock()
		var err error
		if cause != "" {
			err = s.doRemake(cause)
		} else {
			err = s.flush()
		}
		if err == nil {
			backoff = 0
			continue
		}
		if s.ctx.Err() != nil {
			return
		}
		backoff = min(max(backoff*2, 50*time.Millisecond), 500*time.Millisecond)
		retry = time.After(backoff)
	}
}

// flush sends the queued changes on the current connection, then PING g<gen>. Any error
// makes the connection anew: a batch that failed half way left Redis in a state nobody
// knows, and the fresh connection has exactly the owner's set.
func (s *Sub) flush() error {
	s.mu.Lock()
	if len(s.ops) == 0 || s.ps == nil {
		s.mu.Unlock()
		return nil
	}
	var sub, unsub []string
	for ch, on := range s.ops {
		if on {
			sub = append(sub, ch)
		} else {
			unsub = append(unsub, ch)
			s.leaving[ch]++
		}
	}
	clear(s.ops)
	s.gen++
	s.batches++
	gen, ps := s.gen, s.ps
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(s.ctx, sendTimeout)
	defer cancel()
	err := s.send(ctx, ps, sub, unsub, gen)
	if err != nil {
		s.Remake(CauseStall)
		s.opts.Logger.Warn("redis subscription batch failed; re-making the subscription", "sub", s.opts.Name, "error", err)
	}
	return err
}

func (s *Sub) send(ctx context.Context, ps *redis.PubSub, sub, unsub []string, gen uint64) error {
	for _, part := range chunks(sub, maxPerCommand) {
		var err error
		if s.c.Sharded() {
			err = ps.SSubscribe(ctx, part...)
		} else {
			err = ps.Subscribe(ctx, part...)
		}
		if err != nil {
			return err
		}
	}
	for _, part := range chunks(unsub, maxPerCommand) {
		var err error
		if s.c.Sharded() {
			err = ps.SUnsubscribe(ctx, part...)
		} else {
			err = ps.Unsubscribe(ctx, part...)
		}
		if err != nil {
			return err
		}
	}
	return ps.Ping(ctx, "g"+strconv.FormatUint(gen, 10))
}

// doRemake subscribes a fresh connection to the anchor and Want(), then closes the old one:
// make before break. The old connection keeps delivering until the new one is confirmed
// subscribed, so when the old one was alive after all (a probe late on a loaded node, a
// slot moved for some channels only) nothing published meanwhile is lost; messages that
// arrive on both are the owner's to drop (the broker's per-node sequence filter does).
// OnMessage still runs from one goroutine at a time: the new connection's reader starts
// after the old one's has ended.
func (s *Sub) doRemake(cause string) error {
	s.mu.Lock()
	// Remake already marked a live Sub lost (not Up, lostAt), before the loop got here.
	first := cause == "start" && s.epoch == 0
	clear(s.ops) // subsumed by Want(), read below
	clear(s.leaving)
	s.retire = s.epoch
	s.gen++
	gen := s.gen
	s.probeAt = time.Time{}
	s.mu.Unlock()
	if !first {
		s.c.countResubscribe(cause)
	}
	if s.opts.OnLost != nil {
		s.opts.OnLost(cause, gen)
	}
	if s.c.Sharded() {
		if cc, ok := s.c.UniversalClient.(*redis.ClusterClient); ok {
			cc.ReloadState(s.ctx)
		}
	}
	want := s.opts.Want()
	ctx, cancel := context.WithTimeout(s.ctx, sendTimeout)
	defer cancel()
	var ps *redis.PubSub
	if s.c.Sharded() {
		ps = s.c.SSubscribe(ctx, s.opts.Anchor)
	} else {
		ps = s.c.Subscribe(ctx, s.opts.Anchor)
	}
	err := s.send(ctx, ps, want, nil, gen)
	if err != nil {
		_ = ps.Close()
		s.closeConn()
		s.mu.Lock()
		wasDown := s.down
		s.down = true
		s.mu.Unlock()
		if !wasDown {
			s.opts.Logger.Warn("redis subscription lost; serving this node's sockets only until it is made again",
				"sub", s.opts.Name, "cause", cause, "error", err)
		}
		return err
	}
	s.drainOld()
	s.closeConn()
	s.mu.Lock()
	s.epoch++
	s.ps = ps
	s.remake = ""
	recv := make(chan struct{})
	s.recv = recv
	epoch := s.epoch
	s.mu.Unlock()
	go s.receive(ps, epoch, recv)
	return nil
}

// drainTimeout bounds how long a re-make waits for the old connection's last messages.
const drainTimeout = time.Second

// drainOld reads the old connection up to a PING sent now, once the new one is subscribed:
// what Redis queued for the old one before the new one existed is then delivered (the
// rest arrives on the new one too). A dead old connection answers nothing and is waited for
// drainTimeout at most (its PING usually fails at once).
func (s *Sub) drainOld() {
	s.mu.Lock()
	old, epoch := s.ps, s.epoch
	drained := make(chan struct{})
	s.drained = drained
	s.mu.Unlock()
	if old == nil {
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, drainTimeout)
	defer cancel()
	if old.Ping(ctx, drainPayload(epoch)) != nil {
		return
	}
	select {
	case <-drained:
	case <-ctx.Done():
	}
}

func drainPayload(epoch uint64) string { return "r" + strconv.FormatUint(epoch, 10) }

// closeConn closes the current connection and waits for its receive goroutine, so that
// messages reach OnMessage from one goroutine at a time.
func (s *Sub) closeConn() {
	s.mu.Lock()
	ps, recv := s.ps, s.recv
	s.ps, s.recv = nil, nil
	s.mu.Unlock()
	if ps != nil {
		_ = ps.Close()
	}
	if recv != nil {
		<-recv
	}
}

// receive is the only reader of one connection.
func (s *Sub) receive(ps *redis.PubSub, epoch uint64, done chan struct{}) {
	defer close(done)
	for {
		msg, err := ps.ReceiveTimeout(s.ctx, receivePoll)
		if !s.current(epoch) {
			return
		}
		if err != nil {
			var ne net.Error
			if asNetTimeout(err, &ne) {
				continue
			}
			s.Remake(CauseReconnect)
			return
		}
		switch m := msg.(type) {
		case *redis.Pong:
			if m.Payload == drainPayload(epoch) {
				s.mu.Lock()
				d := s.drained
				s.drained = nil
				s.mu.Unlock()
				if d != nil {
					close(d)
				}
				continue
			}
			if g, ok := parseGen(m.Payload); ok {
				s.confirm(epoch, g)
			}
		case *redis.Message:
			if m.Channel == s.opts.Anchor && IsProbe(m.Payload) {
				s.probeBack(epoch, m.Payload) // the anchor may also carry the owner's messages
				continue
			}
			if s.opts.OnMessage != nil {
				s.opts.OnMessage(m.Channel, m.Payload)
			}
		case *redis.Subscription:
			if m.Kind == "unsubscribe" || m.Kind == "sunsubscribe" {
				if !s.acked(m.Channel) {
					// Redis unsubscribed us on its own: on Cluster a slot of ours moved to
					// another master (or its master changed).
					s.opts.Logger.Warn("redis ended a subscription on its own; re-making the subscription",
						"sub", s.opts.Name, "channel", m.Channel, "kind", m.Kind)
					s.Remake(CauseResharding)
					return
				}
			}
		}
	}
}

func (s *Sub) current(epoch uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.epoch == epoch && s.ps != nil && s.ctx.Err() == nil
}

// acked takes the answer to an UNSUBSCRIBE the Sub sent; false means nobody asked.
func (s *Sub) acked(ch string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.leaving[ch]
	if !ok {
		return false
	}
	if n <= 1 {
		delete(s.leaving, ch)
	} else {
		s.leaving[ch] = n - 1
	}
	return true
}

func (s *Sub) confirm(epoch, gen uint64) {
	s.mu.Lock()
	if s.epoch != epoch || s.retire == epoch || s.remake != "" {
		s.mu.Unlock()
		return // a connection being replaced confirms nothing
	}
	restored := !s.up && !s.lostAt.IsZero()
	cause, since := s.lostBy, time.Since(s.lostAt)
	s.up, s.down = true, false
	if restored {
		s.lostAt = time.Time{}
	}
	s.mu.Unlock()
	if restored {
		s.opts.Logger.Info("redis subscription restored", "sub", s.opts.Name, "cause", cause, "down", since.String())
		if s.opts.OnRestored != nil {
			s.opts.OnRestored(cause, since)
		}
	}
	if s.opts.OnConfirm != nil {
		s.opts.OnConfirm(gen)
	}
}

// checkProbe re-makes the connection when the outstanding probe is late, else sends the next.
func (s *Sub) checkProbe() {
	s.mu.Lock()
	if !s.up || s.ps == nil || s.remake != "" {
		s.mu.Unlock()
		return
	}
	if !s.probeAt.IsZero() {
		late := time.Since(s.probeAt) > s.opts.ProbeTimeout
		s.mu.Unlock()
		if late {
			s.opts.Logger.Warn("redis subscription probe did not come back; re-making the subscription", "sub", s.opts.Name)
			s.Remake(CauseProbe)
		}
		return
	}
	s.probeN++
	s.probeAt = time.Now()
	payload := probePrefix + s.opts.ProbeID + ":" + strconv.FormatUint(s.probeN, 10)
	s.mu.Unlock()
	go func() {
		ctx, cancel := context.WithTimeout(s.ctx, s.opts.ProbeTimeout)
		defer cancel()
		_ = s.c.PublishTo(ctx, s.opts.Anchor, payload) // a failure shows as a late probe
	}()
}

func (s *Sub) probeBack(epoch uint64, payload string) {
	rest, ok := strings.CutPrefix(payload, probePrefix+s.opts.ProbeID+":")
	if !ok {
		return // another node's probe on a shared anchor
	}
	n, err := strconv.ParseUint(rest, 10, 64)
	if err != nil {
		return
	}
	s.mu.Lock()
	if s.epoch == epoch && n == s.probeN {
		s.probeAt = time.Time{}
	}
	s.mu.Unlock()
}

// IsProbe reports whether payload is a Sub's probe (owners sharing an anchor skip them).
func IsProbe(payload string) bool { return strings.HasPrefix(payload, probePrefix) }

func parseGen(p string) (uint64, bool) {
	if !strings.HasPrefix(p, "g") {
		return 0, false
	}
	g, err := strconv.ParseUint(p[1:], 10, 64)
	return g, err == nil
}

func asNetTimeout(err error, ne *net.Error) bool {
	return errors.As(err, ne) && (*ne).Timeout()
}

// chunks splits s into pieces of at most n.
func chunks(s []string, n int) [][]string {
	var out [][]string
	for len(s) > n {
		out = append(out, s[:n])
		s = s[n:]
	}
	if len(s) > 0 {
		out = append(out, s)
	}
	return out
}
