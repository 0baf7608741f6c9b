#!/usr/bin/env bash
# Compares the cluster knee (bench/cluster.sh) of two commits: RUNS runs a side, OLD and this
# checkout interleaved (old, new, old, new, ...), each behind ../shared/bench/quiet.sh (it
# waits until the machine is quiet and keeps its line). Prints every run's knee and the
# medians. The knee of one run moves with the 2-core machine's tail latency (one p99 over
# the bound ends a run), so only medians of interleaved runs compare two builds.
#
#   OLD=84f5a07 bench/knee-ab.sh                          # F = 1, interest routing (issue 31)
#   OLD=84f5a07 RUNS=7 RATES=2000,3000,4000,5000 bench/knee-ab.sh
#
# Environment: OLD (commit), RUNS (5), RATES (1000,1500,...,6000, steps of 500), OUT (results; default a
# new mktemp -d); every other variable of bench/cluster.sh passes through (F1_CHANNELS
# defaults to 3000 and ROUTING to interest here). Loopback only.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
OLD=${OLD:?OLD=<commit> to compare against}
RUNS=${RUNS:-5}
export RATES=${RATES:-1000,1500,2000,2500,3000,3500,4000,4500,5000,5500,6000}
export F1_CHANNELS=${F1_CHANNELS:-3000} ROUTING=${ROUTING:-interest}
OUT=${OUT:-$(mktemp -d -t reverbgo-knee-ab.XXXXXX)}
mkdir -p "$OUT"
quiet=${QUIET:-$root/../shared/bench/quiet.sh}
src=$OUT/oldsrc
git -C "$root" worktree add -q --detach "$src" "$OLD"
trap 'git -C "$root" worktree remove --force "$src" >/dev/null 2>&1 || true' EXIT
(cd "$src" && CGO_ENABLED=0 go build -o "$OUT/reverbgo-old" ./cmd/reverbgo)
(cd "$root" && CGO_ENABLED=0 go build -o "$OUT/reverbgo-new" ./cmd/reverbgo)
new=$(git -C "$root" rev-parse --short HEAD)
echo "knee-ab: old $OLD, new $new, $RUNS runs a side, RATES=$RATES, results in $OUT" | tee "$OUT/knees.txt"
for r in $(seq 1 "$RUNS"); do
  for side in old new; do
    until q=$("$quiet" 5 5); do echo "$q" >&2; sleep 10; done
    dir=$OUT/$side-$r
    BIN=$OUT/reverbgo-$side BENCH_OUT=$dir "$root/bench/cluster.sh" >"$dir.log" 2>&1 || true
    knee=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["knee_publishes_per_s"])' "$dir/summary.json" 2>/dev/null || echo failed)
    echo "$side run $r: knee $knee publishes/s | $q" | tee -a "$OUT/knees.txt"
  done
done
python3 - "$OUT/knees.txt" <<'PY' | tee -a "$OUT/knees.txt"
import re, statistics, sys
k = {"old": [], "new": []}
for line in open(sys.argv[1]):
    m = re.match(r"(old|new) run \d+: knee (\d+)", line)
    if m:
        k[m.group(1)].append(int(m.group(2)))
mo, mn = statistics.median(k["old"]), statistics.median(k["new"])
print(f"median knee: old {mo:g}, new {mn:g} publishes/s; new/old {mn / mo:.2f}" if mo else f"median knee: old {mo:g}, new {mn:g}")
PY
