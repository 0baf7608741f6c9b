#!/usr/bin/env bash
# Finds the knee of a three-node reverbgo cluster on one Redis: the highest sustained rate of
# HTTP API publishes, spread round-robin over the nodes, that subscribers on every node get
# with p99 delivery latency under 100 ms and nothing lost (bench/clusterbench does the load
# and the measuring; see its doc comment for the method).
#
#   bench/cluster.sh
#
# Environment: TOPOLOGY (standalone | sentinel | cluster; default standalone, started by
# scripts/redis-topologies.sh), NODES (3), SUBS (300), CHANNELS (30), RATES
# ("500,1000,2000,5000,10000,20000,40000"), STEP (10s), P99_MS (100), ROUTING (interest |
# broadcast: scaling.routing, for before/after; default interest), BENCH_OUT (results
# folder; default a new mktemp -d), SUB_NODES / PUB_NODES (indexes of the nodes that hold the
# subscribers / take the publishes; default every node: SUB_NODES=0 PUB_NODES=1 leaves node 2
# without a subscriber, whose CPU per publish is then what a foreign publish costs), LAYOUT
# (spread | local: which node a publish goes through; spread, the default, sends each
# channel's publishes through every node in turn, 1 in N delivered on the publishing node, as
# behind a load balancer; local sends publish m through node m%N, which with CHANNELS a
# multiple of NODES is always the node of the channel's subscribers: no delivery crosses
# Redis; the layout of every figure before 2026-12-05). Every step
# reports each node's CPU per publish and Redis's commands and bytes per publish (INFO deltas
# of every master). WARMUP (5s): an unjudged step at the first
# rate before the judged ones (0 for none; figures before 2026-12-06 had none, and their first
# step carried the nodes' start-up work). APP_EXTRA: more YAML of the app, e.g. "recovery: {enabled: true}". Nodes are pinned round-robin to the cores (one core each
# when there are enough, GOMAXPROCS=1), Redis and the load tool to the last core. Only
# 127.0.0.1 is targeted; everything started here is stopped on exit (and every node stops by
# itself after LIFETIME seconds). BIN: a reverbgo binary to run instead of this checkout's
# (before/after figures of two builds with the same load tool). Each step also reports the
# HTTP API's answer time of the publishes (api_p50_ms, api_p99_ms).
#
# F = SUBS/CHANNELS subscribers per channel: F=1 with thousands of channels is
#   SUBS=3000 CHANNELS=3000 bench/cluster.sh     (or F1_CHANNELS=3000, which sets both)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
TOPOLOGY=${TOPOLOGY:-standalone}
NODES=${NODES:-3}
if [ -n "${F1_CHANNELS:-}" ]; then SUBS=$F1_CHANNELS CHANNELS=$F1_CHANNELS; fi
SUBS=${SUBS:-300}
CHANNELS=${CHANNELS:-30}
ROUTING=${ROUTING:-interest}
RATES=${RATES:-500,1000,2000,5000,10000,20000,40000}
STEP=${STEP:-10s}
P99_MS=${P99_MS:-100}
LIFETIME=${LIFETIME:-1800}
BENCH_OUT=${BENCH_OUT:-$(mktemp -d -t reverbgo-cluster-bench.XXXXXX)}
mkdir -p "$BENCH_OUT"
echo "cluster.sh: results in $BENCH_OUT" >&2
ulimit -n "$(ulimit -Hn)"
cores=$(nproc)
last=$((cores - 1))

pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  "$root/scripts/redis-topologies.sh" stop "$BENCH_OUT/redis" >/dev/null 2>&1 || true
}
trap cleanup EXIT

if [ -n "${BIN:-}" ]; then cp "$BIN" "$BENCH_OUT/reverbgo"; else (cd "$root" && CGO_ENABLED=0 go build -o "$BENCH_OUT/reverbgo" ./cmd/reverbgo); fi
(cd "$root" && go build -o "$BENCH_OUT/clusterbench" ./bench/clusterbench)

eval "$("$root/scripts/redis-topologies.sh" start "$TOPOLOGY" "$BENCH_OUT/redis")"
while read -r f; do taskset -pc "$last" "$(cat "$f")" >/dev/null; done <"$BENCH_OUT/redis/pids"
case "$TOPOLOGY" in
  standalone) scaling="redis_url: \"$REDIS_URL\"" ;;
  sentinel) scaling="redis_sentinel: {master_name: $SENTINEL_MASTER, addrs: [\"${SENTINEL_ADDRS//,/\",\"}\"]}" ;;
  cluster) scaling="redis_cluster: {addrs: [\"${CLUSTER_ADDRS//,/\",\"}\"]}" ;;
esac

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
ports=()
for i in $(seq 0 $((NODES - 1))); do
  port=$(free_port)
  cat >"$BENCH_OUT/node$i.yaml" <<YAML
server: {host: 127.0.0.1, port: $port}
apps:
  - {app_id: bench, key: bench-key, secret: bench-secret, client_event_rate_limit: 0${APP_EXTRA:+, $APP_EXTRA}}
scaling: {enabled: true, $scaling, channel: bench, routing: $ROUTING}
YAML
  GOMAXPROCS=1 taskset -c $((i % cores)) timeout "$LIFETIME" "$BENCH_OUT/reverbgo" start \
    --config "$BENCH_OUT/node$i.yaml" --log-level warn >"$BENCH_OUT/node$i.log" 2>&1 </dev/null &
  pids+=($!)
  ports+=("$port")
done
for port in "${ports[@]}"; do
  for _ in $(seq 1 100); do curl -fsS "http://127.0.0.1:$port/up" >/dev/null 2>&1 && break; sleep 0.1; done
  curl -fsS "http://127.0.0.1:$port/up" >/dev/null || { echo "cluster.sh: node on $port did not come up" >&2; exit 1; }
done

csv=$(IFS=,; echo "${ports[*]}")
nodepids=()
for p in "${pids[@]}"; do nodepids+=("$(pgrep -P "$p" -f reverbgo | head -1 || echo "$p")"); done # timeout's child
pidcsv=$(IFS=,; echo "${nodepids[*]}")
case "$TOPOLOGY" in
  standalone) raddrs=${REDIS_URL#redis://}; raddrs=${raddrs%%/*} ;;
  sentinel) raddrs=127.0.0.1:$MASTER_PORT ;;
  cluster) raddrs=$(echo "$CLUSTER_MASTER_PORTS" | sed 's/\([0-9]*\)/127.0.0.1:\1/g') ;;
esac
echo "cluster.sh: $NODES nodes on $csv ($TOPOLOGY Redis, routing $ROUTING), subscribers $SUBS on $CHANNELS channels" >&2
set +e
GOMAXPROCS=1 taskset -c "$last" "$BENCH_OUT/clusterbench" --ports "$csv" --app-id bench --key bench-key --secret bench-secret \
  --subs "$SUBS" --channels "$CHANNELS" --rates "$RATES" --step "$STEP" --p99-ms "$P99_MS" \
  --sub-nodes "${SUB_NODES:-}" --pub-nodes "${PUB_NODES:-}" --layout "${LAYOUT:-spread}" --warmup "${WARMUP:-5s}" --pids "$pidcsv" --redis-addrs "$raddrs" | tee "$BENCH_OUT/clusterbench.log"
status=${PIPESTATUS[0]}
set -e
tail -1 "$BENCH_OUT/clusterbench.log" >"$BENCH_OUT/summary.json"
echo "cluster.sh: summary in $BENCH_OUT/summary.json" >&2
exit "$status"
