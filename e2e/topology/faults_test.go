// Package topology is issue 24's fault harness: three reverbgo processes (the built binary)
// on a real Sentinel or Redis Cluster started by scripts/redis-topologies.sh, 60 subscribers
// on nodes 1 and 3, 200 events/s published through node 2's HTTP API, and one change of
// Redis's shape in the middle. Every event carries its sequence number, and the harness
// checks the "done when" for it: every event published from 2 s after the change is
// delivered, none published before the fault started is missing, no socket dropped, no
// duplicate; and at most 1 % of the publishes accepted during a planned failover lost.
package topology

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/reverbgo/reverbgo/internal/testenv"
	"github.com/reverbgo/reverbgo/internal/testutil"
)

// scenario is one change of shape.
type scenario struct {
	name string
	kind string // the redis-topologies.sh topology
	// fault changes the topology and returns the moment the change counts from.
	fault func(ctx context.Context, t *testing.T, top *testutil.Topology) (time.Time, error)
	// maxLostDuring bounds the share of accepted publishes lost between the fault's start
	// and moment+settle; negative: recorded, not asserted.
	maxLostDuring float64
}

var scenarios = []scenario{
	{name: "sentinel-failover", kind: "sentinel", fault: sentinelFailover, maxLostDuring: 0.01},
	{name: "sentinel-kill", kind: "sentinel", fault: sentinelKill, maxLostDuring: -1},
	{name: "cluster-reshard", kind: "cluster-replicas", fault: clusterReshard, maxLostDuring: -1},
	{name: "cluster-failover", kind: "cluster-replicas", fault: clusterFailover, maxLostDuring: -1},
}

// TestNothingLostWhenRedisChangesShape runs each scenario on a fresh topology. It runs where
// the topology tests are meant to run (REVERBGO_TEST_SENTINEL for the Sentinel scenarios,
// REVERBGO_TEST_CLUSTER_REPLICAS for the Cluster ones: see testenv), but starts topologies of
// its own, since every scenario breaks the one it runs on. Run one with
// -run 'TestNothingLostWhenRedisChangesShape/sentinel-failover'.
func TestNothingLostWhenRedisChangesShape(t *testing.T) {
	bin, sentinel, cluster := topologyEnv(t)
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			if (sc.kind == "sentinel" && !sentinel) || (sc.kind != "sentinel" && !cluster) {
				t.Skipf("no %s topology tests here", sc.kind)
			}
			runScenario(t, bin, sc)
		})
	}
}

// topologyEnv skips where the topology tests do not run (-short, or neither
// REVERBGO_TEST_SENTINEL nor REVERBGO_TEST_CLUSTER_REPLICAS set: see testenv) and returns the
// built binary and which kinds run.
func topologyEnv(t *testing.T) (bin string, sentinel, cluster bool) {
	if testing.Short() {
		t.Skip("-short: the fault scenarios take about 40 s each")
	}
	sentinel = testenv.SentinelTopology(t) != nil
	cluster = testenv.ClusterReplicasAddrs(t) != nil
	if !sentinel && !cluster {
		t.Skip("REVERBGO_TEST_SENTINEL and REVERBGO_TEST_CLUSTER_REPLICAS not set")
	}
	for _, bin := range []string{"redis-server", "redis-sentinel", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s is not installed", bin)
		}
	}
	return testutil.ReverbgoBinary(t), sentinel, cluster
}

// scalingKeys are the scaling keys of a node on top (yaml flow style).
func scalingKeys(top *testutil.Topology) string {
	if top.Kind == "sentinel" {
		return fmt.Sprintf("redis_sentinel: {master_name: %q, addrs: [%s]}", top.Var("SENTINEL_MASTER"), quoted(top.List("SENTINEL_ADDRS")))
	}
	return fmt.Sprintf("redis_cluster: {addrs: [%s]}", quoted(top.List("CLUSTER_ADDRS")))
}

func runScenario(t *testing.T, bin string, sc scenario) {
	top := testutil.StartTopology(t, sc.kind)
	h := newHarness(t, bin, top, scalingKeys(top))
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	publishing := make(chan struct{})
	go func() { defer close(publishing); h.publish(ctx) }()
	time.Sleep(warmup) // the run's shape is the point: publish this long before the fault
	faultStart := time.Now()
	fctx, fcancel := context.WithTimeout(context.Background(), 60*time.Second)
	moment, err := sc.fault(fctx, t, top)
	fcancel()
	if err != nil {
		stop()
		t.Fatalf("%s: %v", sc.name, err)
	}
	time.Sleep(time.Until(moment.Add(tail)))
	stop()
	<-publishing // no pubWG.Add after this: drain's Wait may start
	h.drain(5 * time.Second)
	res := h.result(faultStart, moment)
	first := "none"
	if res.firstDelivery >= 0 {
		first = res.firstDelivery.Round(time.Millisecond).String()
	}
	lastLost := func(w window) string {
		if w.lost == 0 {
			return "-"
		}
		d := w.lastLost.Sub(moment).Round(100 * time.Millisecond)
		if d < 0 {
			return d.String() // before the moment
		}
		return "+" + d.String()
	}
	published := res.before.published + res.during.published + res.after.published
	accepted := res.before.accepted + res.during.accepted + res.after.accepted
	// One line per scenario, for docs/benchmarks.md.
	t.Logf("SUMMARY scenario=%s published=%d accepted=%d lost_before=%s lost_during=%s lost_after=%s "+
		"not_accepted_after=%d duplicates=%d misrouted=%d dropped_sockets=%d first_delivery_after_change=%s "+
		"fault_to_moment=%s last_lost_during=%s last_lost_after=%s",
		sc.name, published, accepted, res.before, res.during, res.after, res.after.notAccepted,
		res.duplicates, res.misrouted, res.dropped, first, moment.Sub(faultStart).Round(100*time.Millisecond), lastLost(res.during), lastLost(res.after))

	if res.dropped != 0 {
		t.Errorf("%d of %d sockets dropped", res.dropped, subscribers)
	}
	if res.duplicates != 0 || res.misrouted != 0 {
		t.Errorf("%d duplicate deliveries, %d on the wrong channel", res.duplicates, res.misrouted)
	}
	if res.before.lost != 0 || res.before.notAccepted != 0 {
		t.Errorf("before the fault: %d of %d accepted events lost, %d publishes refused", res.before.lost, res.before.accepted, res.before.notAccepted)
	}
	if res.after.lost != 0 || res.after.notAccepted != 0 || res.after.published == 0 {
		t.Errorf("from %s after the change: %d of %d accepted events lost (the last sent %s after the change), %d of %d publishes refused",
			settle, res.after.lost, res.after.accepted, lastLost(res.after), res.after.notAccepted, res.after.published)
	}
	if sc.maxLostDuring >= 0 && float64(res.during.lost) > sc.maxLostDuring*float64(res.during.accepted) {
		t.Errorf("during the change: %d of %d accepted events lost, want at most %.0f %%", res.during.lost, res.during.accepted, 100*sc.maxLostDuring)
	}
	if t.Failed() {
		for i, n := range h.nodes {
			t.Logf("node %d log tail:\n%s", i+1, logTail(n.Logs(), 15))
		}
	}
}

// quoted is a YAML flow list of the strings.
func quoted(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = strconv.Quote(s)
	}
	return strings.Join(q, ", ")
}

func logTail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// sentinelClient is a client of the topology's first sentinel, closed when the test ends.
func sentinelClient(t *testing.T, top *testutil.Topology) *redis.SentinelClient {
	sc := redis.NewSentinelClient(&redis.Options{Addr: top.List("SENTINEL_ADDRS")[0]})
	t.Cleanup(func() { _ = sc.Close() })
	return sc
}

// awaitNewMaster polls the sentinel until it names a master other than old.
func awaitNewMaster(ctx context.Context, sc *redis.SentinelClient, name, old string) (time.Time, error) {
	for {
		addr, err := sc.GetMasterAddrByName(ctx, name).Result()
		if err == nil && len(addr) == 2 && addr[1] != old {
			return time.Now(), nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("the sentinel never named a new master: %w", ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// sentinelFailover: SENTINEL FAILOVER, from the moment the sentinel names the new master.
func sentinelFailover(ctx context.Context, t *testing.T, top *testutil.Topology) (time.Time, error) {
	sc := sentinelClient(t, top)
	name := top.Var("SENTINEL_MASTER")
	if err := sc.Failover(ctx, name).Err(); err != nil {
		return time.Time{}, err
	}
	return awaitNewMaster(ctx, sc, name, top.Var("MASTER_PORT"))
}

// sentinelKill: SIGKILL the master, from its replica's promotion; the old master is
// restarted 1 s after the promotion (it rejoins as a replica).
func sentinelKill(ctx context.Context, t *testing.T, top *testutil.Topology) (time.Time, error) {
	sc := sentinelClient(t, top)
	name := top.Var("SENTINEL_MASTER")
	if out, err := exec.Command("kill", "-9", top.PID("master")).CombinedOutput(); err != nil {
		return time.Time{}, fmt.Errorf("kill the master: %v %s", err, out)
	}
	moment, err := awaitNewMaster(ctx, sc, name, top.Var("MASTER_PORT"))
	if err != nil {
		return moment, err
	}
	time.AfterFunc(time.Second, func() {
		if err := top.Restart("master"); err != nil {
			t.Errorf("restart the old master: %v", err)
		}
	})
	return moment, nil
}

func node(t *testing.T, port string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + port})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// clusterReshard: redis-cli --cluster reshard moves every slot of the first master to the
// second, from the end of the reshard.
func clusterReshard(ctx context.Context, t *testing.T, top *testutil.Topology) (time.Time, error) {
	masters := top.List("CLUSTER_MASTER_PORTS")
	from, err := node(t, masters[0]).ClusterMyID(ctx).Result()
	if err != nil {
		return time.Time{}, err
	}
	to, err := node(t, masters[1]).ClusterMyID(ctx).Result()
	if err != nil {
		return time.Time{}, err
	}
	slots := 0
	ranges, err := node(t, masters[0]).ClusterSlots(ctx).Result()
	if err != nil {
		return time.Time{}, err
	}
	for _, r := range ranges {
		if len(r.Nodes) > 0 && r.Nodes[0].ID == from {
			slots += r.End - r.Start + 1
		}
	}
	if slots == 0 {
		return time.Time{}, fmt.Errorf("master %s holds no slot", masters[0])
	}
	if _, err := testutil.RedisCLI(ctx, "--cluster", "reshard", "127.0.0.1:"+masters[0], "--cluster-from", from,
		"--cluster-to", to, "--cluster-slots", strconv.Itoa(slots), "--cluster-yes"); err != nil {
		return time.Time{}, err
	}
	return time.Now(), nil
}

// clusterFailover: CLUSTER FAILOVER on the first master's replica, from its promotion.
func clusterFailover(ctx context.Context, t *testing.T, top *testutil.Topology) (time.Time, error) {
	r := node(t, top.List("CLUSTER_REPLICA_PORTS")[0])
	if err := r.Do(ctx, "cluster", "failover").Err(); err != nil {
		return time.Time{}, err
	}
	for {
		role, err := r.Do(ctx, "role").Slice()
		if err == nil && len(role) > 0 && role[0] == "master" {
			return time.Now(), nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("the replica was never promoted: %w", ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}
