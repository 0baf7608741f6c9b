#!/usr/bin/env bash
# The cost figures of issue 31 for one build, each step behind ../shared/bench/quiet.sh (retried
# until the machine is quiet; its line is written to $OUT/quiet.txt):
#   1. recovery on against off, CPU per delivery, one node (compare.sh's A/B of an app flag:
#      SIDES="reverbgo reverbgo-aa" AA_APP_FLAGS="recovery: {enabled: true}", paced100 paced20);
#   2. the HTTP API's publish answer time p50/p99 at 200 and 2,000 publishes/s, three nodes on
#      standalone Redis (bench/cluster.sh, 300 subscribers on 30 channels), recovery off and on;
#   3. the knee of bench/cluster.sh at F = 1 (3,000 channels), interest routing.
#
#   OUT=results BIN=path/to/reverbgo bench/recoverycost.sh
#
# SKIP_AB=1 / SKIP_KNEE=1 leave out step 1 / step 3. BIN (default: built from this checkout) is the server measured by steps 2 and 3; step 1 builds
# this checkout (run it from the commit being measured). Only 127.0.0.1 is targeted.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:?OUT=results folder}
mkdir -p "$OUT"
if [ -z "${BIN:-}" ]; then
  BIN=$OUT/reverbgo
  (cd "$root" && CGO_ENABLED=0 go build -o "$BIN" ./cmd/reverbgo)
fi
export BIN
quiet() {
  until q=$("$root/../shared/bench/quiet.sh" 2>&1); do echo "$q" >&2; sleep 20; done
  echo "$1 $q" | tee -a "$OUT/quiet.txt"
}
git -C "$root" rev-parse HEAD >"$OUT/commit.txt"
if [ -z "${SKIP_AB:-}" ]; then
  quiet ab
  BENCH_OUT=$OUT/ab SIDES="reverbgo reverbgo-aa" RUNS=3 AA_APP_FLAGS="recovery: {enabled: true}" \
    "$root/bench/compare.sh" paced100 paced20 >"$OUT/ab.log" 2>&1
fi
for rec in off on; do
  extra=""
  [ "$rec" = on ] && extra="recovery: {enabled: true}"
  quiet "api-$rec"
  BENCH_OUT=$OUT/api-$rec APP_EXTRA="$extra" RATES=200,2000 STEP=10s \
    "$root/bench/cluster.sh" >"$OUT/api-$rec.log" 2>&1 || true
done
[ -n "${SKIP_KNEE:-}" ] || quiet knee
[ -n "${SKIP_KNEE:-}" ] || BENCH_OUT=$OUT/knee F1_CHANNELS=3000 ROUTING=interest RATES=1000,2000,5000,10000 \
  "$root/bench/cluster.sh" >"$OUT/knee.log" 2>&1 || true
grep -h '^rate' "$OUT"/api-*.log "$OUT"/knee.log || true
tail -30 "$OUT/ab.log" 2>/dev/null || true
