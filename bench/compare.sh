#!/usr/bin/env bash
# One comparison run of issue 12's scenarios: reverbgo against soketi and rawserver (the Go +
# gorilla floor of one write per delivery), with an A/A side (a second reverbgo process, the
# same binary) that shows the run's noise, and optionally nbio (bench/nbioserver, issue 10).
# Every server is pinned to core 0 (Go ones with GOMAXPROCS=1), the client to core 1 with
# GOMAXPROCS=1. Within each scenario the sides are interleaved (one warm-up per side in the
# first scenario, then side1, side2, ... RUNS times). At the end bench/comparetable prints one
# table: per-side medians, reverbgo / peer, the A/A ratio, the target and whether it is met.
#
#   bench/compare.sh [SCENARIO...]
#     fanout        unpaced, 1,000 subscribers × 2,000 events (client-bound)
#     paced100      1,000 subscribers × 1,000 events at 100 events/s (100k deliveries/s)
#     paced20       1,000 subscribers × 200 events at 20 events/s (20k deliveries/s)
#     clientevents  10 senders × 2 events/s × 20 → 1,000 listeners
#     connections   CONNS sockets connected + subscribed, held 2 s: CPU per connection
#     memory        CONNS idle sockets on a fresh process per run: KiB per connection
#     hold19k       18,000 idle + a 1,000-subscriber fan-out on reverbgo alone (not in the table)
#
# Environment: RUNS (3), CONNS (10000), SIDES (soketi reverbgo reverbgo-aa rawserver, plus nbio
# when bench/nbioserver builds), BENCH_OUT (results; default a new mktemp -d), SERVER_FLAGS
# (extra config YAML lines for reverbgo's server: block, e.g. "write_coalesce_ms: 0"),
# AA_APP_FLAGS (extra YAML of the A/A side's app only, which turns the A/A column into an A/B
# of one feature: AA_APP_FLAGS="recovery: {enabled: true}" for recovery on against off),
# AA_BIN (a reverbgo binary the A/A side runs instead of this checkout's: an A/B of two builds,
# e.g. a lever's branch against main, built as this one is, CGO_ENABLED=0; the A/A column is
# then that A/B, not the run's noise: take the noise from a plain run of the same window),
# AA_SERVER_FLAGS (the same for the server: block, in place of SERVER_FLAGS on the A/A side:
# AA_SERVER_FLAGS="io_uring: false" for writev against the io_uring default), NBIO_FLAGS
# (extra nbioserver flags, e.g. "--write-mode message" for nbio's own per-subscriber framing).
# PROFILE (scenarios, e.g. "clientevents connections"): after a scenario's RUNS, one more run
# of the reverbgo side alone with a CPU profile of the server (pprof over --debug-addr) written
# to $BENCH_OUT/<scenario>/reverbgo.pprof; that run is not in the table (profiling costs CPU).
# Measure only on a quiet machine: nothing else running. Only 127.0.0.1 is targeted; every
# server stops by itself after LIFETIME seconds.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
shared=${SHARED_BENCH:-$root/../shared/bench}
[ -d "$shared" ] || { echo "compare.sh: no shared bench kit at $shared" >&2; exit 1; }
scenarios=${*:-fanout paced100 paced20 clientevents connections memory}
RUNS=${RUNS:-3}
CONNS=${CONNS:-10000}
export LIFETIME=${LIFETIME:-3600}
export BENCH_OUT=${BENCH_OUT:-$(mktemp -d -t reverbgo-bench.XXXXXX)}
mkdir -p "$BENCH_OUT"
echo "compare.sh: results in $BENCH_OUT" >&2
ulimit -n "$(ulimit -Hn)"

# The shared kit may be read-only: work on a copy.
kit=$BENCH_OUT/kit
[ -d "$kit" ] || { cp -r "$shared" "$kit"; chmod -R u+w "$kit"; }
scripts=$kit/pusherbench/scripts
export PUSHERBENCH=$BENCH_OUT/pusherbench
[ -x "$PUSHERBENCH" ] || (cd "$kit/pusherbench" && go build -o "$PUSHERBENCH" .)
export APP_ID=app-id APP_KEY=app-key APP_SECRET=app-secret

(cd "$root" && CGO_ENABLED=0 go build -o "$BENCH_OUT/reverbgo" ./cmd/reverbgo)
if [ -n "${AA_BIN:-}" ]; then cp "$AA_BIN" "$BENCH_OUT/reverbgo-aa-bin"; fi
(cd "$root" && go build -o "$BENCH_OUT/comparetable" ./bench/comparetable)
default_sides="soketi reverbgo reverbgo-aa rawserver"
if [ -d "$root/bench/nbioserver" ] && (cd "$root/bench/nbioserver" && go build -o "$BENCH_OUT/nbioserver" .) 2>/dev/null; then
  default_sides="$default_sides nbio"
fi
SIDES=${SIDES:-$default_sides}
commit=$(cd "$root" && git rev-parse --short HEAD)$(cd "$root" && git diff --quiet HEAD -- . ':!bench' || echo "+dirty")
aa_bin=""
[ -n "${AA_BIN:-}" ] && aa_bin="; the A/A side runs $AA_BIN (sha256 $(sha256sum "$AA_BIN" | cut -c1-16)), its column is an A/B"
echo "commit $commit; sides: $SIDES; runs: $RUNS$aa_bin" | tee "$BENCH_OUT/run.txt"

declare -A PORT PID
PORT=([soketi]=16301 [reverbgo]=16401 [reverbgo-aa]=16402 [rawserver]=16501 [nbio]=16601)

start_reverbgo() { # side
  local port=${PORT[$1]} extra="" sflags=${SERVER_FLAGS:-}
  [ "$1" = reverbgo-aa ] && extra=${AA_APP_FLAGS:-} && sflags=${AA_SERVER_FLAGS:-$sflags}
  cat >"$BENCH_OUT/$1.yaml" <<YAML
server:
  host: 127.0.0.1
  port: $port
${sflags:+  $sflags}
apps:
  - {app_id: $APP_ID, key: $APP_KEY, secret: $APP_SECRET, client_event_rate_limit: 0, max_presence_members: 2000${extra:+, $extra}}
YAML
  local dbg=()
  [ "$1" = reverbgo ] && [ -n "${PROFILE:-}" ] && dbg=(--debug-addr "127.0.0.1:$((port + 1000))")
  local bin=$BENCH_OUT/reverbgo
  [ "$1" = reverbgo-aa ] && [ -n "${AA_BIN:-}" ] && bin=$BENCH_OUT/reverbgo-aa-bin
  GOMAXPROCS=1 setsid taskset -c 0 timeout "$LIFETIME" "$bin" start \
    --config "$BENCH_OUT/$1.yaml" --log-level warn "${dbg[@]}" >>"$BENCH_OUT/$1.log" 2>&1 </dev/null &
  for _ in $(seq 1 100); do curl -fsS "http://127.0.0.1:$port/up" >/dev/null 2>&1 && break; sleep 0.1; done
  PID[$1]=$(pgrep -f "^$bin start --config $BENCH_OUT/$1.yaml" | head -1) # not the timeout wrapper
}
start_side() { # side
  case $1 in
  soketi) PID[$1]=$(PORT=${PORT[$1]} "$scripts/start_soketi.sh" | tail -1) ;;
  rawserver) PID[$1]=$(PORT=${PORT[$1]} "$scripts/start_rawserver.sh" | tail -1) ;;
  nbio)
    GOMAXPROCS=1 setsid taskset -c 0 timeout "$LIFETIME" "$BENCH_OUT/nbioserver" --port "${PORT[$1]}" \
      --app-id "$APP_ID" --key "$APP_KEY" --secret "$APP_SECRET" --lifetime "${LIFETIME}s" ${NBIO_FLAGS:-} >>"$BENCH_OUT/nbio.log" 2>&1 </dev/null &
    for _ in $(seq 1 100); do (exec 3<>"/dev/tcp/127.0.0.1/${PORT[$1]}") 2>/dev/null && break; sleep 0.1; done
    PID[$1]=$(pgrep -f "^$BENCH_OUT/nbioserver --port ${PORT[$1]}" | head -1) ;;
  *) start_reverbgo "$1" ;;
  esac
  [ -n "${PID[$1]:-}" ] || { echo "compare.sh: $1 did not start" >&2; exit 1; }
}
stop_side() { "$scripts/stop_pid.sh" "${PID[$1]}" >/dev/null 2>&1 || true; sleep 1; }
cleanup() { for s in $SIDES; do [ -n "${PID[$s]:-}" ] && "$scripts/stop_pid.sh" "${PID[$s]}" >/dev/null 2>&1; done; true; }
trap cleanup EXIT
for s in $SIDES; do start_side "$s"; done
for s in $SIDES; do echo "$s: port ${PORT[$s]} pid ${PID[$s]}"; done | tee -a "$BENCH_OUT/run.txt"

CREDS=(--app-id "$APP_ID" --key "$APP_KEY" --secret "$APP_SECRET")
bench() { # side mode flags...: one client run; its JSON summary line to stdout
  local side=$1 mode=$2; shift 2
  GOMAXPROCS=1 taskset -c 1 timeout 300 "$PUSHERBENCH" "$mode" --port "${PORT[$side]}" --pid "${PID[$side]}" \
    "${CREDS[@]}" "$@" >"$BENCH_OUT/last.txt" 2>&1 || true
  cat "$BENCH_OUT/last.txt" >>"$BENCH_OUT/log.txt"
  grep -a "^{" "$BENCH_OUT/last.txt" | tail -1 || true
}
warm=1
# sides_for SCENARIO: the sides that can run it. rawserver and nbioserver ignore client
# events; the unpaced fan-out is client-bound, so nbio (a transport question) sits it out.
sides_for() {
  local s out=""
  for s in $SIDES; do
    case $1/$s in
    clientevents/rawserver | clientevents/nbio | fanout/nbio) ;;
    *) out="$out $s" ;;
    esac
  done
  echo "$out"
}
rotate() { # scenario mode flags...: RUNS interleaved rounds over the scenario's sides
  local sc=$1; shift
  local sides
  sides=$(sides_for "$sc")
  mkdir -p "$BENCH_OUT/$sc"
  if [ $warm = 1 ]; then
    for s in $SIDES; do echo "+ warm-up $s" >>"$BENCH_OUT/log.txt"; bench "$s" fanout -n 1000 -m 200 >/dev/null; sleep 2; done
    warm=0
  fi
  for r in $(seq 1 "$RUNS"); do
    for s in $sides; do
      echo "+ $sc run $r $s: $*" | tee -a "$BENCH_OUT/log.txt" >&2
      bench "$s" "$@" >>"$BENCH_OUT/$sc/$s.jsonl"
      sleep 2
    done
  done
  if [[ " ${PROFILE:-} " == *" $sc "* ]] && [[ " $sides " == *" reverbgo "* ]]; then
    echo "+ $sc profile run reverbgo: $*" | tee -a "$BENCH_OUT/log.txt" >&2
    (sleep 1 && curl -s -o "$BENCH_OUT/$sc/reverbgo.pprof" \
      "http://127.0.0.1:$((PORT[reverbgo] + 1000))/debug/pprof/profile?seconds=${PROFILE_SECONDS:-8}") &
    local prof=$!
    bench reverbgo "$@" >"$BENCH_OUT/$sc/reverbgo-profiled.json"
    wait "$prof" || true
    sleep 2
  fi
}

for sc in $scenarios; do
  case $sc in
  fanout) rotate fanout fanout -n 1000 -m 2000 ;;
  paced100) rotate paced100 fanout -n 1000 -m 1000 --rate 100 ;;
  paced20) rotate paced20 fanout -n 1000 -m 200 --rate 20 ;;
  clientevents) rotate clientevents clientevents -n 1000 --senders 10 -m 20 --rate 2 ;;
  connections) rotate connections connections -n "$CONNS" --hold 2s ;;
  memory)
    # RSS does not shrink between runs: every side restarts before each of its runs.
    mkdir -p "$BENCH_OUT/memory"
    for r in $(seq 1 "$RUNS"); do
      for s in $(sides_for memory); do
        stop_side "$s"; start_side "$s"; sleep 2
        echo "+ memory run $r $s" | tee -a "$BENCH_OUT/log.txt" >&2
        bench "$s" connections -n "$CONNS" --hold 2s >>"$BENCH_OUT/memory/$s.jsonl"
      done
    done ;;
  hold19k)
    # 18,000 idle subscribed sockets held 90 s; once up, a 1,000-subscriber fan-out runs: 19,000
    # sockets on one process (fd limit 20,000).
    GOMAXPROCS=1 taskset -c 1 "$PUSHERBENCH" connections --port "${PORT[reverbgo]}" --pid "${PID[reverbgo]}" -n 18000 \
      "${CREDS[@]}" --hold 90s >"$BENCH_OUT/hold19k-conns.txt" 2>&1 &
    holder=$!
    for _ in $(seq 1 600); do [ "$(ls /proc/"${PID[reverbgo]}"/fd | wc -l)" -ge 18000 ] && break; sleep 0.2; done
    sleep 2
    bench reverbgo fanout -n 1000 -m 200 >"$BENCH_OUT/hold19k-fanout.txt"
    echo "sockets open during the fan-out: $(ls /proc/"${PID[reverbgo]}"/fd | wc -l)" | tee -a "$BENCH_OUT/run.txt"
    wait "$holder" || true
    cat "$BENCH_OUT/hold19k-fanout.txt" | tee -a "$BENCH_OUT/run.txt"
    grep -a '^{' "$BENCH_OUT/hold19k-conns.txt" | tail -1 | tee -a "$BENCH_OUT/run.txt" ;;
  *) echo "compare.sh: unknown scenario $sc" >&2; exit 1 ;;
  esac
done

{
  echo
  echo "Comparison run at $commit, $(date -u +%Y-%m-%dT%H:%MZ), RUNS=$RUNS, sides: $SIDES${SERVER_FLAGS:+, reverbgo server: $SERVER_FLAGS}"
  echo
  "$BENCH_OUT/comparetable" "$BENCH_OUT"
} | tee "$BENCH_OUT/table.md"
echo "compare.sh: table in $BENCH_OUT/table.md, every run in $BENCH_OUT/log.txt" >&2
