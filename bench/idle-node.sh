#!/usr/bin/env bash
# CPU per publish on a node with no subscriber of the published channels, interest against
# broadcast routing in one run (issue 25), and what a publish costs Redis (commands and bytes
# from INFO deltas) on the chosen topology. Three nodes: every subscriber on node 0, every
# publish through node 1's HTTP API, node 2 with nothing: its CPU per publish is what a
# foreign publish costs a node (`e` of docs/capacity.md under broadcast), and node 0's is the
# delivering node's. RUNS interleaved runs per routing (bench/cluster.sh with one rate).
#
#   bench/idle-node.sh                       # standalone Redis, 2,000 publishes/s, 3 runs each
#   TOPOLOGY=cluster RATE=1000 bench/idle-node.sh
#
# Environment: TOPOLOGY (standalone), RATE (2000), STEP (10s), RUNS (3), F1_CHANNELS (300: one
# subscriber per channel), BENCH_OUT. Measure only on a quiet machine (../shared/bench/quiet.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
RATE=${RATE:-2000}
RUNS=${RUNS:-3}
out=${BENCH_OUT:-$(mktemp -d -t reverbgo-idle-node.XXXXXX)}
mkdir -p "$out"
echo "idle-node.sh: results in $out" >&2
for run in $(seq 1 "$RUNS"); do
  for routing in interest broadcast; do
    d="$out/$routing-$run"; mkdir -p "$d"
    ROUTING=$routing RATES=$RATE F1_CHANNELS=${F1_CHANNELS:-300} SUB_NODES=0 PUB_NODES=1 BENCH_OUT=$d \
      "$root/bench/cluster.sh" >"$d.log" 2>&1 || true
    python3 - "$d/summary.json" "$routing" "$run" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))["steps"][0]
cpu = s.get("node_cpu_us_per_publish", [])
print(f"{sys.argv[2]:9} run {sys.argv[3]}: {s['publishes_per_s']:.0f} publishes/s, p99 {s['p99_ms']} ms, lost {s['lost']}; "
      f"CPU µs/publish node0 (subscribers) {cpu[0]:.1f}, node1 (API) {cpu[1]:.1f}, node2 (none) {cpu[2]:.1f}; "
      f"Redis {s.get('redis_commands_per_publish', 0):.2f} commands, {s.get('redis_bytes_in_per_publish', 0):.0f} B in, "
      f"{s.get('redis_bytes_out_per_publish', 0):.0f} B out per publish, calls per publish {s.get('redis_calls_per_publish', {})}")
PY
  done
done | tee "$out/table.txt"
