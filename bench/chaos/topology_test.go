package main

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// CLUSTER NODES as Redis 7 prints it, mid-reshard (a migrating slot in brackets), with a
// failed master.
const clusterNodesOut = `a1 127.0.0.1:7001@17001 myself,master - 0 0 1 connected 0-5460 [5461->-b2]
b2 127.0.0.1:7002@17002 master - 0 0 2 connected 5461-10922
c3 127.0.0.1:7003@17003 master - 0 0 3 connected 10923-16383
d4 127.0.0.1:7004@17004 slave a1 0 0 1 connected
e5 127.0.0.1:7005@17005 master,fail - 0 0 4 connected
`

func TestParseClusterNodes(t *testing.T) {
	got := parseClusterNodes(clusterNodesOut)
	want := []clusterNode{
		{id: "a1", port: "7001", master: true, slots: 5461},
		{id: "b2", port: "7002", master: true, slots: 5462},
		{id: "c3", port: "7003", master: true, slots: 5461},
		{id: "d4", port: "7004"},
		{id: "e5", port: "7005", master: true, failed: true},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("parseClusterNodes = %+v, want %+v", got, want)
	}
}

// Resharding a third from the fullest master to the emptiest, twice, moves the slots there
// and back: the fault set alternates between the same two masters.
func TestReshardPairGoesBackAndForth(t *testing.T) {
	nodes := parseClusterNodes(clusterNodesOut)
	for i, tc := range []struct{ from, to string }{{"b2", "c3"}, {"c3", "b2"}, {"b2", "c3"}} {
		from, to, ok := reshardPair(nodes)
		if !ok || from.id != tc.from || to.id != tc.to {
			t.Fatalf("round %d: reshardPair = %s→%s %v, want %s→%s", i, from.id, to.id, ok, tc.from, tc.to)
		}
		moved := min(16384/3, from.slots)
		for j := range nodes {
			switch nodes[j].id {
			case from.id:
				nodes[j].slots -= moved
			case to.id:
				nodes[j].slots += moved
			}
		}
	}
	if _, _, ok := reshardPair([]clusterNode{{id: "a", master: true}, {id: "b", master: true, failed: true}}); ok {
		t.Fatal("a pair from one live master")
	}
}

func TestFaultsFor(t *testing.T) {
	for _, tc := range []struct {
		topology string
		want     []string
	}{
		{"standalone", []string{"kill", "stop", "term", "redis"}},
		{"sentinel", []string{"kill", "stop", "term", "failover", "master-kill"}},
		{"cluster", []string{"kill", "stop", "term", "reshard", "cluster-failover"}},
	} {
		got := faultsFor(tc.topology)
		if !slices.Equal(got, tc.want) {
			t.Errorf("faultsFor(%s) = %v, want %v", tc.topology, got, tc.want)
		}
		for _, f := range got[3:] {
			if !redisFault(f) {
				t.Errorf("%s is a Redis fault", f)
			}
		}
	}
	if redisFault("kill") || scriptTopology("cluster") != "cluster-replicas" || scriptTopology("sentinel") != "sentinel" {
		t.Error("node fault or script topology mapping")
	}
}

func TestServerNamedAndInfoField(t *testing.T) {
	dir := t.TempDir()
	for name, args := range map[string]string{"master": "6379\n", "replica": "6380\n--replicaof\n127.0.0.1\n6379\n"} {
		if err := os.WriteFile(filepath.Join(dir, name+".args"), []byte(args), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := serverNamed(dir, "6380"); err != nil || n != "replica" {
		t.Fatalf("serverNamed(6380) = %q, %v", n, err)
	}
	if _, err := serverNamed(dir, "6381"); err == nil {
		t.Fatal("a server on a port nothing listens on")
	}
	info := "# Server\r\nredis_version:7.0.15\r\nprocess_id:4242\r\n"
	if got := infoField(info, "process_id"); got != "4242" {
		t.Fatalf("infoField = %q", got)
	}
}
