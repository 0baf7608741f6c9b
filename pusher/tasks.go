package pusher

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// With scaling on, presence joins and leaves, member lists and the cluster socket index are
// Redis round trips. The goroutines that read sockets (the pollers, each serving thousands
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

// onPoller is the context handlers get on the goroutine that reads the socket: work that may
// wait on the network must not run with it (see offPoller).
var onPoller = context.WithValue(context.Background(), pollerKey{}, true)

type pollerKey struct{}

// taskQueue is a connection's ordered queue of work that may wait on Redis.
type taskQueue struct {
	mu      sync.Mutex
	tasks   []func(context.Context)
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
func (c *Conn) enqueue(fn func(context.Context), force bool) bool {
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
			return
		}
		fn := q.tasks[0]
		q.tasks[0] = nil
		q.tasks = q.tasks[1:]
		q.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), remoteTimeout)
		fn(ctx)
		cancel()
		c.srv.pendingTasks.Add(-1)
	}
}

// offPoller runs fn now if the caller may wait (ctx is a task's, or nothing is remote) and
// otherwise queues it on the connection's task goroutine; a full queue answers 4100.
func (c *Conn) offPoller(ctx context.Context, fn func(context.Context)) {
	switch {
	case ctx != onPoller:
		fn(ctx)
	case !c.srv.remote:
		fn(context.Background())
	case !c.enqueue(fn, false):
		c.srv.tasksRefused.Add(1)
		c.sendError(codeOverCapacity, "Server is busy, try again")
	}
}

// taskCounters are the server's task gauges.
type taskCounters struct {
	pendingTasks atomic.Int64  // queued or running tasks of every connection
	tasksRefused atomic.Uint64 // requests answered "busy" because a queue was full
}
