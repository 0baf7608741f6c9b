package redisx

import (
	"context"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// FailoverHoldMax bounds how long writes are held for one Sentinel failover (AwaitWritable):
// a planned failover takes well under a second from +try-failover to +switch-master; one
// that never says it ended (a sentinel that died half way, a lost message) stops holding
// writes after this long, and they go on to the master the node last heard of.
const FailoverHoldMax = 10 * time.Second

// The sentinel channels the watchers subscribe to. Only the sentinel that runs a failover
// (its leader; for SENTINEL FAILOVER the one that got the command) publishes +try-failover
// and the aborts; every sentinel publishes +switch-master once it adopted the new master.
const (
	evSwitchMaster = "+switch-master" // <name> <old-ip> <old-port> <new-ip> <new-port>
	evTryFailover  = "+try-failover"  // master <name> <ip> <port>
	evAbortPattern = "-failover-abort-*"
)

// watchSentinel follows one sentinel for as long as the client is open, reconnecting with
// backoff: +switch-master moves the pub/sub plane, a failover of the master holds writes
// (AwaitWritable). Every sentinel has its own watcher, so the node hears of a failover from
// the sentinel that runs it and of a switch from the first sentinel that names it.
func (c *Client) watchSentinel(addr string) {
	defer c.wg.Done()
	backoff := time.Duration(0)
	for c.ctx.Err() == nil {
		sc := redis.NewSentinelClient(&redis.Options{Addr: addr, Password: c.password, DialTimeout: time.Second})
		ps := sc.Subscribe(c.ctx, evSwitchMaster, evTryFailover)
		_ = ps.PSubscribe(c.ctx, evAbortPattern)
		// A receive blocked for its 30 s does not see ctx: Close ends it by closing ps.
		stopClose := context.AfterFunc(c.ctx, func() { _ = ps.Close() })
		// Whatever was missed while not listening: the sentinel's current answer.
		c.askSentinel(sc, addr)
		for c.ctx.Err() == nil {
			msg, err := ps.ReceiveTimeout(c.ctx, 30*time.Second)
			if err != nil {
				var ne net.Error
				if ok := asNetTimeout(err, &ne); ok {
					if ps.Ping(c.ctx) == nil {
						continue
					}
				}
				break
			}
			backoff = 0
			if m, ok := msg.(*redis.Message); ok {
				c.sentinelEvent(sc, addr, m.Channel, m.Payload)
			}
		}
		stopClose()
		_ = ps.Close()
		_ = sc.Close()
		backoff = min(max(backoff*2, 100*time.Millisecond), 2*time.Second)
		select {
		case <-c.ctx.Done():
		case <-time.After(backoff):
		}
	}
}

// sentinelEvent acts on one message of the sentinel at addr.
func (c *Client) sentinelEvent(sc *redis.SentinelClient, addr, channel, payload string) {
	switch {
	case channel == evSwitchMaster:
		f := strings.Fields(payload)
		if len(f) != 5 || f[0] != c.master {
			return
		}
		// Every sentinel announces the switch once it adopted it: the first one moves the plane.
		if changed, moved := c.useMaster(net.JoinHostPort(f[3], f[4]), -1); changed {
			c.log.Warn("redis sentinel switched master; moving publishes and subscriptions", "master", c.master, "switch", payload, "sentinel", addr)
			if moved {
				c.switched()
			}
		}
		c.endHold(evSwitchMaster)
		c.learnEpoch(sc)
	case eventMaster(payload) != c.master:
	case channel == evTryFailover:
		c.failoverStarted(addr, channel)
	case strings.HasPrefix(channel, "-failover-abort-"):
		c.failoverEnded(addr, channel)
	}
}

// eventMaster is the master a sentinel event is about: "master <name> <ip> <port>" or, for
// a replica or sentinel, "<type> <name> <ip> <port> @ <master> <ip> <port>".
func eventMaster(payload string) string {
	f := strings.Fields(payload)
	for i, w := range f {
		if w == "@" && i+1 < len(f) {
			return f[i+1]
		}
	}
	if len(f) >= 2 && f[0] == "master" {
		return f[1]
	}
	return ""
}

// askSentinel takes the sentinel's current view of the master (on a watcher's (re)connect):
// its address, unless the sentinel has an older config epoch than the one the plane
// follows (it has not heard of a switch yet), and whether it runs a failover of it.
func (c *Client) askSentinel(sc *redis.SentinelClient, addr string) {
	ctx, cancel := context.WithTimeout(c.ctx, time.Second)
	defer cancel()
	m, err := sc.Master(ctx, c.master).Result()
	if err != nil || m["ip"] == "" || m["port"] == "" {
		return
	}
	epoch, err := strconv.ParseInt(m["config-epoch"], 10, 64)
	if err != nil {
		epoch = -1
	}
	if changed, moved := c.useMaster(net.JoinHostPort(m["ip"], m["port"]), epoch); changed && moved {
		c.log.Warn("redis sentinel names another master; moving publishes and subscriptions", "master", c.master, "address", m["ip"]+":"+m["port"], "sentinel", addr)
		c.switched()
		c.endHold(evSwitchMaster)
	}
	if strings.Contains(m["flags"], "failover_in_progress") {
		c.failoverStarted(addr, "failover_in_progress")
	} else {
		c.failoverEnded(addr, "")
	}
}

// learnEpoch records the config epoch of the master a sentinel just switched to.
func (c *Client) learnEpoch(sc *redis.SentinelClient) {
	ctx, cancel := context.WithTimeout(c.ctx, time.Second)
	defer cancel()
	m, err := sc.Master(ctx, c.master).Result()
	if err != nil {
		return
	}
	epoch, err := strconv.ParseInt(m["config-epoch"], 10, 64)
	if err != nil {
		return
	}
	c.pmu.Lock()
	if c.pubAddr == net.JoinHostPort(m["ip"], m["port"]) {
		c.epoch = epoch
	}
	c.pmu.Unlock()
}

// useMaster points the pub/sub plane at addr, named under config epoch (-1: a
// +switch-master, always newer). changed reports that the plane moved; moved that it moved
// from a master it was on (not its first).
func (c *Client) useMaster(addr string, epoch int64) (changed, moved bool) {
	c.pmu.Lock()
	if addr == "" || addr == c.pubAddr || (epoch >= 0 && c.pub != nil && epoch < c.epoch) {
		if addr == c.pubAddr && epoch > c.epoch {
			c.epoch = epoch
		}
		c.pmu.Unlock()
		return false, false
	}
	opts := c.dataOpts
	opts.Addr = addr
	old := c.pub
	c.pub, c.pubAddr, c.epoch = redis.NewClient(&opts), addr, epoch
	c.pmu.Unlock()
	if old != nil {
		// Publishes in flight on the old master finish (or fail and are retried) first.
		time.AfterFunc(10*time.Second, func() { _ = old.Close() })
	}
	return true, old != nil
}

// AwaitWritable returns once writes may go to the pub/sub plane: at once (one atomic load)
// unless a sentinel runs a failover of the master, else when that failover ended (a
// +switch-master from any sentinel, which moved the plane first, or an abort), when
// FailoverHoldMax passed since it started, or with ctx's error when ctx ends first. A write
// made on the old master after the sentinel promoted its replica is lost when the old
// master becomes the new one's replica; a write held until the switch goes to the new one.
// held reports that the call waited for a hold to end: the plane may have moved meanwhile,
// and the Subs re-make themselves on the new master (they are not Up until they have).
func (c *Client) AwaitWritable(ctx context.Context) (held bool, err error) {
	if !c.held.Load() {
		return false, nil
	}
	c.hmu.Lock()
	done := c.holdDone
	c.hmu.Unlock()
	if done == nil {
		return false, nil
	}
	select {
	case <-done:
		return false, nil
	default:
	}
	select {
	case <-done:
		return true, nil
	case <-ctx.Done():
		return true, ctx.Err()
	}
}

// failoverStarted records that the sentinel at addr runs a failover of the master (why:
// the event or flag that said so) and starts holding writes if they were not held.
func (c *Client) failoverStarted(addr, why string) {
	c.hmu.Lock()
	defer c.hmu.Unlock()
	if c.ctx.Err() != nil {
		return
	}
	if c.failing == nil {
		c.failing = map[string]string{}
	}
	if _, ok := c.failing[addr]; ok {
		return
	}
	c.failing[addr] = why
	if c.held.Load() {
		return
	}
	done := make(chan struct{})
	c.holdFrom, c.holdDone = time.Now(), done
	c.holdEnd = time.AfterFunc(c.holdMax, func() { c.endHoldOf(done, "bound") })
	c.held.Store(true)
	c.log.Warn("redis sentinel failover in progress; holding writes until it ends", "master", c.master, "sentinel", addr, "event", why, "max", c.holdMax.String())
}

// failoverEnded records that the sentinel at addr no longer runs a failover of the master
// (an abort, or its flags on a reconnect); the hold ends when no sentinel runs one.
func (c *Client) failoverEnded(addr, why string) {
	c.hmu.Lock()
	_, was := c.failing[addr]
	delete(c.failing, addr)
	left := len(c.failing)
	done := c.holdDone
	c.hmu.Unlock()
	if was && left == 0 {
		if why == "" {
			why = "no failover in progress"
		}
		c.endHoldOf(done, why)
	}
}

// endHold ends the hold (a switch, Close) whichever sentinel started it.
func (c *Client) endHold(why string) {
	c.hmu.Lock()
	done := c.holdDone
	c.hmu.Unlock()
	c.endHoldOf(done, why)
}

// endHoldOf ends the hold that done belongs to, if it is still the current one.
func (c *Client) endHoldOf(done chan struct{}, why string) {
	c.hmu.Lock()
	defer c.hmu.Unlock()
	if done == nil || c.holdDone != done {
		return
	}
	clear(c.failing)
	c.holdEnd.Stop()
	c.held.Store(false)
	close(done)
	c.holdDone = nil
	c.log.Info("redis sentinel failover over; writes resume", "master", c.master, "reason", why, "held", time.Since(c.holdFrom).Round(time.Millisecond).String())
}
