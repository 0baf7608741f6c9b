#!/usr/bin/env bash
# Soak test (not in CI): one reverbgo node for 10 minutes under churn, fan-out, client
# events, presence, bridge calls and a few abusive clients; prints RSS, goroutines and loss
# each minute and a verdict (RSS flat within 10 % after the first minute, nothing lost, no
# goroutine growth). Run it on a quiet machine; record figures only from such a run.
#
#   bench/soak.sh                       # 10 minutes
#   bench/soak.sh --duration 60s --interval 15s   # smoke run
#
# Every flag is passed to bench/soak (go run ./bench/soak -h lists them). Loopback only.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p bin
go build -o bin/reverbgo ./cmd/reverbgo
go build -o bin/soak ./bench/soak
exec bin/soak --bin bin/reverbgo "$@"
