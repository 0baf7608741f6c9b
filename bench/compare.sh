#!/usr/bin/env bash
# Interleaved comparison of reverbgo against soketi and rawserver (the Go + gorilla floor),
# with the shared load tool in ../shared/bench. Every server is pinned to core 0 (Go ones
# with GOMAXPROCS=1), the client to core 1; the ratios printed are reverbgo / peer, from
# per-side medians (ab.sh: one warm-up per side, then A,B,A,B,...).
#
#   bench/compare.sh [MODE...]     MODE: fanout fanout_paced clientevents connections memory hold19k
#
# Environment: RUNS (3), CONNS (10000), BENCH_OUT (results folder; default a new mktemp -d),
# COALESCE_MS (reverbgo's server.write_coalesce_ms; unset = the default, for the latency/CPU curve).
# Only 127.0.0.1 is ever targeted; every server stops by itself after LIFETIME seconds.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
shared=${SHARED_BENCH:-$root/../shared/bench}
[ -d "$shared" ] || { echo "compare.sh: no shared bench kit at $shared" >&2; exit 1; }
modes=${*:-fanout fanout_paced clientevents connections memory hold19k}
RUNS=${RUNS:-3}
CONNS=${CONNS:-10000}
export LIFETIME=${LIFETIME:-3600}
export BENCH_OUT=${BENCH_OUT:-$(mktemp -d -t reverbgo-bench.XXXXXX)}
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
cat >"$BENCH_OUT/reverbgo.yaml" <<YAML
server: {host: 127.0.0.1, port: 16401${COALESCE_MS:+, write_coalesce_ms: $COALESCE_MS}}
apps:
  - {app_id: $APP_ID, key: $APP_KEY, secret: $APP_SECRET, client_event_rate_limit: 0, max_presence_members: 2000}
YAML
start_ours() {
  GOMAXPROCS=1 setsid taskset -c 0 timeout "$LIFETIME" "$BENCH_OUT/reverbgo" start \
    --config "$BENCH_OUT/reverbgo.yaml" --log-level warn >>"$BENCH_OUT/reverbgo.log" 2>&1 </dev/null &
  for _ in $(seq 1 100); do curl -fsS http://127.0.0.1:16401/up >/dev/null 2>&1 && break; sleep 0.1; done
  OURS=$(pgrep -f "^$BENCH_OUT/reverbgo start" | head -1) # the server, not its timeout wrapper
}
start_soketi() { SOKETI=$(PORT=16301 "$scripts/start_soketi.sh" | tail -1); }
start_raw() { RAW=$(PORT=16501 "$scripts/start_rawserver.sh" | tail -1); }
stop() { "$scripts/stop_pid.sh" "$1" >/dev/null 2>&1 || true; sleep 1; }
start_ours
start_soketi
start_raw
cleanup() { for p in "$OURS" "$SOKETI" "$RAW"; do "$scripts/stop_pid.sh" "$p" >/dev/null 2>&1 || true; done; }
trap cleanup EXIT
echo "pids: reverbgo $OURS soketi $SOKETI rawserver $RAW" | tee "$BENCH_OUT/pids.txt"

ab() { "$scripts/ab.sh" "$@" 2>&1 | tail -25; }
for mode in $modes; do
  echo "=== $mode" | tee -a "$BENCH_OUT/summary.txt"
  case $mode in
  fanout)
    ab fanout "$RUNS" 16301 "$SOKETI" 16401 "$OURS" -n 1000 -m 200 | tee -a "$BENCH_OUT/summary.txt"
    ab fanout "$RUNS" 16501 "$RAW" 16401 "$OURS" -n 1000 -m 200 | tee -a "$BENCH_OUT/summary.txt" ;;
  fanout_paced)
    ab fanout "$RUNS" 16301 "$SOKETI" 16401 "$OURS" -n 1000 -m 200 --rate 20 | tee -a "$BENCH_OUT/summary.txt"
    ab fanout "$RUNS" 16501 "$RAW" 16401 "$OURS" -n 1000 -m 200 --rate 20 | tee -a "$BENCH_OUT/summary.txt" ;;
  clientevents)
    ab clientevents "$RUNS" 16301 "$SOKETI" 16401 "$OURS" -n 1000 --senders 10 -m 20 --rate 2 | tee -a "$BENCH_OUT/summary.txt" ;;
  connections)
    ab connections "$RUNS" 16301 "$SOKETI" 16401 "$OURS" -n "$CONNS" --hold 2s | tee -a "$BENCH_OUT/summary.txt"
    ab connections "$RUNS" 16501 "$RAW" 16401 "$OURS" -n "$CONNS" --hold 2s | tee -a "$BENCH_OUT/summary.txt" ;;
  hold19k)
    # 18,000 idle subscribed connections held for 90 s; once they are all up, a 1,000-subscriber
    # fan-out runs: together 19,000 sockets on one process (fd limit 20,000).
    GOMAXPROCS=1 taskset -c 1 "$PUSHERBENCH" connections --port 16401 --pid "$OURS" -n 18000 \
      --app-id $APP_ID --key $APP_KEY --secret $APP_SECRET --hold 90s >"$BENCH_OUT/hold19k-conns.txt" 2>&1 &
    holder=$!
    for _ in $(seq 1 600); do grep -q "^hold" "$BENCH_OUT/hold19k-conns.txt" 2>/dev/null && break
      [ "$(ls /proc/"$OURS"/fd | wc -l)" -ge 18000 ] && break; sleep 0.2; done
    sleep 2
    GOMAXPROCS=1 taskset -c 1 "$PUSHERBENCH" fanout --port 16401 --pid "$OURS" -n 1000 -m 200 \
      --app-id $APP_ID --key $APP_KEY --secret $APP_SECRET >"$BENCH_OUT/hold19k-fanout.txt" 2>&1 || true
    echo "sockets open during the fan-out: $(($(ls /proc/"$OURS"/fd | wc -l)))" | tee -a "$BENCH_OUT/summary.txt"
    wait "$holder" || true
    tail -1 "$BENCH_OUT/hold19k-fanout.txt" | tee -a "$BENCH_OUT/summary.txt"
    tail -1 "$BENCH_OUT/hold19k-conns.txt" | tee -a "$BENCH_OUT/summary.txt" ;;
  memory)
    # KiB per idle connection needs a fresh process per run (RSS does not shrink between
    # runs), so each server is restarted before each of its runs; sides are interleaved.
    for r in $(seq 1 "$RUNS"); do
      for side in soketi reverbgo rawserver; do
        case $side in
        soketi) stop "$SOKETI"; start_soketi; port=16301 pid=$SOKETI ;;
        reverbgo) stop "$OURS"; start_ours; port=16401 pid=$OURS ;;
        rawserver) stop "$RAW"; start_raw; port=16501 pid=$RAW ;;
        esac
        sleep 2
        GOMAXPROCS=1 taskset -c 1 "$PUSHERBENCH" connections --port "$port" --pid "$pid" -n "$CONNS" \
          --app-id $APP_ID --key $APP_KEY --secret $APP_SECRET --hold 2s 2>&1 | grep '^{' | tail -1 >>"$BENCH_OUT/memory-$side.jsonl"
      done
    done
    for side in soketi reverbgo rawserver; do
      echo "-- $side" | tee -a "$BENCH_OUT/summary.txt"
      "$PUSHERBENCH" median "$BENCH_OUT/memory-$side.jsonl" | grep -E "kib_per_conn|server_cpu_us_per_conn|connect_rate|dropped" | tee -a "$BENCH_OUT/summary.txt"
    done ;;
  *) echo "unknown mode $mode" >&2; exit 1 ;;
  esac
done
echo "compare.sh: summary in $BENCH_OUT/summary.txt" >&2
