#!/usr/bin/env bash
# Where a connection's CPU goes: user vs kernel time of the server (utime and stime of
# /proc/PID/stat) over the connect + subscribe phase of CONNS connections, reverbgo (this
# checkout) and soketi interleaved, RUNS runs each on fresh servers. The server on core 0
# (reverbgo with GOMAXPROCS=1), pusherbench on core 1. Quiet machine only; loopback only.
#
#   bench/connsplit.sh              # results on stdout, work files in $OUT (default mktemp)
# Environment: RUNS (3), CONNS (10000), OUT, SHARED_BENCH (../shared/bench).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
RUNS=${RUNS:-3}
CONNS=${CONNS:-10000}
OUT=${OUT:-$(mktemp -d -t reverbgo-connsplit.XXXXXX)}
mkdir -p "$OUT"
kit=$OUT/kit
[ -d "$kit" ] || { cp -r "${SHARED_BENCH:-$root/../shared/bench}" "$kit"; chmod -R u+w "$kit"; }
(cd "$kit/pusherbench" && go build -o "$OUT/pusherbench" .)
(cd "$root" && CGO_ENABLED=0 go build -o "$OUT/reverbgo" ./cmd/reverbgo)
ulimit -n "$(ulimit -Hn)"
tck=$(getconf CLK_TCK)
export APP_ID=app-id APP_KEY=app-key APP_SECRET=app-secret BENCH_OUT=$OUT
echo "connsplit at $(cd "$root" && git rev-parse --short HEAD), $CONNS connections, $RUNS runs a side"
for r in $(seq 1 "$RUNS"); do
  for side in reverbgo soketi; do
    port=$((16700 + r * 10))
    if [ $side = reverbgo ]; then
      printf 'server: {host: 127.0.0.1, port: %d}\napps:\n  - {app_id: app-id, key: app-key, secret: app-secret, client_event_rate_limit: 0}\n' $port >"$OUT/rg$r.yaml"
      GOMAXPROCS=1 setsid taskset -c 0 timeout 120 "$OUT/reverbgo" start --config "$OUT/rg$r.yaml" --log-level warn >"$OUT/rg$r.log" 2>&1 </dev/null &
      for _ in $(seq 1 100); do curl -fsS "http://127.0.0.1:$port/up" >/dev/null 2>&1 && break; sleep 0.1; done
      pid=$(pgrep -f "^$OUT/reverbgo start --config $OUT/rg$r.yaml" | head -1)
    else
      port=$((port + 100))
      pid=$(PORT=$port CPU=0 LIFETIME=120 "$kit/pusherbench/scripts/start_soketi.sh" 2>/dev/null | tail -1)
    fi
    sleep 1
    read -r u0 s0 < <(awk '{print $14, $15}' "/proc/$pid/stat")
    GOMAXPROCS=1 taskset -c 1 "$OUT/pusherbench" connections --port $port --pid "$pid" --app-id app-id --key app-key \
      --secret app-secret -n "$CONNS" --hold 5s --settle 0s >"$OUT/pb-$side-$r.txt" 2>&1 &
    pb=$!
    # The connect + subscribe phase ends when pusherbench reports the subscriptions.
    for _ in $(seq 1 600); do grep -aq "subscribe: .* subscribed" "$OUT/pb-$side-$r.txt" 2>/dev/null && break; sleep 0.02; done
    read -r u1 s1 < <(awk '{print $14, $15}' "/proc/$pid/stat")
    wait $pb || true
    echo "$side run $r: user $(( (u1 - u0) * 1000000 / tck / CONNS )) us/conn, kernel $(( (s1 - s0) * 1000000 / tck / CONNS )) us/conn; $(grep -ao '"server_cpu_us_per_conn":[0-9.]*' "$OUT/pb-$side-$r.txt")"
    if [ $side = reverbgo ]; then kill "$pid"; else "$kit/pusherbench/scripts/stop_pid.sh" "$pid" >/dev/null 2>&1 || true; fi
    sleep 1
  done
done
