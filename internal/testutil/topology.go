package testutil

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// RepoRoot is the repository's root directory (where go.mod is), found from this file.
func RepoRoot(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("cannot locate the repository")
	}
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// Topology is a Redis topology started by scripts/redis-topologies.sh for one test and
// stopped when it ends.
type Topology struct {
	t    testing.TB
	Kind string
	Dir  string
	// Vars are the script's KEY=value lines (SENTINEL_ADDRS, MASTER_PORT, CLUSTER_ADDRS, ...).
	Vars map[string]string
}

// StartTopology starts a fresh topology of kind ("standalone", "sentinel", "cluster",
// "cluster-replicas") in a temporary directory and stops it when the test ends.
func StartTopology(t testing.TB, kind string) *Topology {
	t.Helper()
	dir := t.TempDir()
	script := filepath.Join(RepoRoot(t), "scripts", "redis-topologies.sh")
	t.Cleanup(func() { _ = exec.Command("bash", script, "stop", dir).Run() })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "bash", script, "start", kind, dir).Output()
	if err != nil {
		msg := err.Error()
		if ee, ok := err.(*exec.ExitError); ok {
			msg = string(ee.Stderr)
		}
		t.Fatalf("redis-topologies.sh start %s: %s", kind, msg)
	}
	top := &Topology{t: t, Kind: kind, Dir: dir, Vars: map[string]string{}}
	for _, line := range strings.Split(string(out), "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok {
			top.Vars[k] = v
		}
	}
	return top
}

// Var returns the script's value of key, failing the test when it printed none.
func (top *Topology) Var(key string) string {
	top.t.Helper()
	v, ok := top.Vars[key]
	if !ok || v == "" {
		top.t.Fatalf("redis-topologies.sh start %s printed no %s", top.Kind, key)
	}
	return v
}

// List is Var split at commas.
func (top *Topology) List(key string) []string { return strings.Split(top.Var(key), ",") }

// Restart starts the topology's server name ("master", "cluster-4", ...) again with the
// arguments it was first started with, e.g. after the test killed it.
func (top *Topology) Restart(name string) error {
	script := filepath.Join(RepoRoot(top.t), "scripts", "redis-topologies.sh")
	out, err := exec.Command("bash", script, "restart", top.Dir, name).CombinedOutput()
	if err != nil {
		return &cmdError{"redis-topologies.sh restart " + name, err, out}
	}
	return nil
}

// PID is the process id in the topology's pid file of server name.
func (top *Topology) PID(name string) string {
	top.t.Helper()
	b, err := os.ReadFile(filepath.Join(top.Dir, name+".pid"))
	if err != nil {
		top.t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// RedisCLI runs redis-cli with args (e.g. "-p", port, "cluster", "info") and returns its
// output with the trailing newline removed.
func RedisCLI(ctx context.Context, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, "redis-cli", append([]string{"-h", "127.0.0.1"}, args...)...).CombinedOutput()
	if err != nil {
		return "", &cmdError{"redis-cli " + strings.Join(args, " "), err, out}
	}
	return strings.TrimRight(string(out), "\n"), nil
}

type cmdError struct {
	what string
	err  error
	out  []byte
}

func (e *cmdError) Error() string { return e.what + ": " + e.err.Error() + ": " + string(e.out) }
