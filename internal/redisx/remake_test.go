package redisx_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/reverbgo/reverbgo/internal/redisx"
	"github.com/reverbgo/reverbgo/internal/testutil"
)

// TestARemakeLosesNothingOfALiveConnection: a re-make of a connection that was alive after
// all (a probe answered late on a loaded node: the cluster soak lost 16 deliveries to one)
// makes the new subscription before it lets go of the old one, so every message published
// meanwhile arrives (some twice: the owner drops repeats). Breaking first lost every message
// published between the close and the new SUBSCRIBE.
func TestARemakeLosesNothingOfALiveConnection(t *testing.T) {
	rdb := testutil.RealRedis(t)
	c := redisx.New(rdb, nil, nil)
	t.Cleanup(c.CloseSubs)
	ch := "test:" + uuid.NewString()
	var mu sync.Mutex
	got := map[int]bool{}
	s := c.NewSub(redisx.SubOptions{Name: "t", Anchor: ch + ":anchor", ProbeEvery: -1,
		Want: func() []string { return []string{ch} },
		OnMessage: func(_, p string) {
			n, _ := strconv.Atoi(p)
			mu.Lock()
			got[n] = true
			mu.Unlock()
		}})
	defer s.Close()
	waitUp := func() {
		deadline := time.Now().Add(5 * time.Second)
		for !s.Up() {
			if time.Now().After(deadline) {
				t.Fatalf("the subscription never came up (down %v, batches %d)", s.Down(), s.Batches())
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitUp()
	ctx := context.Background()
	stop := make(chan struct{})
	published := make(chan int)
	go func() {
		n := 0
		defer func() { published <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if rdb.Publish(ctx, ch, strconv.Itoa(n)).Err() == nil {
				n++
			}
		}
	}()
	for range 20 {
		s.Remake(redisx.CauseProbe)
		time.Sleep(5 * time.Millisecond) // the re-make is under way
		waitUp()
	}
	close(stop)
	n := <-published
	if err := rdb.Publish(ctx, ch, "-1").Err(); err != nil { // a last one, to know all arrived
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		done := got[-1]
		mu.Unlock()
		if done || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	var lost []int
	for i := range n {
		if !got[i] {
			lost = append(lost, i)
		}
	}
	if len(lost) > 0 {
		t.Fatalf("%d of %d messages published during 20 re-makes were lost (first: %v)", len(lost), n, lost[:min(len(lost), 5)])
	}
}
