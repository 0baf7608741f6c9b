#!/usr/bin/env bash
# The 100,000-connection run (issue 25; not in CI): six reverbgo nodes on one standalone
# Redis, 15,500 sockets on each (one load process per node: a process may hold 20,000 open
# files here, a node takes at most 19,000 WebSockets then (server.max_connections: 0), and
# after the kill each survivor holds 18,600), RSS per node, three broadcasts to the one
# channel all 93,000 sockets are subscribed to (time to the last delivery, p50/p99),
# then node 0 SIGKILLed: how long until its sockets are subscribed again on the other five,
# failed attempts, the survivors' CPU over that window, and one more broadcast that must
# reach every socket. Measure only on a quiet machine (../shared/bench/quiet.sh).
#
#   bench/hundredk.sh                       # any flag of bench/hundredk: --per-node, --nodes, --marks
#   bench/hundredk.sh --nodes 3 --per-node 12000 --stop term --drain-delay 0 --drain-period 10
#                                           # a drain seen from the survivors (issue 32)
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p bin
CGO_ENABLED=0 go build -o bin/reverbgo ./cmd/reverbgo
go build -o bin/hundredk ./bench/hundredk
ulimit -n "$(ulimit -Hn)"
exec bin/hundredk --bin bin/reverbgo --root . "$@"
