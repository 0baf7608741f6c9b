package cluster_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/reverbgo/reverbgo/channels"
	"github.com/reverbgo/reverbgo/channels/channelstest"
	"github.com/reverbgo/reverbgo/internal/cluster"
	"github.com/reverbgo/reverbgo/internal/testutil"
	"github.com/reverbgo/reverbgo/ws"
)

// toldLog records what a node told its recovery channels' subscribers (cluster.Told).
type toldLog struct {
	mu  sync.Mutex
	all []string
}

func (l *toldLog) told(app, ch, reason, epoch string, serial uint64) {
	l.mu.Lock()
	l.all = append(l.all, fmt.Sprintf("%s %s %s %d", ch, reason, epoch, serial))
	l.mu.Unlock()
}

func (l *toldLog) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.all...)
}

// recoveryNode is one node of a recovery cluster: its registry, broker and what it told.
type recoveryNode struct {
	reg  *channels.Registry
	told *toldLog
}

// recoveryPair builds two interest-routed nodes with the cluster History, as cmd/reverbgo
// wires them (SetRecovery with every channel a recovery channel of lim): node 0 talks to
// Redis directly, node 1 through a fault proxy.
func recoveryPair(t *testing.T, lim channels.HistoryLimits) (pub, sub recoveryNode, direct *redis.Client, keys *cluster.KeySpace, hist *cluster.RedisHistory, proxy *testutil.Proxy) {
	t.Helper()
	direct, via, proxy := viaProxy(t)
	keys = cluster.NewKeySpace("test:"+uuid.NewString(), true)
	hist = cluster.NewRedisHistory(direct, keys)
	if err := cluster.LoadScripts(context.Background(), direct); err != nil {
		t.Fatal(err)
	}
	return newRecoveryNode(t, direct, keys, lim), newRecoveryNode(t, via, keys, lim), direct, keys, hist, proxy
}

// newRecoveryNode is one more node of the cluster named by keys, on rdb.
func newRecoveryNode(t *testing.T, rdb redis.UniversalClient, keys *cluster.KeySpace, lim channels.HistoryLimits) recoveryNode {
	t.Helper()
	b, err := cluster.NewRedisBroker(context.Background(), rdb, cluster.RedisBrokerOptions{
		Channel: keys.Channel(), Keys: keys, History: cluster.NewRedisHistory(rdb, keys),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	n := recoveryNode{reg: channels.NewRegistry(channels.Options{Broker: b}), told: &toldLog{}}
	b.SetRecovery(func(string, string) (channels.HistoryLimits, bool) { return lim, true }, n.told.told)
	b.Start(n.reg.DeliverLocal)
	<-b.Dialled()
	return n
}

// subscribeAt subscribes sink on node n as pusher does: once routed, the channel's position
// is read and seeded.
func subscribeAt(t *testing.T, n recoveryNode, hist *cluster.RedisHistory, lim channels.HistoryLimits, ch string, sink channels.Subscriber) channels.Position {
	t.Helper()
	ctx := context.Background()
	n.reg.Subscribe("app", ch, sink)
	if err := n.reg.AwaitRouted(ctx, "app", ch); err != nil {
		t.Fatal(err)
	}
	pos, err := hist.Position(ctx, "app", ch, lim)
	if err != nil {
		t.Fatal(err)
	}
	n.reg.SeedPosition("app", ch, pos)
	return pos
}

// publishRecovery publishes data to ch through n and waits for Redis to have it.
func publishRecovery(t *testing.T, n recoveryNode, lim channels.HistoryLimits, ch, data, except string) {
	t.Helper()
	frame := ws.TextFrame([]byte(`{"event":"e","channel":"` + ch + `","data":"` + data + `"}`))
	lim2 := lim
	if err := n.reg.PublishAcked(context.Background(), []channels.Message{{AppID: "app", Channel: ch, Frame: frame, Except: except, Cacheable: true, Recovery: &lim2}}); err != nil {
		t.Fatal(err)
	}
}

// serials are the serials of the event frames a sink received, in order (0 for a frame
// without one, such as a told frame of pusher's).
func serials(frames []string) []uint64 {
	out := make([]uint64, 0, len(frames))
	for _, f := range frames {
		out = append(out, channels.SerialOf([]byte(f)))
	}
	return out
}

func equalSerials(got []uint64, want ...uint64) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}

// TestRecoveryGapOfADeafSubscription (issue 31, cause 1): node 1's subscription connection
// stops delivering; event 2, published through node 0 meanwhile, never reaches node 1
// through pub/sub. Once the connection is re-made, node 1 reads what it missed from the
// history: its subscriber gets 1, 2, 3 in order, and nothing is told. Before, it got 1, 3.
func TestRecoveryGapOfADeafSubscription(t *testing.T) {
	lim := channels.HistoryLimits{Size: 100, TTL: time.Minute}
	pub, sub, _, _, hist, proxy := recoveryPair(t, lim)
	sink := &channelstest.Sink{ID: "1.1"}
	subscribeAt(t, sub, hist, lim, "orders", sink)
	publishRecovery(t, pub, lim, "orders", "1", "")
	sink.WaitFor(t, "event 1", func(f []string) bool { return len(f) == 1 })
	if n := proxy.Deafen(testutil.IsSubscriber); n == 0 {
		t.Fatal("no subscription connection went through the proxy")
	}
	publishRecovery(t, pub, lim, "orders", "2", "")
	// The probe finds the connection deaf and re-makes it; event 3 follows once it is live.
	testutil.WaitForWithin(t, 10*time.Second, "event 2 read from the history", func() bool { return len(sink.Frames()) >= 2 })
	publishRecovery(t, pub, lim, "orders", "3", "")
	sink.WaitFor(t, "event 3", func(f []string) bool { return len(f) >= 3 })
	if got := serials(sink.Frames()); !equalSerials(got, 1, 2, 3) {
		t.Fatalf("serials %v, want 1 2 3", got)
	}
	if told := sub.told.get(); len(told) != 0 {
		t.Fatalf("told %q of a gap the history filled", told)
	}
}

// afterLostAppend publishes 1, 2 and 3 through pub to a channel sink subscribes to on sub,
// then puts the channel's keys back as they were at serial 2 (a replica promoted without
// the last append, as DUMP/RESTORE makes it). It returns the position sub was answered.
func afterLostAppend(t *testing.T, pub, sub recoveryNode, direct *redis.Client, keys *cluster.KeySpace, hist *cluster.RedisHistory, lim channels.HistoryLimits, sink *channelstest.Sink) channels.Position {
	t.Helper()
	ctx := context.Background()
	before := subscribeAt(t, sub, hist, lim, "orders", sink)
	publishRecovery(t, pub, lim, "orders", "1", "")
	publishRecovery(t, pub, lim, "orders", "2", "")
	sink.WaitFor(t, "events 1, 2", func(f []string) bool { return len(f) == 2 })
	serialKey, _, list, _ := keys.HistoryKeys("app", "orders")
	snapshot := map[string]string{}
	for _, k := range []string{serialKey, list} {
		d, err := direct.Dump(ctx, k).Result()
		if err != nil {
			t.Fatal(k, err)
		}
		snapshot[k] = d
	}
	publishRecovery(t, pub, lim, "orders", "3", "")
	sink.WaitFor(t, "event 3", func(f []string) bool { return len(f) == 3 })
	for k, d := range snapshot {
		if err := direct.RestoreReplace(ctx, k, 0, d).Err(); err != nil {
			t.Fatal(err)
		}
	}
	return before
}

// TestRecoveryAppendsLostInAFailover (issue 31, cause 2): Redis answered serials 1..3, then
// lost the last append (a replica promoted without it: the keys as they were at serial 2,
// restored with DUMP/RESTORE). The next publish must not give serial 3 to a second event:
// the publishing node saw 3, so the serial moves on to 4 under the same epoch and the
// history marks 3 as lost. The subscriber, which had 3, gets 4 next with nothing told; a
// resume that needs 3 is told too_old, one from 3 gets 4. Before, the publish was given
// serial 3 again and the subscriber dropped it as already seen.
func TestRecoveryAppendsLostInAFailover(t *testing.T) {
	ctx := context.Background()
	lim := channels.HistoryLimits{Size: 100, TTL: time.Minute}
	pub, sub, direct, keys, hist, _ := recoveryPair(t, lim)
	sink := &channelstest.Sink{ID: "1.1"}
	before := afterLostAppend(t, pub, sub, direct, keys, hist, lim, sink)
	publishRecovery(t, pub, lim, "orders", "4", "")
	sink.WaitFor(t, "the event after the lost append", func(f []string) bool { return len(f) == 4 })
	if got := serials(sink.Frames()); !equalSerials(got, 1, 2, 3, 4) {
		t.Fatalf("serials %v, want 1 2 3 4: serial 3 given once", got)
	}
	if told := sub.told.get(); len(told) != 0 {
		t.Fatalf("told %q to a subscriber that missed nothing", told)
	}
	if _, _, complete, err := hist.Since(ctx, "app", "orders", lim, 2); err != nil || complete {
		t.Fatalf("a resume from 2 (needs the lost 3): complete %v, %v; want too_old", complete, err)
	}
	pos, evs, complete, err := hist.Since(ctx, "app", "orders", lim, 3)
	if err != nil || !complete || len(evs) != 1 || evs[0].Serial != 4 || pos.Epoch != before.Epoch {
		t.Fatalf("a resume from 3: %+v %d events %v %v", pos, len(evs), complete, err)
	}
}

// TestRecoveryReusedSerialSeenByASubscriber (issue 31, cause 2): as above, but the publish
// after the lost append goes through a node that never saw the channel, so it cannot tell
// Redis lost anything and serial 3 is given to a second event. The subscriber's node sees
// serial 3 come back with another frame: it rotates the channel's epoch and tells its
// subscriber, and the next event arrives under the new epoch. Before, the second serial 3
// was dropped as already seen, in silence.
func TestRecoveryReusedSerialSeenByASubscriber(t *testing.T) {
	ctx := context.Background()
	lim := channels.HistoryLimits{Size: 100, TTL: time.Minute}
	pub, sub, direct, keys, hist, _ := recoveryPair(t, lim)
	sink := &channelstest.Sink{ID: "1.1"}
	before := afterLostAppend(t, pub, sub, direct, keys, hist, lim, sink)
	stranger := newRecoveryNode(t, direct, keys, lim)
	publishRecovery(t, stranger, lim, "orders", "3bis", "") // given serial 3 again
	testutil.WaitFor(t, "the channel's new epoch", func() bool {
		pos, err := hist.Position(ctx, "app", "orders", lim)
		return err == nil && pos.Epoch != before.Epoch
	})
	pos, _ := hist.Position(ctx, "app", "orders", lim)
	testutil.WaitFor(t, "told", func() bool { return len(sub.told.get()) == 1 })
	publishRecovery(t, stranger, lim, "orders", "4", "")
	sink.WaitFor(t, "the event after the rotation", func(f []string) bool { return len(f) == 4 })
	if got := serials(sink.Frames()); !equalSerials(got, 1, 2, 3, 1) {
		t.Fatalf("serials %v, want 1 2 3 then 1 of the new epoch", got)
	}
	if told := sub.told.get(); told[0] != "orders epoch_changed "+pos.Epoch+" 0" {
		t.Fatalf("told %q, want the new epoch %s from serial 0", told, pos.Epoch)
	}
}

// TestRecoveryEpochAfterTTLExpiry (issue 31, cause 2): a channel's history expired; its next
// event is serial 1 of a new epoch. A subscriber that had seen serial 1 of the old epoch is
// told of the new epoch before it gets the new serial 1, also when that first event was
// published excluding it (toOthers()): it is told, then gets serial 2. Before, nothing was
// told: a client at serial 1 dropped the new 1 (and, after a toOthers() first event, the
// client's module dropped 2..N).
func TestRecoveryEpochAfterTTLExpiry(t *testing.T) {
	ctx := context.Background()
	lim := channels.HistoryLimits{Size: 100, TTL: time.Second}
	for _, tc := range []struct {
		name   string
		except string
		want   []uint64
	}{{"first event to everyone", "", []uint64{1, 1, 2}}, {"first event toOthers()", "1.1", []uint64{1, 2}}} {
		t.Run(tc.name, func(t *testing.T) {
			pub, sub, direct, keys, hist, _ := recoveryPair(t, lim)
			sink := &channelstest.Sink{ID: "1.1"}
			subscribeAt(t, sub, hist, lim, "orders", sink)
			publishRecovery(t, pub, lim, "orders", "old", "")
			sink.WaitFor(t, "serial 1", func(f []string) bool { return len(f) == 1 })
			_, epochKey, _, _ := keys.HistoryKeys("app", "orders")
			testutil.WaitForWithin(t, 5*time.Second, "the history's expiry", func() bool {
				return direct.Exists(ctx, epochKey).Val() == 0
			})
			publishRecovery(t, pub, lim, "orders", "new1", tc.except)
			publishRecovery(t, pub, lim, "orders", "new2", "")
			sink.WaitFor(t, "the new epoch's events", func(f []string) bool { return len(f) == len(tc.want) })
			if got := serials(sink.Frames()); !equalSerials(got, tc.want...) {
				t.Fatalf("serials %v, want %v", got, tc.want)
			}
			pos, _ := hist.Position(ctx, "app", "orders", lim)
			if told := sub.told.get(); len(told) != 1 || told[0] != "orders epoch_changed "+pos.Epoch+" 0" {
				t.Fatalf("told %q, want the new epoch %s from serial 0", told, pos.Epoch)
			}
		})
	}
}

// TestPublishAckedOrderAcrossNodes (issue 31, cause 3): an event published after another's
// publish returned is delivered after it on every node, the publishing nodes' own
// subscribers included. Workers publish "a" through node 0, then "b" through node 1, on
// their own channels; subscribers on both nodes must see a0 b0 a1 b1 ... Before, node 1
// delivered its own "b" at once, ahead of an "a" still on its way from Redis.
func TestPublishAckedOrderAcrossNodes(t *testing.T) {
	lim := channels.HistoryLimits{Size: 100, TTL: time.Minute}
	pub, sub, _, _, hist, _ := recoveryPair(t, lim)
	nodes := []recoveryNode{pub, sub}
	const workers, rounds = 8, 125
	sinks := make([][2]*channelstest.Sink, workers)
	for w := range workers {
		for i, n := range nodes {
			sinks[w][i] = &channelstest.Sink{ID: fmt.Sprintf("%d.%d", i, w)}
			subscribeAt(t, n, hist, lim, "w"+strconv.Itoa(w), sinks[w][i])
		}
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ch := "w" + strconv.Itoa(w)
			for r := range rounds {
				for i, n := range nodes {
					f := []byte(fmt.Sprintf("%c%d", 'a'+i, r))
					if err := n.reg.PublishAcked(ctx, []channels.Message{{AppID: "app", Channel: ch, Frame: f}}); err != nil {
						t.Error(err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	for w := range workers {
		for i := range nodes {
			s := sinks[w][i]
			s.WaitFor(t, "every round", func(f []string) bool { return len(f) == 2*rounds })
			for j, f := range s.Frames() {
				if want := fmt.Sprintf("%c%d", 'a'+j%2, j/2); f != want {
					t.Fatalf("node %d, channel w%d: frame %d is %q, want %q", i, w, j, f, want)
				}
			}
		}
	}
}

// TestRecoveryEventRetriedAfterNoScript (issue 31): a Redis that lost its script cache
// answers a batch's recovery append NOSCRIPT while the batch's later plain publish runs; the
// receivers have then seen the later sequence number. The retried append must still reach
// the other node's subscriber: it is sent under a new sequence number. Before, it was
// appended and published under its old one and every receiver dropped it as already seen.
func TestRecoveryEventRetriedAfterNoScript(t *testing.T) {
	ctx := context.Background()
	lim := channels.HistoryLimits{Size: 100, TTL: time.Minute}
	pub, sub, direct, _, hist, _ := recoveryPair(t, lim)
	sink, plain := &channelstest.Sink{ID: "1.1"}, &channelstest.Sink{ID: "1.1"}
	subscribeAt(t, sub, hist, lim, "rec", sink)
	sub.reg.Subscribe("app", "plain", plain)
	if err := sub.reg.AwaitRouted(ctx, "app", "plain"); err != nil {
		t.Fatal(err)
	}
	if err := direct.ScriptFlush(ctx).Err(); err != nil { // the scripts are gone (a restart, a failover)
		t.Fatal(err)
	}
	// Writes wait a moment, so the next publishes queue behind the first and go in one batch.
	if err := direct.Do(ctx, "CLIENT", "PAUSE", "300", "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	_ = pub.reg.PublishAll(ctx, []channels.Message{{AppID: "app", Channel: "plain", Frame: []byte("x")}})
	time.Sleep(50 * time.Millisecond) // the writer is now waiting on the paused Redis
	recLim := lim
	if err := pub.reg.PublishAll(ctx, []channels.Message{
		{AppID: "app", Channel: "rec", Frame: ws.TextFrame([]byte(`{"event":"e","channel":"rec","data":"1"}`)), Cacheable: true, Recovery: &recLim},
		{AppID: "app", Channel: "plain", Frame: []byte("y")},
	}); err != nil {
		t.Fatal(err)
	}
	plain.WaitFor(t, "the plain publishes", func(f []string) bool { return len(f) == 2 })
	sink.WaitFor(t, "the recovery event, retried after NOSCRIPT", func(f []string) bool { return len(f) == 1 })
	if got := serials(sink.Frames()); !equalSerials(got, 1) {
		t.Fatalf("serials %v, want 1", got)
	}
}
