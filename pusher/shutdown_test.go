package pusher

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/reverbgo/reverbgo/channels"
	"github.com/reverbgo/reverbgo/internal/testutil"
)

// nodePresence models a node's Redis presence around its shutdown: a Join waits until the
// test lets it land (a slow Redis) and then lands even if the node has closed meanwhile
// (the command was sent), while once reaped and closed (cmd/reverbgo's presence.Close
// after the server's Shutdown) every new call fails, as the closed client's do.
type nodePresence struct {
	mem     *channels.MemoryPresence
	release chan struct{} // closed by the test: the join in flight lands
	joining chan struct{} // closed once a join is in flight
	landed  chan struct{} // closed once it has landed
	once    sync.Once
	closed  atomic.Bool
	leaves  atomic.Int32 // Leave calls, failed ones too

	mu     sync.Mutex
	joined map[[3]string]bool // channel, socket, user: what this node's reap removes
}

func newNodePresence() *nodePresence {
	return &nodePresence{mem: channels.NewMemoryPresence(), release: make(chan struct{}), joining: make(chan struct{}), landed: make(chan struct{}), joined: map[[3]string]bool{}}
}

var errClientClosed = errors.New("redis: client is closed")

func (p *nodePresence) Join(ctx context.Context, app, channel, socketID string, m channels.Member) (bool, error) {
	if p.closed.Load() {
		return false, errClientClosed
	}
	p.once.Do(func() { close(p.joining) })
	land := func() (bool, error) {
		<-p.release
		p.mu.Lock()
		p.joined[[3]string{channel, socketID, m.UserID}] = true
		p.mu.Unlock()
		defer close(p.landed)
		return p.mem.Join(context.Background(), app, channel, socketID, m)
	}
	select {
	case <-p.release:
		return land()
	case <-ctx.Done(): // the caller gives up, but the command was sent: it lands anyway
		go func() { _, _ = land() }()
		return false, ctx.Err()
	}
}

func (p *nodePresence) Leave(ctx context.Context, app, channel, socketID, userID string) (bool, error) {
	p.leaves.Add(1)
	if p.closed.Load() {
		return false, errClientClosed
	}
	p.mu.Lock()
	delete(p.joined, [3]string{channel, socketID, userID})
	p.mu.Unlock()
	return p.mem.Leave(ctx, app, channel, socketID, userID)
}

func (p *nodePresence) Members(ctx context.Context, app, channel string) ([]channels.Member, error) {
	if p.closed.Load() {
		return nil, errClientClosed
	}
	return p.mem.Members(ctx, app, channel)
}

// reapAndClose is the node's own reap of its members, then the client's close.
func (p *nodePresence) reapAndClose(app string) {
	p.mu.Lock()
	for k := range p.joined {
		_, _ = p.mem.Leave(context.Background(), app, k[0], k[1], k[2])
	}
	clear(p.joined)
	p.mu.Unlock()
	p.closed.Store(true)
}

// waiting reports whether someone waits for the task goroutines to end.
func (g *runnerGroup) waiting() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.idle != nil
}

// Fault 6: a presence join still in flight when the node shuts down. Shutdown must wait
// for it and for the leave queued behind it before the node reaps itself and closes Redis;
// it used to return once the sockets were closed, the join then landed after the reap,
// its leave failed on the closed client (or never ran, the join having timed out), and
// the member stayed for good (a ghost: no survivor reaps a node that is gone, and
// presence hashes have no TTL).
func TestShutdownWaitsForQueuedTasks(t *testing.T) {
	store := newNodePresence()
	reg := channels.NewRegistry(channels.Options{Presence: store})
	ts := newServer(t, withOptions(func(o *Options) { o.Registry = reg }))
	c := ts.connect(t)
	ch, cd := "presence-x", `{"user_id":"u1"}`
	c.SubscribeMsg(ch, presenceAuth(ts.app.Key, ts.app.Secret, c.SocketID, ch, cd), cd)
	<-store.joining

	shutdownDone := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*waitTimeout)
		defer cancel()
		err := ts.s.Shutdown(ctx)
		store.reapAndClose(testAppID) // what cmd/reverbgo does next
		shutdownDone <- err
	}()
	testutil.WaitFor(t, "the socket closed and Shutdown returned or waits for its tasks", func() bool {
		if ts.s.ConnectionCount(testAppID) != 0 {
			return false
		}
		return len(shutdownDone) > 0 || ts.s.taskRunners.waiting()
	})
	close(store.release) // the join lands now
	if err := <-shutdownDone; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	<-store.landed
	testutil.WaitFor(t, "every task done", func() bool { return ts.s.pendingTasks.Load() == 0 })
	ms, _ := store.mem.Members(context.Background(), testAppID, ch)
	if len(ms) != 0 {
		t.Fatalf("members of %s after the node shut down: %v (a ghost)", ch, ms)
	}
}
