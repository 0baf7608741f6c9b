package pusher

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/reverbgo/reverbgo/channels"
	"github.com/reverbgo/reverbgo/config"
	"github.com/reverbgo/reverbgo/internal/cluster"
)

// stallableNode is one scaled node with recovery on every channel on its own redis-server,
// which the test stops (SIGSTOP: no RST, silence) and resumes.
func stallableNode(t *testing.T, publishTimeout float64) (*tserver, func(), func()) {
	t.Helper()
	addr, proc := startRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	ch := "stall:" + uuid.NewString()
	keys := cluster.NewKeySpace(ch, true)
	hist := cluster.NewRedisHistory(rdb, keys)
	if err := cluster.LoadScripts(ctx, rdb); err != nil {
		t.Fatal(err)
	}
	broker, err := cluster.NewRedisBroker(ctx, rdb, cluster.RedisBrokerOptions{Channel: ch, Keys: keys, Logger: quiet, History: hist})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = broker.Close() })
	reg := channels.NewRegistry(channels.Options{Broker: broker})
	ts := newServer(t, withRecovery(100, "orders*"), withOptions(func(o *Options) { o.Registry, o.History = reg, hist }),
		func(s *setup) { s.cfg.Scaling.PublishTimeout = publishTimeout })
	broker.SetRecovery(ts.s.RecoveryLimits, ts.s.ToldGap)
	broker.Start(reg.DeliverLocal)
	<-broker.Dialled()
	stop := func() { _ = proc.Process.Signal(syscall.SIGSTOP) }
	cont := func() { _ = proc.Process.Signal(syscall.SIGCONT) }
	return ts, stop, cont
}

// TestPublishDuringARedisOutage (issue 31, cause 3): while Redis does not answer, an API
// publish returns ErrPublishTimeout (the API's 503 with Retry-After) within
// scaling.publish_timeout, and the event is never delivered afterwards: it was withdrawn,
// so the caller's retry duplicates nothing. Before, the publish returned nil at once (a
// 200) for an event that had not reached Redis.
func TestPublishDuringARedisOutage(t *testing.T) {
	for _, ch := range []string{"news", "orders"} { // a plain channel and a recovery one
		t.Run(ch, func(t *testing.T) {
			ts, stop, cont := stallableNode(t, 0.3)
			c := ts.connect(t)
			c.Subscribe(ch)
			ts.apiPublish(t, ch, "before", "1", "")
			c.WaitEvent("before", ch)
			stop()
			start := time.Now()
			m := ts.s.EventMessage(ts.app.ID, ch, "dark", "2", "")
			err := ts.s.PublishAll(context.Background(), []channels.Message{m})
			if !errors.Is(err, channels.ErrPublishTimeout) {
				cont()
				t.Fatalf("publish during the outage: %v, want ErrPublishTimeout", err)
			}
			if took := time.Since(start); took < 250*time.Millisecond || took > 2*time.Second {
				t.Errorf("answered after %v, want about scaling.publish_timeout (300 ms)", took)
			}
			cont()
			ts.apiPublish(t, ch, "after", "3", "")
			if ev := c.WaitEvent("after", ch); ev.Event != "after" {
				t.Fatalf("got %s", ev.Raw)
			}
			c.ExpectNone("dark", ch)
		})
	}
}

// TestRecoverySubscribeRefusedWhileRedisStalls (issue 31): a recovery channel's subscribe
// is answered only once this node's route to the channel is in effect; while Redis does
// not answer, it is refused with pusher:error 4100 (as a presence join is) instead of a
// subscription_succeeded whose position a stalled route cannot honour. A plain channel is
// still answered. Before, the recovery subscribe was answered after its wait ran out.
func TestRecoverySubscribeRefusedWhileRedisStalls(t *testing.T) {
	ts, stop, cont := stallableNode(t, 2)
	defer cont()
	c := ts.connect(t)
	stop()
	c.SubscribeMsg("orders", "", "")
	if code, _ := c.WaitError(); code != 4100 {
		t.Fatalf("recovery subscribe while Redis stalls: code %d, want 4100", code)
	}
	if ts.s.reg.IsSubscribed(ts.app.ID, "orders", c.SocketID) {
		t.Fatal("the refused subscription is still registered")
	}
	cont()
	// Once Redis is back the node re-makes its subscription; the client retries (pusher-js
	// does on 4100) until it is answered with a position.
	deadline := time.Now().Add(10 * time.Second)
	for {
		c.SubscribeMsg("orders", "", "")
		ev := c.Next()
		if ev.Event == "pusher_internal:subscription_succeeded" {
			if p := positionOf(t, ev); p.Serial == nil || p.Epoch == "" {
				t.Fatalf("after Redis is back: %s", ev.Raw)
			}
			return
		}
		if ev.Event != "pusher:error" || ev.ErrorCode(t) != 4100 || time.Now().After(deadline) {
			t.Fatalf("after Redis is back: %s", ev.Raw)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestRecoveryTTLExpiryToldOnOneNode (issue 31): on one node (the memory history) a channel
// whose history expired takes a new epoch; a socket that stayed subscribed is told
// (resume_failed epoch_changed at serial 0 of the new epoch) before the new epoch's serial 1,
// so a client that had seen serial 1 of the old epoch does not drop it. Before, nothing was
// told.
func TestRecoveryTTLExpiryToldOnOneNode(t *testing.T) {
	ts := newServer(t, withApp(func(a *config.App) {
		a.Recovery = config.Recovery{Enabled: true, HistorySize: 10, HistoryTTL: 1, Channels: []string{"*"}}
	}))
	c := ts.connect(t)
	old := positionOf(t, c.Subscribe("orders")).Epoch
	ts.apiPublish(t, "orders", "e", "old", "")
	if ev := c.WaitEvent("e", "orders"); *positionOf(t, ev).Serial != 1 {
		t.Fatalf("got %s", ev.Raw)
	}
	time.Sleep(1100 * time.Millisecond) // past history_ttl: the history expires
	ts.apiPublish(t, "orders", "e", "new", "")
	told := c.Next()
	var d struct {
		Reason string `json:"reason"`
		Epoch  string `json:"epoch"`
		Serial uint64 `json:"serial"`
	}
	if told.Event != "pusher:resume_failed" {
		t.Fatalf("got %s, want resume_failed first", told.Raw)
	}
	told.DataInto(t, &d)
	if d.Reason != "epoch_changed" || d.Epoch == old || d.Epoch == "" || d.Serial != 0 {
		t.Fatalf("told %s", told.Raw)
	}
	if ev := c.Next(); ev.Event != "e" || *positionOf(t, ev).Serial != 1 || ev.DataString(t) != "new" {
		t.Fatalf("after the told frame got %s", ev.Raw)
	}
}

// TestRecoveryResumeIntoANewEpochReplaysIt (issue 31): a resume naming an epoch the channel
// left gets resume_failed epoch_changed at serial 0 of the current epoch and then the
// current epoch's kept events, up to the position it was answered with. Before, the
// resume_failed named the current position and those events were reported lost.
func TestRecoveryResumeIntoANewEpochReplaysIt(t *testing.T) {
	ts := newServer(t, withRecovery(100, "*"))
	w := ts.connect(t)
	epoch := positionOf(t, w.Subscribe("orders")).Epoch
	for i := 1; i <= 3; i++ {
		ts.apiPublish(t, "orders", "e", strconv.Itoa(i), "")
	}
	c := ts.connect(t)
	subscribeResume(c, "orders", map[string]any{"epoch": "an-old-epoch", "serial": 7})
	ok := c.WaitEvent("pusher_internal:subscription_succeeded", "orders")
	if p := positionOf(t, ok); *p.Serial != 3 || p.Epoch != epoch {
		t.Fatalf("answered %s", ok.Raw)
	}
	want := `{"event":"pusher:resume_failed","channel":"orders","data":"{\"reason\":\"epoch_changed\",\"epoch\":\"` + epoch + `\",\"serial\":0}"}`
	if ev := c.Next(); string(ev.Raw) != want {
		t.Fatalf("got %s, want %s", ev.Raw, want)
	}
	for i := 1; i <= 3; i++ {
		if ev := c.Next(); ev.Event != "e" || *positionOf(t, ev).Serial != uint64(i) {
			t.Fatalf("replay %d: %s", i, ev.Raw)
		}
	}
}
