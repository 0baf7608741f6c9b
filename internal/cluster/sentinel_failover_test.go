package cluster_test

import (
	"context"
	"io"
	"log/slog"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/reverbgo/reverbgo/channels"
	"github.com/reverbgo/reverbgo/internal/cluster"
	"github.com/reverbgo/reverbgo/internal/redisx"
	"github.com/reverbgo/reverbgo/internal/testenv"
	"github.com/reverbgo/reverbgo/internal/testutil"
	"github.com/reverbgo/reverbgo/ws"
)

// A planned Sentinel failover (SENTINEL FAILOVER, sent to the last sentinel, which then
// runs it) loses no event the broker acknowledged: one publisher sends recovery-channel
// events back to back through the failover, and afterwards the new master's history of the
// channel holds every event whose PublishAcked returned nil, once each, with serials 1..N.
// On a real master, replica and three sentinels (scripts/redis-topologies.sh).
func TestNoAckedEventLostToAPlannedSentinelFailover(t *testing.T) {
	testenv.RedisServer(t)
	if _, err := exec.LookPath("redis-sentinel"); err != nil {
		if testenv.InCI() {
			t.Fatal("CI=true but redis-sentinel is not installed")
		}
		t.Skip("redis-sentinel not installed")
	}
	if testing.Short() {
		t.Skip("starts a Sentinel topology")
	}
	ctx := context.Background()
	top := testutil.StartTopology(t, "sentinel")
	addrs, name := top.List("SENTINEL_ADDRS"), top.Var("SENTINEL_MASTER")
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	rc, _, err := redisx.Open(redisx.Servers{Sentinel: &redisx.SentinelServers{MasterName: name, Addrs: addrs}}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rc.Close() })
	keys := cluster.NewKeySpace("test:"+uuid.NewString(), true)
	hist := cluster.NewRedisHistory(rc, keys)
	testutil.WaitFor(t, "the master reachable", func() bool { return cluster.LoadScripts(ctx, rc) == nil })
	b, err := cluster.NewRedisBroker(ctx, rc, cluster.RedisBrokerOptions{Channel: keys.Channel(), Keys: keys, Client: rc, History: hist, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	reg := channels.NewRegistry(channels.Options{Broker: b})
	b.Start(reg.DeliverLocal)
	select {
	case <-b.Dialled():
	case <-time.After(10 * time.Second):
		t.Fatal("subscription connections never made")
	}

	const ch = "private-orders"
	lim := channels.HistoryLimits{Size: 1 << 20, TTL: 10 * time.Minute}
	var (
		mu    sync.Mutex
		acked []int // the events whose PublishAcked returned nil
		sent  int
	)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 1; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			frame := ws.TextFrame([]byte(`{"event":"e","channel":"` + ch + `","data":"ev-` + strconv.Itoa(i) + `"}`))
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second) // scaling.publish_timeout's default
			err := reg.PublishAcked(pctx, []channels.Message{{AppID: "app", Channel: ch, Frame: frame, Cacheable: true, Recovery: &lim}})
			cancel()
			mu.Lock()
			sent = i
			if err == nil {
				acked = append(acked, i)
			}
			mu.Unlock()
		}
	}()
	ackedN := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(acked)
	}
	testutil.WaitFor(t, "events published before the failover", func() bool { return ackedN() >= 100 })

	last := addrs[len(addrs)-1]
	sc := redis.NewSentinelClient(&redis.Options{Addr: last})
	t.Cleanup(func() { _ = sc.Close() })
	old, err := sc.GetMasterAddrByName(ctx, name).Result()
	if err != nil {
		t.Fatal(err)
	}
	asked := time.Time{}
	testutil.WaitForWithin(t, 60*time.Second, "the last sentinel to name a new master", func() bool {
		if time.Since(asked) > 8*time.Second {
			err := sc.Failover(ctx, name).Err()
			if err != nil && !strings.Contains(err.Error(), "INPROG") && !strings.Contains(err.Error(), "NOGOODSLAVE") {
				t.Fatal(err)
			}
			if err == nil {
				asked = time.Now()
			}
		}
		now, err := sc.GetMasterAddrByName(ctx, name).Result()
		return err == nil && !slices.Equal(now, old)
	})
	newMaster, _ := sc.GetMasterAddrByName(ctx, name).Result()
	t.Logf("master %v → %v", old, newMaster)
	// Settle: every sentinel names the new master and the node has published there.
	for _, addr := range addrs {
		other := redis.NewSentinelClient(&redis.Options{Addr: addr})
		testutil.WaitForWithin(t, 10*time.Second, "sentinel "+addr+" to name the new master", func() bool {
			m, err := other.GetMasterAddrByName(ctx, name).Result()
			return err == nil && slices.Equal(m, newMaster)
		})
		_ = other.Close()
	}
	after := ackedN()
	testutil.WaitFor(t, "events published after the failover", func() bool { return ackedN() >= after+100 })
	close(stop)
	<-done

	nm := redis.NewClient(&redis.Options{Addr: newMaster[0] + ":" + newMaster[1]})
	t.Cleanup(func() { _ = nm.Close() })
	if err := cluster.LoadScripts(ctx, nm); err != nil {
		t.Fatal(err)
	}
	pos, evs, complete, err := cluster.NewRedisHistory(nm, keys).Since(ctx, "app", ch, lim, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !complete {
		// The history marks serials it lost (appends the old master took after the
		// promotion, given again by the new one): a read from 0 cannot be complete.
		t.Errorf("the new master's history of the channel is incomplete at serial %d: it lost events", pos.Serial)
	}
	// Which events the history holds, from its list itself: a history that lost serials
	// replays nothing from 0.
	_, _, list, _ := keys.HistoryKeys("app", ch)
	entries, err := nm.LRange(ctx, list, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`ev-(\d+)"`)
	in := map[int]int{} // event → times in the history
	for _, e := range entries {
		if m := re.FindStringSubmatch(e); m != nil {
			n, _ := strconv.Atoi(m[1])
			in[n]++
		}
	}
	var badSerial []uint64
	for i, e := range evs {
		if e.Serial != uint64(i+1) {
			badSerial = append(badSerial, e.Serial)
		}
	}
	if complete && pos.Serial != uint64(len(evs)) {
		t.Errorf("the history is at serial %d with %d events", pos.Serial, len(evs))
	}
	var missing, twice []int
	for _, n := range acked {
		if in[n] == 0 {
			missing = append(missing, n)
		}
	}
	for n, k := range in {
		if k > 1 {
			twice = append(twice, n)
		}
	}
	t.Logf("%d published, %d acknowledged, %d in the new master's history (serial %d)", sent, len(acked), len(in), pos.Serial)
	if len(badSerial) > 0 {
		t.Errorf("serials not 1..%d: %d out of place, first %v", len(evs), len(badSerial), badSerial[:min(5, len(badSerial))])
	}
	if len(twice) > 0 {
		slices.Sort(twice)
		t.Errorf("%d events in the history more than once, first %v", len(twice), twice[:min(5, len(twice))])
	}
	if len(missing) > 0 {
		t.Errorf("%d acknowledged events not in the new master's history, first %v", len(missing), missing[:min(10, len(missing))])
	}
}
