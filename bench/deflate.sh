#!/usr/bin/env bash
# permessage-deflate on vs off (issue 18): bytes on the wire per delivery of a ~2 KiB
# Laravel-like JSON event and server CPU per delivery, with bench/deflatebench as the client.
# Two reverbgo processes of the same build, server.compression on and off, each pinned to
# core 0 (GOMAXPROCS=1); the client on core 1 offers permessage-deflate to both, as browsers
# do. RUNS rounds, the two sides interleaved; then one table of medians and ratios.
#
#   bench/deflate.sh               N=1000 subscribers, M=400 events at RATE=20/s (20k deliveries/s)
#   SMOKE=1 bench/deflate.sh       a 1-second check that the command works (no figures)
#
# Environment: N, M, RATE, RUNS (3), LEVEL (1), MIN_BYTES (256), BENCH_OUT (results; default a
# new mktemp -d). Measure only on a quiet machine. Only 127.0.0.1 is targeted; the servers stop
# by themselves after LIFETIME seconds.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
if [ -n "${SMOKE:-}" ]; then N=${N:-20} M=${M:-20} RATE=${RATE:-20} RUNS=${RUNS:-1}; fi
N=${N:-1000} M=${M:-400} RATE=${RATE:-20} RUNS=${RUNS:-3} LEVEL=${LEVEL:-1} MIN_BYTES=${MIN_BYTES:-256}
LIFETIME=${LIFETIME:-3600}
BENCH_OUT=${BENCH_OUT:-$(mktemp -d -t reverbgo-deflate.XXXXXX)}
mkdir -p "$BENCH_OUT"
echo "deflate.sh: results in $BENCH_OUT" >&2
ulimit -n "$(ulimit -Hn)"
(cd "$root" && CGO_ENABLED=0 go build -o "$BENCH_OUT/reverbgo" ./cmd/reverbgo && go build -o "$BENCH_OUT/deflatebench" ./bench/deflatebench)
commit=$(cd "$root" && git rev-parse --short HEAD)$(cd "$root" && git diff --quiet HEAD -- . || echo "+dirty")

declare -A PORT PID
PORT=([on]=16701 [off]=16702)
cpus=$(nproc)
server_cpu=0 client_cpu=$((cpus > 1 ? 1 : 0))
start() { # side
  local side=$1 enabled=false
  [ "$side" = on ] && enabled=true
  cat >"$BENCH_OUT/$side.yaml" <<YAML
server:
  host: 127.0.0.1
  port: ${PORT[$side]}
  compression: {enabled: $enabled, min_bytes: $MIN_BYTES, level: $LEVEL}
apps:
  - {app_id: bench, key: bench-key, secret: bench-secret, client_event_rate_limit: 0}
YAML
  GOMAXPROCS=1 setsid taskset -c "$server_cpu" timeout "$LIFETIME" "$BENCH_OUT/reverbgo" start \
    --config "$BENCH_OUT/$side.yaml" --log-level warn >>"$BENCH_OUT/$side.log" 2>&1 </dev/null &
  for _ in $(seq 1 100); do curl -fsS "http://127.0.0.1:${PORT[$side]}/up" >/dev/null 2>&1 && break; sleep 0.1; done
  PID[$side]=$(pgrep -f "^$BENCH_OUT/reverbgo start --config $BENCH_OUT/$side.yaml" | head -1)
  [ -n "${PID[$side]}" ] || { echo "deflate.sh: the $side server did not start" >&2; cat "$BENCH_OUT/$side.log" >&2; exit 1; }
}
cleanup() { for s in on off; do [ -n "${PID[$s]:-}" ] && kill "${PID[$s]}" 2>/dev/null; done; true; }
trap cleanup EXIT
start on
start off
echo "commit $commit; N=$N M=$M RATE=$RATE RUNS=$RUNS level=$LEVEL min_bytes=$MIN_BYTES" | tee "$BENCH_OUT/run.txt"
for r in $(seq 1 "$RUNS"); do
  for side in on off; do
    echo "+ run $r compression $side" >&2
    GOMAXPROCS=1 taskset -c "$client_cpu" timeout 600 "$BENCH_OUT/deflatebench" run --port "${PORT[$side]}" --pid "${PID[$side]}" \
      --app-id bench --key bench-key --secret bench-secret -n "$N" -m "$M" --rate "$RATE" >"$BENCH_OUT/last.txt" 2>&1 || true
    cat "$BENCH_OUT/last.txt" >>"$BENCH_OUT/log.txt"
    grep -a -v '^{' "$BENCH_OUT/last.txt" >&2 || true
    grep -a '^{' "$BENCH_OUT/last.txt" | tail -1 >>"$BENCH_OUT/$side.jsonl" || true
    sleep 1
  done
done
"$BENCH_OUT/deflatebench" table "$BENCH_OUT/on.jsonl" "$BENCH_OUT/off.jsonl" | tee "$BENCH_OUT/table.md"
