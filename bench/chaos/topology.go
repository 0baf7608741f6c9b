package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The faults that change Redis's shape (issue 24), on top of the node faults:
//   sentinel: "failover" (SENTINEL FAILOVER) and "master-kill" (SIGKILL the master, restart
//             it 1 s after its replica's promotion: it rejoins as a replica);
//   cluster (3 masters with one replica each): "reshard" (redis-cli --cluster reshard moving
//             a third of the slots from the fullest master to the emptiest: back and forth)
//             and "cluster-failover" (CLUSTER FAILOVER on a replica).

// faultsFor lists the faults a run cycles through on topology.
func faultsFor(topology string) []string {
	switch topology {
	case "sentinel":
		return []string{"kill", "stop", "term", "failover", "master-kill"}
	case "cluster":
		return []string{"kill", "stop", "term", "reshard", "cluster-failover"}
	}
	return []string{"kill", "stop", "term", "redis"}
}

// scriptTopology is the redis-topologies.sh topology behind a --topology.
func scriptTopology(topology string) string {
	if topology == "cluster" {
		return "cluster-replicas"
	}
	return topology
}

// redisFault reports whether fault targets Redis rather than a node.
func redisFault(fault string) bool {
	switch fault {
	case "redis", "failover", "master-kill", "reshard", "cluster-failover":
		return true
	}
	return false
}

func redisCLI(ctx context.Context, port string, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, "redis-cli", append([]string{"-h", "127.0.0.1", "-p", port}, args...)...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("redis-cli -p %s %s: %v %s", port, strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// sentinelMaster is the port of the master the first sentinel names.
func (s *chaos) sentinelMaster(ctx context.Context) string {
	_, port, _ := strings.Cut(strings.Split(s.redis["SENTINEL_ADDRS"], ",")[0], ":")
	out, _ := redisCLI(ctx, port, "sentinel", "get-master-addr-by-name", "mymaster")
	if f := strings.Fields(out); len(f) == 2 {
		return f[1]
	}
	return ""
}

// serverNamed is the redis-topologies.sh name ("master", "replica", "cluster-3") of the
// server on port, read from the DIR/NAME.args files the script writes (first line: port).
func serverNamed(dir, port string) (string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.args"))
	if err != nil {
		return "", err
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		if first, _, _ := strings.Cut(string(b), "\n"); first == port {
			return strings.TrimSuffix(filepath.Base(f), ".args"), nil
		}
	}
	return "", fmt.Errorf("no server on port %s in %s", port, dir)
}

// masterKill SIGKILLs the Sentinel master, waits for the promotion, and restarts the old
// master 1 s later (Sentinel makes it a replica of the new one).
func (s *chaos) masterKill(ctx context.Context) error {
	port := s.sentinelMaster(ctx)
	name, err := serverNamed(s.redisDir, port)
	if err != nil {
		return err
	}
	info, err := redisCLI(ctx, port, "info", "server")
	if err != nil {
		return err
	}
	pid := infoField(info, "process_id")
	n, _ := strconv.Atoi(pid)
	if n <= 0 {
		return fmt.Errorf("no process_id for the master on %s", port)
	}
	s.logf("master-kill: %s (port %s, pid %d)", name, port, n)
	_ = syscall.Kill(n, syscall.SIGKILL)
	for i := 0; i < 300 && s.sentinelMaster(ctx) == port; i++ {
		sleepCtx(ctx, 100*time.Millisecond)
	}
	if s.sentinelMaster(ctx) == port {
		return fmt.Errorf("sentinel never promoted a replica after the master died")
	}
	sleepCtx(ctx, time.Second)
	if out, err := exec.Command(filepath.Join(s.o.root, "scripts/redis-topologies.sh"), "restart", s.redisDir, name).CombinedOutput(); err != nil {
		return fmt.Errorf("restart %s: %v %s", name, err, out)
	}
	return s.nodesUp(ctx)
}

// infoField is field's value in an INFO reply.
func infoField(info, field string) string {
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), field+":"); ok {
			return v
		}
	}
	return ""
}

// clusterNode is one line of CLUSTER NODES.
type clusterNode struct {
	id, port string
	master   bool
	failed   bool
	slots    int
}

// parseClusterNodes reads CLUSTER NODES: id, address, flags and, for masters, slot ranges.
func parseClusterNodes(out string) []clusterNode {
	var nodes []clusterNode
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(l)
		if len(f) < 8 {
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@")
		_, port, _ := strings.Cut(addr, ":")
		n := clusterNode{id: f[0], port: port, master: strings.Contains(f[2], "master"),
			failed: strings.Contains(f[2], "fail")}
		for _, r := range f[8:] {
			if strings.HasPrefix(r, "[") { // a slot being migrated
				continue
			}
			lo, hi, ok := strings.Cut(r, "-")
			a, _ := strconv.Atoi(lo)
			b := a
			if ok {
				b, _ = strconv.Atoi(hi)
			}
			n.slots += b - a + 1
		}
		nodes = append(nodes, n)
	}
	return nodes
}

// reshardPair picks the master with the most slots and the one with the fewest (ties by
// id): moving a third of the slots from the first to the second, again and again, moves them
// back and forth between two masters.
func reshardPair(nodes []clusterNode) (from, to clusterNode, ok bool) {
	var masters []clusterNode
	for _, n := range nodes {
		if n.master && !n.failed {
			masters = append(masters, n)
		}
	}
	if len(masters) < 2 {
		return from, to, false
	}
	sort.Slice(masters, func(i, j int) bool {
		if masters[i].slots != masters[j].slots {
			return masters[i].slots > masters[j].slots
		}
		return masters[i].id < masters[j].id
	})
	return masters[0], masters[len(masters)-1], masters[0].slots > 0
}

func (s *chaos) clusterNodes(ctx context.Context) ([]clusterNode, error) {
	for _, a := range strings.Split(s.redis["CLUSTER_ADDRS"], ",") {
		_, port, _ := strings.Cut(a, ":")
		if out, err := redisCLI(ctx, port, "cluster", "nodes"); err == nil {
			return parseClusterNodes(out), nil
		}
	}
	return nil, fmt.Errorf("no cluster node answers")
}

// reshard moves a third of the slots (16384/3) from the fullest master to the emptiest.
func (s *chaos) reshard(ctx context.Context) error {
	nodes, err := s.clusterNodes(ctx)
	if err != nil {
		return err
	}
	from, to, ok := reshardPair(nodes)
	if !ok {
		return fmt.Errorf("no two masters to reshard between")
	}
	n := min(16384/3, from.slots)
	s.logf("reshard: %d slots from %s to %s", n, from.port, to.port)
	if _, err := redisCLI(ctx, from.port, "--cluster", "reshard", "127.0.0.1:"+from.port, "--cluster-from", from.id,
		"--cluster-to", to.id, "--cluster-slots", strconv.Itoa(n), "--cluster-yes"); err != nil {
		return err
	}
	return s.nodesUp(ctx)
}

// clusterFailover promotes the replica of the master with the most slots (CLUSTER FAILOVER)
// and waits until it reports itself master.
func (s *chaos) clusterFailover(ctx context.Context) error {
	out, err := s.clusterNodes(ctx)
	if err != nil {
		return err
	}
	from, _, ok := reshardPair(out)
	if !ok {
		return fmt.Errorf("no master with slots")
	}
	var replica string
	for _, a := range strings.Split(s.redis["CLUSTER_ADDRS"], ",") {
		_, port, _ := strings.Cut(a, ":")
		if info, err := redisCLI(ctx, port, "info", "replication"); err == nil &&
			infoField(info, "role") == "slave" && infoField(info, "master_port") == from.port &&
			infoField(info, "master_link_status") == "up" {
			replica = port
		}
	}
	if replica == "" {
		return fmt.Errorf("master %s has no replica in sync", from.port)
	}
	s.logf("cluster-failover: replica %s takes over from %s", replica, from.port)
	if _, err := redisCLI(ctx, replica, "cluster", "failover"); err != nil {
		return err
	}
	for i := 0; i < 300; i++ {
		if info, err := redisCLI(ctx, replica, "info", "replication"); err == nil && infoField(info, "role") == "master" {
			return s.nodesUp(ctx)
		}
		sleepCtx(ctx, 100*time.Millisecond)
	}
	return fmt.Errorf("replica %s was never promoted", replica)
}

// nodesUp waits until every node answers /up again.
func (s *chaos) nodesUp(ctx context.Context) error {
	sleepCtx(ctx, 2*time.Second) // the settle time after which nothing may be lost
	for _, n := range s.cl.nodes {
		if err := n.waitUp(ctx, 30*time.Second); err != nil {
			return err
		}
	}
	return nil
}
