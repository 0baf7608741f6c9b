package pusher

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// With scaling on, presence joins and leaves, member lists, cache replays and the cluster
// socket index are Redis round trips. The goroutines that read sockets (the pollers, each serving thousands
// of sockets) must never wait for one: a Redis that stops answering would leave every other
// socket on that poller unread. So such work runs on a goroutine of the connection's own,
// started when work is queued and ending when the queue is empty; a connection's queue runs
// in order, and while it is not empty everything else the client asks waits behind it, so
// requests still take effect in the order they were sent. Other sockets never wait. Each task's seams
// get a context with a deadline (remoteTimeout). Local delivery never waits: a broker's
// Publish queues for Redis and returns (channels.Broker).

// remoteTimeout bounds one task's round trips to Redis.
const remoteTimeout = 2 * time.Second

// Queue bounds: a connection with maxConnTasks waiting, or a server with maxServerTasks, is
// told to try again (4100) instead of queueing more.
const (
	maxConnTasks   = 64
	maxServerTasks = 50_000
)

// Where a handler runs is a type, not a context compared by identity:
//
//   - onReader: the goroutine that reads the socket (a poller serving thousands of them, or
//     readLoop). It must not wait: whatever may touch Redis is handed on with await.
//   - onTask: the connection's task goroutine (or, with nothing remote, the reader itself,
//     as the memory stores never wait). It may wait, within ctx's deadline.
//
// A function that may touch Redis takes an onTask, which only runTasks (and await, with
// nothing remote) makes, so it cannot be called from the reader by mistake; a handler that
// runs in either place takes a runsOn and calls await for its waiting part.
type runsOn interface {
	// await runs fn where it may wait: at once on a task; from the reader, queued on the
	// connection's task goroutine (a full queue answers 4100 and fn never runs).
	await(c *Conn, fn func(onTask))
}

// onReader is runsOn for the goroutine that reads the socket.
type onReader struct{}

// onTask is runsOn for the connection's task goroutine; ctx bounds its round trips.
type onTask struct{ ctx context.Context }

func (onReader) await(c *Conn, fn func(onTask)) { c.runTask(fn) }
func (t onTask) await(_ *Conn, fn func(onTask)) { fn(t) }

// runTask runs fn on the connection's task goroutine when anything is remote (a full queue
// answers 4100), and at once otherwise: the memory stores never wait.
func (c *Conn) runTask(fn func(onTask)) {
	switch {
	case !c.srv.remote:
		fn(c.localTask())
	case !c.enqueue(fn, false):
		c.srv.tasksRefused.Add(1)
		c.sendError(ErrBusy)
	}
}

// localTask is the onTask of work that touches no network (nothing is remote, or the
// channel's stores are all in memory): the reader may run it itself.
func (c *Conn) localTask() onTask { return onTask{ctx: context.Background()} }

// taskQueue is a connection's ordered queue of work that may wait on Redis.
type taskQueue struct {
	mu      sync.Mutex
	tasks   []func(onTask)
	running bool
}

// busy reports whether the connection has work queued or running.
func (c *Conn) tasksBusy() bool {
	c.tasks.mu.Lock()
	defer c.tasks.mu.Unlock()
	return c.tasks.running
}

// enqueue queues fn on the connection's task goroutine, starting it if idle. It reports false
// when the queue is full (always accepts with force: the leave-everything of a closing
// socket).
func (c *Conn) enqueue(fn func(onTask), force bool) bool {
	s := c.srv
	q := &c.tasks
	q.mu.Lock()
	if !force && (len(q.tasks) >= maxConnTasks || s.pendingTasks.Load() >= maxServerTasks) {
		q.mu.Unlock()
		return false
	}
	q.tasks = append(q.tasks, fn)
	s.pendingTasks.Add(1)
	start := !q.running
	q.running = true
	q.mu.Unlock()
	if start {
		s.taskRunners.start()
		go c.runTasks()
	}
	return true
}

func (c *Conn) runTasks() {
	q := &c.tasks
	for {
		q.mu.Lock()
		if len(q.tasks) == 0 {
			q.running = false
			q.tasks = nil
			q.mu.Unlock()
			c.srv.taskRunners.done()
			return
		}
		fn := q.tasks[0]
		q.tasks[0] = nil
		q.tasks = q.tasks[1:]
		q.mu.Unlock()
		ctx, cancel := context.WithTimeout(c.srv.tasksCtx, remoteTimeout)
		fn(onTask{ctx: ctx})
		cancel()
		c.srv.pendingTasks.Add(-1)
	}
}

// taskCounters are the server's task gauges.
type taskCounters struct {
	pendingTasks atomic.Int64  // queued or running tasks of every connection
	tasksRefused atomic.Uint64 // requests answered "busy" because a queue was full
	taskRunners  runnerGroup   // task goroutines running, for Shutdown to wait on
}

// runnerGroup counts running task goroutines; wait returns once none runs. (Not a
// sync.WaitGroup: a connection aborted after Shutdown gave up waiting may still start
// one, and a WaitGroup must not be added to from zero while someone waits.)
type runnerGroup struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n drops to 0, made by a waiter
}

func (g *runnerGroup) start() {
	g.mu.Lock()
	g.n++
	g.mu.Unlock()
}

func (g *runnerGroup) done() {
	g.mu.Lock()
	g.n--
	if g.n == 0 && g.idle != nil {
		close(g.idle)
		g.idle = nil
	}
	g.mu.Unlock()
}

// wait returns nil once no task goroutine runs, or ctx's error.
func (g *runnerGroup) wait(ctx context.Context) error {
	g.mu.Lock()
	if g.n == 0 {
		g.mu.Unlock()
		return nil
	}
	if g.idle == nil {
		g.idle = make(chan struct{})
	}
	idle := g.idle
	g.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
