#!/usr/bin/env bash
# Chaos soak (not in CI): three reverbgo nodes on one Redis under churn, presence, fan-out,
# client events and member webhooks to a receiver that sometimes fails and sometimes hangs,
# with a fault every --fault-every (SIGKILL + restart, SIGSTOP past node_timeout, SIGTERM with
# joins in flight, Redis restart or Sentinel failover). After each fault it checks that the
# HTTP API and every node's presence observers equal what the clients hold within
# node_timeout + 5 s, that nothing was lost outside the outage windows, and at the end that
# every webhook was delivered or counted dropped and that RSS and goroutines stayed flat.
#
#   bench/chaos.sh                                   # 30 minutes, standalone Redis
#   bench/chaos.sh --topology sentinel               # Sentinel: + planned failover, master SIGKILL + restart
#   bench/chaos.sh --topology cluster                # Cluster, a replica per master: + reshard a third
#                                                    # of the slots back and forth, CLUSTER FAILOVER
#   bench/chaos.sh --duration 4m --fault-every 45s   # a short run
#   bench/chaos.sh --recovery                        # apps[].recovery on: fan-out subscribers resume,
#                                                    # every accepted event of the run is judged (0 lost
#                                                    # in silence, 0 duplicated; told losses counted)
#
# Every flag is passed to bench/chaos (go run ./bench/chaos -h lists them). Loopback only.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p bin
CGO_ENABLED=0 go build -o bin/reverbgo ./cmd/reverbgo
go build -o bin/chaos ./bench/chaos
exec bin/chaos --bin bin/reverbgo --root . "$@"
