package cluster_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/reverbgo/reverbgo/channels"
	"github.com/reverbgo/reverbgo/internal/cluster"
	"github.com/reverbgo/reverbgo/internal/redisx"
	"github.com/reverbgo/reverbgo/internal/testutil"
	"github.com/reverbgo/reverbgo/ws"
)

// TestHistoryReadsWhereAppendsGoDuringASentinelSwitch (issue 31, cause 4): a sentinel named a
// new master; the node's watcher moved its publishes (and the recovery appends they carry)
// there at once, while go-redis's failover client still talks to the demoted master. A
// resume's history read must go where the appends went: it replays every event. Before, it
// read the demoted master and replayed nothing. (Three miniredis servers: the demoted
// master the failover client still uses, the new master, and a "sentinel" whose
// +switch-master message the watcher follows.)
func TestHistoryReadsWhereAppendsGoDuringASentinelSwitch(t *testing.T) {
	ctx := context.Background()
	demoted, promoted, sentinel := miniredis.RunT(t), miniredis.RunT(t), miniredis.RunT(t)
	failover := redis.NewClient(&redis.Options{Addr: demoted.Addr()}) // still on the old master
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	rc := redisx.New(failover, &redisx.SentinelOptions{Addrs: []string{sentinel.Addr()}, MasterName: "m"}, quiet)
	t.Cleanup(func() { _ = rc.Close() })
	testutil.WaitFor(t, "the watcher listening", func() bool { return sentinel.PubSubNumSub("+switch-master")["+switch-master"] == 1 })
	dh, dp, _ := net.SplitHostPort(demoted.Addr())
	ph, pp, _ := net.SplitHostPort(promoted.Addr())
	sentinel.Publish("+switch-master", "m "+dh+" "+dp+" "+ph+" "+pp)
	testutil.WaitFor(t, "the watcher on the new master", func() bool {
		return rc.Plane().Ping(ctx).Err() == nil && rc.Plane().Set(ctx, "probe", "x", 0).Err() == nil && promoted.Exists("probe")
	})

	keys := cluster.NewKeySpace("test:"+uuid.NewString(), true)
	hist := cluster.NewRedisHistory(rc, keys)
	if err := cluster.LoadScripts(ctx, rc); err != nil {
		t.Fatal(err)
	}
	b, err := cluster.NewRedisBroker(ctx, rc, cluster.RedisBrokerOptions{Channel: keys.Channel(), Keys: keys, Client: rc, History: hist, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	reg := channels.NewRegistry(channels.Options{Broker: b})
	b.Start(reg.DeliverLocal)
	lim := channels.HistoryLimits{Size: 10, TTL: time.Minute}
	for i := 1; i <= 3; i++ {
		frame := ws.TextFrame([]byte(`{"event":"e","channel":"orders","data":"` + strconv.Itoa(i) + `"}`))
		if err := reg.PublishAcked(ctx, []channels.Message{{AppID: "app", Channel: "orders", Frame: frame, Cacheable: true, Recovery: &lim}}); err != nil {
			t.Fatal(err)
		}
	}
	pos, evs, complete, err := hist.Since(ctx, "app", "orders", lim, 0)
	if err != nil || !complete || pos.Serial != 3 || len(evs) != 3 {
		t.Fatalf("resume from 0 read serial %d, %d events, complete %v, %v; want the 3 appended", pos.Serial, len(evs), complete, err)
	}
}
