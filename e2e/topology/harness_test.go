package topology

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/reverbgo/reverbgo/internal/pusherclient"
	"github.com/reverbgo/reverbgo/internal/testutil"
)

const (
	appID, appKey, appSecret = "app1", "app1-key", "app1-secret"
	subscribers              = 60               // one private channel each, split over nodes 1 and 3
	rate                     = 200              // events per second through node 2's HTTP API
	warmup                   = 5 * time.Second  // publishing before the fault starts
	settle                   = 2 * time.Second  // after the moment, from which nothing may be lost
	tail                     = 12 * time.Second // publishing after the moment
	maxEvents                = 40 * rate * 2    // room for the longest run
)

// record is what the harness knows of one event (index = sequence number).
type record struct {
	sentAt   atomic.Int64 // UnixNano when the publish was sent; 0 = never sent
	status   atomic.Int32 // HTTP status; -1 = the request failed
	got      atomic.Int32 // deliveries to its subscriber
	gotAt    atomic.Int64 // UnixNano of the first delivery
	misroute atomic.Int32 // deliveries on another channel than its own
}

// harness is three reverbgo processes on one topology, the subscribers and the publisher.
type harness struct {
	t       *testing.T
	top     *testutil.Topology
	nodes   []*testutil.Process
	clients []*pusherclient.Listener
	recs    []record
	sent    atomic.Int64 // events sent (the next sequence number)
	hc      *http.Client
	pubWG   sync.WaitGroup
}

func channelOf(seq int) string { return "private-faults-" + strconv.Itoa(seq%subscribers) }

// newHarness starts three nodes with scaling (the topology's scaling keys in yaml flow
// style, e.g. `redis_cluster: {addrs: [...]}`) and the subscribers, half on node 1 and half
// on node 3, each subscribed to its own private channel.
func newHarness(t *testing.T, bin string, top *testutil.Topology, scalingKeys string) *harness {
	t.Helper()
	h := &harness{t: t, top: top, recs: make([]record, maxEvents), hc: &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: 512, MaxConnsPerHost: 512},
	}}
	t.Cleanup(h.hc.CloseIdleConnections)
	channel := "faults" + uuid.NewString()[:8]
	for range 3 {
		addr := testutil.FreeAddr(t)
		host, port, _ := net.SplitHostPort(addr)
		cfg := fmt.Sprintf("server: {host: %s, port: %s, drain_delay: 0, drain_period: 0}\napps:\n  - {app_id: %s, key: %s, secret: %s}\n"+
			"scaling: {enabled: true, channel: %s, %s}\n", host, port, appID, appKey, appSecret, channel, scalingKeys)
		h.nodes = append(h.nodes, testutil.StartReverbgo(t, bin, addr, cfg))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range subscribers {
		node := h.nodes[0]
		if i%2 == 1 {
			node = h.nodes[2]
		}
		want := channelOf(i)
		c, err := pusherclient.DialListener(ctx, node.URL, appKey, pusherclient.Options{}, func(ev pusherclient.Frame) { h.deliver(want, ev) })
		if err != nil {
			t.Fatalf("subscriber %d: %v", i, err)
		}
		t.Cleanup(func() { _ = c.Close() })
		if err := c.Subscribe(ctx, pusherclient.App{Key: appKey, Secret: appSecret}, want, ""); err != nil {
			t.Fatalf("subscriber %d: %v", i, err)
		}
		h.clients = append(h.clients, c)
	}
	return h
}

type payload struct {
	Seq int   `json:"seq"`
	T   int64 `json:"t"` // publish time, UnixNano
}

// deliver records one event a subscriber of channel want received.
func (h *harness) deliver(want string, ev pusherclient.Frame) {
	if ev.Event != "fault-test" {
		return
	}
	var p payload
	if json.Unmarshal([]byte(ev.Str()), &p) != nil || p.Seq < 0 || p.Seq >= len(h.recs) {
		return
	}
	r := &h.recs[p.Seq]
	if ev.Channel != want || channelOf(p.Seq) != want {
		r.misroute.Add(1)
		return
	}
	if r.got.Add(1) == 1 {
		r.gotAt.Store(time.Now().UnixNano())
	}
}

// publish sends rate events per second through node 2 until ctx ends, each from its own
// goroutine so a publish that waits (the broker queues them during a switch) does not hold
// back the next.
func (h *harness) publish(ctx context.Context) {
	tick := time.NewTicker(time.Second / rate)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		seq := int(h.sent.Load())
		if seq >= len(h.recs) {
			return
		}
		h.sent.Add(1)
		now := time.Now()
		h.recs[seq].sentAt.Store(now.UnixNano())
		data, _ := json.Marshal(payload{Seq: seq, T: now.UnixNano()})
		h.pubWG.Add(1)
		go func() {
			defer h.pubWG.Done()
			st, err := pusherclient.Trigger(context.Background(), h.hc, h.nodes[1].URL, pusherclient.App{ID: appID, Key: appKey, Secret: appSecret}, channelOf(seq), "fault-test", string(data))
			if err != nil {
				st = -1
			}
			h.recs[seq].status.Store(int32(st))
		}()
	}
}

// drain waits for the publishes in flight, then up to d for every accepted event to arrive.
func (h *harness) drain(d time.Duration) {
	h.pubWG.Wait()
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		all := true
		for i := range int(h.sent.Load()) {
			r := &h.recs[i]
			if r.status.Load() == http.StatusOK && r.got.Load() == 0 {
				all = false
				break
			}
		}
		if all {
			return
		}
	}
}

// window is what happened to the events sent in one period.
type window struct {
	published, accepted, lost, notAccepted int
	lastLost                               time.Time
}

func (w window) String() string {
	return fmt.Sprintf("%d/%d", w.lost, w.accepted)
}

// result splits the run at faultStart and moment+settle.
type result struct {
	before, during, after window
	duplicates, misrouted int
	dropped               int
	firstDelivery         time.Duration // from the moment to the first delivery of an event sent after it; -1 = none
}

func (h *harness) result(faultStart, moment time.Time) result {
	res := result{firstDelivery: -1}
	from := moment.Add(settle)
	var first int64
	for i := range int(h.sent.Load()) {
		r := &h.recs[i]
		sent := time.Unix(0, r.sentAt.Load())
		w := &res.after
		switch {
		case sent.Before(faultStart):
			w = &res.before
		case sent.Before(from):
			w = &res.during
		}
		w.published++
		if g := r.got.Load(); g > 1 {
			res.duplicates += int(g - 1)
		}
		res.misrouted += int(r.misroute.Load())
		if r.status.Load() != http.StatusOK {
			w.notAccepted++
			continue
		}
		w.accepted++
		if r.got.Load() == 0 {
			w.lost++
			if sent.After(w.lastLost) {
				w.lastLost = sent
			}
		} else if at := r.gotAt.Load(); !sent.Before(moment) && (first == 0 || at < first) {
			first = at
		}
	}
	if first != 0 {
		res.firstDelivery = time.Unix(0, first).Sub(moment)
	}
	for _, c := range h.clients {
		if c.Dropped() {
			res.dropped++
		}
	}
	return res
}
