#!/usr/bin/env bash
# Runs every test of the project: Go (vet, gofmt, race, fuzz seeds, benchmarks once) and the
# end-to-end tests that drive the built binary with real pusher-js / laravel-echo / pusher SDK.
# Usage: scripts/test.sh        (from anywhere; needs Go and Node/npm)
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './e2e/*'))
if [ -n "$unformatted" ]; then echo "gofmt would change:"; echo "$unformatted"; exit 1; fi

echo "== go vet"
go vet ./...

echo "== go test -race"
# e2e/topology runs its fault scenarios twice (without and with recovery): about 6 min.
go test -race -count=1 -timeout 20m ./...

echo "== allocation guards (testing.AllocsPerRun; without -race, which changes the counts)"
# Every test whose name holds "Alloc" bounds the allocations of a hot path at its measured
# count (pusher/allocs_test.go, bridge/allocs_test.go, ...): a change that adds one fails here.
go test -count=1 -run 'Alloc' ./...

echo "== benchmarks (once each, to keep them compiling and working)"
go test -run '^$' -bench . -benchtime=1x ./... >/tmp/reverbgo-bench-once.log 2>&1 || { cat /tmp/reverbgo-bench-once.log; exit 1; }

echo "== bench modules of their own (library comparisons: parity tests, benchmarks once)"
# Separate modules so the server gains no dependency on nbio, fastjson or sonic.
(cd bench/jsoncmp && go vet ./... && go test -count=1 -bench . -benchtime=1x .)
# nbio's own accept-to-poller handoff trips the race detector (docs/benchmarks.md), so no -race.
(cd bench/nbioserver && go vet ./... && go test -count=1 .)

echo "== build"
mkdir -p bin
CGO_ENABLED=0 go build -o bin/reverbgo ./cmd/reverbgo

echo "== end-to-end (node --test)"
cd e2e
if [ ! -d node_modules ] || ! npm ls --all >/dev/null 2>&1; then
  npm ci --no-audit --no-fund
fi
# --test-force-exit: a test file whose tests all finished exits even if some handle (a
# client library's timer, a child's pipe) would keep its event loop alive; the outer timeout
# makes a hang fail the run instead of stalling CI.
REVERBGO_BIN="$(cd .. && pwd)/bin/reverbgo" timeout --kill-after=10 900 \
  node --test --test-force-exit --test-timeout=120000 --test-concurrency=1 test/

# The recovery client module (issue 23): its own package with pinned pusher-js, laravel-echo,
# pusher SDK and TypeScript, tested against the built binary (about 30 s).
echo "== clients/recovery (node --test)"
(
  cd ../clients/recovery
  if [ ! -d node_modules ] || ! npm ls --all >/dev/null 2>&1; then
    npm ci --no-audit --no-fund
  fi
  REVERBGO_BIN="$(cd ../.. && pwd)/bin/reverbgo" timeout --kill-after=10 300 npm test
)

# The Echo tests once more against two nodes with scaling on, sharing one Redis
# (e2e/lib/server.js startTwoNodes): Echo clients, sockets and the HTTP API land on different
# nodes. .ci/run starts the redis-server; with CI=true its absence fails the run.
echo "== end-to-end, Echo tests on two nodes (scaling on)"
if [ -n "${REVERBGO_TEST_REDIS_URL:-}" ]; then
  # shellcheck disable=SC2046 # the file list is one word per file
  E2E_NODES=2 REVERBGO_BIN="$(cd .. && pwd)/bin/reverbgo" timeout --kill-after=10 600 \
    node --test --test-force-exit --test-timeout=120000 --test-concurrency=1 --test-name-pattern='Echo' \
    $(grep -l 'echoClient' test/*.test.js)
  # MCP with its sessions on node A and the simulated pages on either node (its authorization
  # and the Go SDK client at 2026-07-28 too).
  E2E_NODES=2 REVERBGO_BIN="$(cd .. && pwd)/bin/reverbgo" timeout --kill-after=10 300 \
    node --test --test-force-exit --test-timeout=120000 --test-concurrency=1 test/30-mcp.test.js test/31-mcp-auth.test.js
elif [ "${CI:-}" = true ]; then
  echo "CI=true but REVERBGO_TEST_REDIS_URL is not set: the two-node Echo run cannot be skipped" >&2
  exit 1
else
  echo "REVERBGO_TEST_REDIS_URL not set: two-node Echo run skipped"
fi
