package cluster_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/reverbgo/reverbgo/channels"
	"github.com/reverbgo/reverbgo/channels/channelstest"
	"github.com/reverbgo/reverbgo/internal/cluster"
	"github.com/reverbgo/reverbgo/internal/redisx"
	"github.com/reverbgo/reverbgo/internal/testutil"
	"github.com/reverbgo/reverbgo/ws"
)

// heldBroker is a broker with a history on a Sentinel topology of miniredis servers: the
// master the failover client talks to, and two "sentinels" whose messages the test
// publishes.
type heldBroker struct {
	rc             *redisx.Client
	b              *cluster.RedisBroker
	reg            *channels.Registry
	hist           *cluster.RedisHistory
	keys           *cluster.KeySpace
	master, s1, s2 *miniredis.Miniredis
	masterHostPort string
}

func newHeldBroker(t *testing.T) *heldBroker {
	t.Helper()
	ctx := context.Background()
	h := &heldBroker{master: miniredis.RunT(t), s1: miniredis.RunT(t), s2: miniredis.RunT(t)}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	h.rc = redisx.New(redis.NewClient(&redis.Options{Addr: h.master.Addr()}),
		&redisx.SentinelOptions{Addrs: []string{h.s1.Addr(), h.s2.Addr()}, MasterName: "m"}, quiet)
	t.Cleanup(func() { _ = h.rc.Close() })
	for _, s := range []*miniredis.Miniredis{h.s1, h.s2} {
		testutil.WaitFor(t, "the watcher listening", func() bool {
			return s.PubSubNumSub("+try-failover")["+try-failover"] == 1 && s.PubSubNumPat() == 1
		})
	}
	host, port, _ := net.SplitHostPort(h.master.Addr())
	h.masterHostPort = host + " " + port
	h.keys = cluster.NewKeySpace("test:"+uuid.NewString(), true)
	h.hist = cluster.NewRedisHistory(h.rc, h.keys)
	if err := cluster.LoadScripts(ctx, h.rc); err != nil {
		t.Fatal(err)
	}
	b, err := cluster.NewRedisBroker(ctx, h.rc, cluster.RedisBrokerOptions{Channel: h.keys.Channel(), Keys: h.keys, Client: h.rc, History: h.hist, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	h.b = b
	t.Cleanup(func() { _ = b.Close() })
	h.reg = channels.NewRegistry(channels.Options{Broker: b})
	b.Start(h.reg.DeliverLocal)
	return h
}

var holdLimits = channels.HistoryLimits{Size: 10, TTL: time.Minute}

func (h *heldBroker) publish(ctx context.Context, ch, data string) error {
	frame := ws.TextFrame([]byte(`{"event":"e","channel":"` + ch + `","data":"` + data + `"}`))
	return h.reg.PublishAcked(ctx, []channels.Message{{AppID: "app", Channel: ch, Frame: frame, Cacheable: true, Recovery: &holdLimits}})
}

// promote starts a new master and has a sentinel announce the switch to it.
func (h *heldBroker) promote(t *testing.T) {
	promoted := miniredis.RunT(t)
	ph, pp, _ := net.SplitHostPort(promoted.Addr())
	h.s1.Publish("+switch-master", "m "+h.masterHostPort+" "+ph+" "+pp)
}

// holding reports whether the client holds writes now.
func holding(rc *redisx.Client) bool {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := rc.AwaitWritable(ctx)
	return err != nil
}

// While a sentinel runs a failover of the master the broker's writer holds its pipelines:
// a PublishAcked whose caller gives up meanwhile (the API's 503) is never sent, one that
// waits is sent, to the new master, once a sentinel names it. Before, the writer sent both at
// once to the master being demoted.
func TestWriterHoldsPublishesDuringASentinelFailover(t *testing.T) {
	ctx := context.Background()
	h := newHeldBroker(t)
	if err := h.publish(ctx, "private-before", "0"); err != nil {
		t.Fatal(err)
	}
	h.s2.Publish("+try-failover", "master m "+h.masterHostPort)
	testutil.WaitFor(t, "writes held", func() bool { return holding(h.rc) })

	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if err := h.publish(short, "private-gone", "1"); !errors.Is(err, channels.ErrPublishTimeout) {
		t.Fatalf("a publish whose caller gave up during the hold answered %v, want ErrPublishTimeout", err)
	}
	kept := make(chan error, 1)
	go func() { kept <- h.publish(ctx, "private-kept", "2") }()
	select {
	case err := <-kept:
		t.Fatalf("a publish was accepted during the hold (%v)", err)
	case <-time.After(300 * time.Millisecond): // it must still be waiting
	}

	h.promote(t)
	select {
	case err := <-kept:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the switch did not release the held publish")
	}
	old := redis.NewClient(&redis.Options{Addr: h.master.Addr()})
	t.Cleanup(func() { _ = old.Close() })
	demoted := cluster.NewRedisHistory(old, h.keys)
	for ch, want := range map[string]int{"private-before": 1, "private-gone": 0, "private-kept": 0} {
		_, evs, _, err := demoted.Since(ctx, "app", ch, holdLimits, 0)
		if err != nil || len(evs) != want {
			t.Fatalf("%s: the demoted master has %d events (%v), want %d", ch, len(evs), err, want)
		}
	}
	for ch, want := range map[string]int{"private-gone": 0, "private-kept": 1} {
		_, evs, _, err := h.hist.Since(ctx, "app", ch, holdLimits, 0)
		if err != nil || len(evs) != want {
			t.Fatalf("%s: the new master has %d events (%v), want %d", ch, len(evs), err, want)
		}
	}
}

// Close during a hold returns within its drain bound, and the publishes still held are
// answered ErrBrokerClosed, not sent.
func TestBrokerClosesDuringASentinelFailover(t *testing.T) {
	ctx := context.Background()
	h := newHeldBroker(t)
	h.s1.Publish("+try-failover", "master m "+h.masterHostPort)
	testutil.WaitFor(t, "writes held", func() bool { return holding(h.rc) })
	held := make(chan error, 1)
	go func() { held <- h.publish(ctx, "private-held", "1") }()
	select {
	case err := <-held:
		t.Fatalf("a publish was accepted during the hold (%v)", err)
	case <-time.After(200 * time.Millisecond):
	}
	start := time.Now()
	_ = h.b.Close()
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("Close took %v during a hold", took)
	}
	select {
	case err := <-held:
		if !errors.Is(err, cluster.ErrBrokerClosed) {
			t.Fatalf("the held publish answered %v, want ErrBrokerClosed", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the held publish was never answered")
	}
}

// A publish held through a Sentinel failover reaches this node's subscriber of a plain
// channel: the writer sends it once the node's subscriptions are on the new master. Before,
// the switch released it at once, it reached the new master before the node had subscribed
// there, and pub/sub delivered it to nobody (the API had answered 200).
func TestHeldPublishReachesSubscribersAfterTheSwitch(t *testing.T) {
	ctx := context.Background()
	h := newHeldBroker(t)
	// The watchers name the master first (as a sentinel's answer does at start), so that the
	// switch below moves the pub/sub plane, subscriptions included.
	h.s1.Publish("+switch-master", "m "+h.masterHostPort+" "+h.masterHostPort)
	testutil.WaitFor(t, "the plane on the named master", func() bool { return h.rc.Plane() != h.rc.UniversalClient })
	plain := &channelstest.Sink{ID: "1.1"}
	h.reg.Subscribe("app", "plain", plain)
	if err := h.reg.AwaitRouted(ctx, "app", "plain"); err != nil {
		t.Fatal(err)
	}
	h.s2.Publish("+try-failover", "master m "+h.masterHostPort)
	testutil.WaitFor(t, "writes held", func() bool { return holding(h.rc) })
	acked := make(chan error, 1)
	go func() {
		acked <- h.reg.PublishAcked(ctx, []channels.Message{{AppID: "app", Channel: "plain", Frame: []byte("x")}})
	}()
	select {
	case err := <-acked:
		t.Fatalf("a publish was accepted during the hold (%v)", err)
	case <-time.After(200 * time.Millisecond): // queued behind the hold
	}
	h.promote(t)
	select {
	case err := <-acked:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the switch did not release the held publish")
	}
	plain.WaitFor(t, "the held publish delivered from the new master", func(f []string) bool { return len(f) == 1 })
}
