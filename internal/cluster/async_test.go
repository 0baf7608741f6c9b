package cluster_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/reverbgo/reverbgo/channels"
	"github.com/reverbgo/reverbgo/channels/channelstest"
	"github.com/reverbgo/reverbgo/internal/cluster"
)

// fakeSub records the frames a registry delivers to it.
type fakeSub struct {
	id string
	ch chan []byte
}

func (f *fakeSub) SocketID() string { return f.id }
func (f *fakeSub) Send(b []byte)    { f.ch <- b }

// PublishNoWait delivers on this node before it returns and reaches the other node in order,
// through the broker's queue.
func TestPublishNoWaitReachesOtherNodesInOrder(t *testing.T) {
	mr := miniredis.RunT(t)
	regs := make([]*channels.Registry, 2)
	subs := make([]*fakeSub, 2)
	for i := range regs {
		rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
		t.Cleanup(func() { _ = rdb.Close() })
		b, err := cluster.NewRedisBroker(context.Background(), rdb, cluster.RedisBrokerOptions{Channel: "async"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		regs[i] = channels.NewRegistry(channels.Options{Broker: b})
		b.Start(regs[i].DeliverLocal)
		subs[i] = &fakeSub{id: "s" + strconv.Itoa(i), ch: make(chan []byte, 1000)}
		channelstest.Subscribe(t, regs[i], "app", "room", subs[i]) // routed, as a client is told
	}
	if !regs[0].Remote() {
		t.Fatal("a registry over a RedisBroker must report Remote")
	}
	const n = 500
	for i := range n {
		if err := regs[0].PublishNoWait(channels.Message{AppID: "app", Channel: "room", Frame: []byte(strconv.Itoa(i))}); err != nil {
			t.Fatal(err)
		}
		select { // local delivery has happened when PublishNoWait returns
		case f := <-subs[0].ch:
			if string(f) != strconv.Itoa(i) {
				t.Fatalf("local frame %q, want %d", f, i)
			}
		default:
			t.Fatalf("message %d not delivered locally before PublishNoWait returned", i)
		}
	}
	for i := range n {
		select {
		case f := <-subs[1].ch:
			if string(f) != strconv.Itoa(i) {
				t.Fatalf("remote frame %q, want %d (order lost)", f, i)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("remote node got %d of %d", i, n)
		}
	}
}

func TestMemoryRegistryIsNotRemote(t *testing.T) {
	r := channels.NewRegistry(channels.Options{})
	if r.Remote() || r.SubscribeWaits("private-toolmark.x") {
		t.Fatal("an in-memory registry must never be Remote")
	}
	s := &fakeSub{id: "a", ch: make(chan []byte, 1)}
	r.Subscribe("app", "c", s)
	if err := r.PublishNoWait(channels.Message{AppID: "app", Channel: "c", Frame: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if len(s.ch) != 1 {
		t.Fatal("PublishNoWait on the memory broker did not deliver at once")
	}
}
