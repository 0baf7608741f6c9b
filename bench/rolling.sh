#!/usr/bin/env bash
# Rolling restart under load (issue 23; not in CI): three reverbgo nodes on one Redis,
# 1,000 subscribers of 100 private channels, 500 events/s through the HTTP API, and each node
# in turn SIGTERMed (4200: its sockets reconnect to the others) and restarted. Runs twice:
# without recovery (plain resubscribe: what a Reverb/soketi/Pusher app sees) and with it
# (apps[].recovery on, clients resume as clients/recovery does), and prints lost and
# duplicated deliveries of each.
#
#   bench/rolling.sh                          # standalone Redis, both runs
#   bench/rolling.sh --topology cluster       # any chaos flag: --clients, --channels, --rate
#   DRAIN_DELAY=5 DRAIN_PERIOD=10 bench/rolling.sh   # the nodes' server.drain_delay/drain_period
#                                             # (default 0 and 0: every socket told 4200 at once)
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p bin
CGO_ENABLED=0 go build -o bin/reverbgo ./cmd/reverbgo
go build -o bin/chaos ./bench/chaos
ulimit -n "$(ulimit -Hn)"
status=0
for rec in false true; do
  bin/chaos --bin bin/reverbgo --root . --rolling --recovery="$rec" "$@" || status=$?
done
exit $status
