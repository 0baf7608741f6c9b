#!/usr/bin/env bash
# Compares two commits of reverbgo on the shared bench: an A/A pair (HEAD twice) for the noise,
# then OLD vs HEAD interleaved (pusherbench/scripts/ab.sh, 3 runs a side) at paced 100 and 20
# events/s to 1,000 subscribers, client events (10 senders x 2/s x 20 to 1,000 listeners, as
# compare.sh) and for 10,000 connections, then KiB per idle connection from a
# fresh process per run. Servers on core 0 (GOMAXPROCS=1), the client on core 1. Quiet machine
# only. Loopback only; every server stops by itself after 20 minutes.
#
#   OLD=0bd1614 bench/ab-commits.sh        # results in $OUT (default /tmp/abreg)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
OLD=${OLD:-0bd1614}
OUT=${OUT:-/tmp/abreg}; rm -rf $OUT; mkdir -p $OUT
export BENCH_OUT=$OUT
cp -r ${SHARED_BENCH:-$root/../shared/bench} $OUT/kit; chmod -R u+w $OUT/kit
(cd $OUT/kit/pusherbench && go build -o $OUT/pusherbench .)
export PUSHERBENCH=$OUT/pusherbench APP_ID=app-id APP_KEY=app-key APP_SECRET=app-secret
src=$OUT/oldsrc; git -C "$root" worktree add -q "$src" "$OLD"
(cd $src && CGO_ENABLED=0 go build -o $OUT/reverbgo-old ./cmd/reverbgo)
(cd $root && CGO_ENABLED=0 go build -o $OUT/reverbgo-new ./cmd/reverbgo)
mk() { cat > $OUT/$1.yaml <<YAML
server: {host: 127.0.0.1, port: $2}
apps:
  - {app_id: app-id, key: app-key, secret: app-secret, client_event_rate_limit: 0, max_presence_members: 2000}
YAML
}
start() { # bin cfg port
  GOMAXPROCS=1 setsid taskset -c 0 timeout 1200 $OUT/$1 start --config $OUT/$2.yaml --log-level warn >>$OUT/$2.log 2>&1 </dev/null &
  for _ in $(seq 1 100); do curl -fsS http://127.0.0.1:$3/up >/dev/null 2>&1 && break; sleep 0.1; done
  pgrep -f "^$OUT/$1 start --config $OUT/$2.yaml" | head -1 # the server, not its timeout wrapper
}
# stop PID...: TERM, then wait until each has exited (a drain outlasts a fixed sleep, and the
# next server on the same port would fail to bind).
stop() {
  kill "$@" 2>/dev/null || true
  for p in "$@"; do
    for _ in $(seq 1 300); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
  done
}
mk a1 16601; mk a2 16602; mk old 16611; mk new 16612
S=$OUT/kit/pusherbench/scripts
# A/A: the new binary twice
P1=$(start reverbgo-new a1 16601); P2=$(start reverbgo-new a2 16602)
$S/ab.sh fanout 3 16601 $P1 16602 $P2 -n 1000 -m 1000 --rate 100 > $OUT/aa-paced100.txt 2>&1 || true
stop $P1 $P2
PO=$(start reverbgo-old old 16611); PN=$(start reverbgo-new new 16612)
$S/ab.sh fanout 3 16611 $PO 16612 $PN -n 1000 -m 1000 --rate 100 > $OUT/ab-paced100.txt 2>&1 || true
$S/ab.sh fanout 3 16611 $PO 16612 $PN -n 1000 -m 200 --rate 20 > $OUT/ab-paced20.txt 2>&1 || true
$S/ab.sh clientevents 3 16611 $PO 16612 $PN -n 1000 --senders 10 -m 20 --rate 2 > $OUT/ab-clientevents.txt 2>&1 || true
grep -a -h '^{' $OUT/aa-paced100.txt $OUT/ab-paced100.txt $OUT/ab-paced20.txt $OUT/ab-clientevents.txt || true
stop $PO $PN
# connections: fresh processes (RSS never shrinks)
PO=$(start reverbgo-old old 16611); PN=$(start reverbgo-new new 16612)
$S/ab.sh connections 3 16611 $PO 16612 $PN -n 10000 > $OUT/ab-conns.txt 2>&1 || true
stop $PO $PN
# memory per idle connection: a fresh process per run, old and new interleaved
for r in 1 2; do
  for side in old new; do
    port=16611; [ $side = new ] && port=16612
    P=$(start reverbgo-$side $side $port)
    GOMAXPROCS=1 taskset -c 1 timeout 300 $PUSHERBENCH connections --port $port --pid $P --app-id app-id --key app-key --secret app-secret -n 10000 | tail -1 >> $OUT/mem-$side.jsonl || true
    stop $P
  done
done
git -C "$root" worktree remove --force "$src" || true
echo done
