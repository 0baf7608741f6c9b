#!/usr/bin/env bash
# Interleaved comparison of reverbgo against its peers — soketi, rawserver (the Go + gorilla
# floor) and, on request, nbioserver (rawserver rebuilt on github.com/lesismal/nbio, in
# bench/nbioserver) — with the shared load tool in ../shared/bench. Every server is pinned to
# core 0 (Go ones with GOMAXPROCS=1), the client to core 1; the ratios printed are
# reverbgo / peer, from per-side medians (ab.sh: one warm-up per side, then A,B,A,B,...).
#
#   bench/compare.sh [MODE...]     MODE: fanout fanout_paced fanout_paced100 clientevents
#                                        connections memory hold19k
#
# fanout_paced is 1,000 subscribers x 20 events/s (20k deliveries/s), fanout_paced100 the same
# at 100 events/s (100k deliveries/s). clientevents runs against soketi only (the Go peers
# ignore client events), hold19k against reverbgo only.
# Environment: PEERS ("soketi rawserver"; any of soketi rawserver nbio), RUNS (3),
# CONNS (10000), SUBS (1000, fanout subscribers), BENCH_OUT (results folder; default a new mktemp -d).
# Only 127.0.0.1 is ever targeted; every server stops by itself after LIFETIME seconds.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
shared=${SHARED_BENCH:-$root/../shared/bench}
[ -d "$shared" ] || { echo "compare.sh: no shared bench kit at $shared" >&2; exit 1; }
modes=${*:-fanout fanout_paced clientevents connections memory hold19k}
PEERS=${PEERS:-soketi rawserver}
for p in $PEERS; do
  case $p in soketi | rawserver | nbio) ;; *) echo "compare.sh: unknown peer $p (soketi rawserver nbio)" >&2; exit 1 ;; esac
done
has_peer() { case " $PEERS " in *" $1 "*) return 0 ;; esac; return 1; }
RUNS=${RUNS:-3}
CONNS=${CONNS:-10000}
SUBS=${SUBS:-1000} # subscribers in the fanout modes (a smaller figure only for a smoke check)
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
server: {host: 127.0.0.1, port: 16401}
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
# nbioserver takes rawserver's flags; started like reverbgo (pinned, GOMAXPROCS=1, own lifetime).
start_nbio() {
  GOMAXPROCS=1 setsid taskset -c 0 timeout "$LIFETIME" "$BENCH_OUT/nbioserver" --port 16601 \
    --app-id $APP_ID --key $APP_KEY --secret $APP_SECRET --lifetime "${LIFETIME}s" \
    >>"$BENCH_OUT/nbioserver.log" 2>&1 </dev/null &
  for _ in $(seq 1 100); do curl -fsS http://127.0.0.1:16601/ >/dev/null 2>&1 && break; sleep 0.1; done
  NBIO=$(pgrep -f "^$BENCH_OUT/nbioserver --port 16601" | head -1)
  [ -n "$NBIO" ] || { echo "compare.sh: nbioserver did not start:" >&2; cat "$BENCH_OUT/nbioserver.log" >&2; exit 1; }
}
if has_peer nbio; then (cd "$root/bench/nbioserver" && CGO_ENABLED=0 go build -o "$BENCH_OUT/nbioserver" .); fi
stop() { "$scripts/stop_pid.sh" "$1" >/dev/null 2>&1 || true; sleep 1; }
OURS= SOKETI= RAW= NBIO=
cleanup() { for p in $OURS $SOKETI $RAW $NBIO; do "$scripts/stop_pid.sh" "$p" >/dev/null 2>&1 || true; done; }
trap cleanup EXIT
start_ours
! has_peer soketi || start_soketi
! has_peer rawserver || start_raw
! has_peer nbio || start_nbio
echo "pids: reverbgo $OURS soketi ${SOKETI:--} rawserver ${RAW:--} nbioserver ${NBIO:--}" | tee "$BENCH_OUT/pids.txt"
# peer_port/peer_pid NAME: where a peer listens and the PID to measure.
peer_port() { case $1 in soketi) echo 16301 ;; rawserver) echo 16501 ;; nbio) echo 16601 ;; esac; }
peer_pid() { case $1 in soketi) echo "$SOKETI" ;; rawserver) echo "$RAW" ;; nbio) echo "$NBIO" ;; esac; }
# vs_peers MODE FLAGS...: ab.sh of every peer (A) against reverbgo (B).
vs_peers() {
  local mode=$1 p; shift
  for p in $PEERS; do
    echo "--- $p (A) vs reverbgo (B)" | tee -a "$BENCH_OUT/summary.txt"
    ab "$mode" "$RUNS" "$(peer_port "$p")" "$(peer_pid "$p")" 16401 "$OURS" "$@" | tee -a "$BENCH_OUT/summary.txt"
  done
}

ab() { "$scripts/ab.sh" "$@" 2>&1 | tail -25; }
for mode in $modes; do
  echo "=== $mode" | tee -a "$BENCH_OUT/summary.txt"
  case $mode in
  fanout) vs_peers fanout -n "$SUBS" -m 200 ;;
  fanout_paced) vs_peers fanout -n "$SUBS" -m 200 --rate 20 ;;
  fanout_paced100) vs_peers fanout -n "$SUBS" -m 1000 --rate 100 ;;
  clientevents)
    if has_peer soketi; then
      ab clientevents "$RUNS" 16301 "$SOKETI" 16401 "$OURS" -n 1000 --senders 10 -m 20 --rate 2 | tee -a "$BENCH_OUT/summary.txt"
    else echo "clientevents: soketi is not in PEERS, skipped" | tee -a "$BENCH_OUT/summary.txt"; fi ;;
  connections) vs_peers connections -n "$CONNS" --hold 2s ;;
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
      for side in reverbgo $PEERS; do
        case $side in
        soketi) stop "$SOKETI"; start_soketi; port=16301 pid=$SOKETI ;;
        reverbgo) stop "$OURS"; start_ours; port=16401 pid=$OURS ;;
        rawserver) stop "$RAW"; start_raw; port=16501 pid=$RAW ;;
        nbio) stop "$NBIO"; start_nbio; port=16601 pid=$NBIO ;;
        esac
        sleep 2
        GOMAXPROCS=1 taskset -c 1 "$PUSHERBENCH" connections --port "$port" --pid "$pid" -n "$CONNS" \
          --app-id $APP_ID --key $APP_KEY --secret $APP_SECRET --hold 2s 2>&1 | grep '^{' | tail -1 >>"$BENCH_OUT/memory-$side.jsonl"
      done
    done
    for side in reverbgo $PEERS; do
      echo "-- $side" | tee -a "$BENCH_OUT/summary.txt"
      "$PUSHERBENCH" median "$BENCH_OUT/memory-$side.jsonl" | grep -E "kib_per_conn|server_cpu_us_per_conn|connect_rate|dropped" | tee -a "$BENCH_OUT/summary.txt"
    done ;;
  *) echo "unknown mode $mode" >&2; exit 1 ;;
  esac
done
echo "compare.sh: summary in $BENCH_OUT/summary.txt" >&2
