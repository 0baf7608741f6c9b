#!/usr/bin/env bash
# Bridge round-trip benchmark: builds reverbgo and bridgebench, then for each round and each
# scenario starts a fresh server pinned to core 0 (GOMAXPROCS=1) and runs the tool pinned to
# core 1 (GOMAXPROCS=1). Every run's JSON summary is appended to $OUT/<scenario>.jsonl.
#
#   bench/bridgebench/run.sh                 # all scenarios, 3 rounds
#   ROUNDS=1 SCENARIOS="sat lat1s" bench/bridgebench/run.sh
#   SCENARIOS="sat sat-h2c sat-h2call lat1s lat1s-h2c" bench/bridgebench/run.sh   # HTTP/1.1 vs h2c
#   SCENARIOS="sat sat-mcp lat1s lat1s-mcp seq seq-mcp" bench/bridgebench/run.sh  # calls API vs MCP tools/call
#   TRACE="lat1s" bench/bridgebench/run.sh   # plus a 5 s runtime trace of the server in round 1
#   PROFILE="sat satwarn" bench/bridgebench/run.sh   # plus a 10 s server CPU profile in round 1
#   SERVER=floor OUT=/tmp/bb-floor SCENARIOS="sat lat1s" ROUNDS=3 bench/bridgebench/run.sh
#
# SERVER=floor (default SERVER=reverbgo) runs the same scenarios against bench/bridgefloor, the
# floor: the same wire (two HTTP requests and one WebSocket frame per call) with none of
# reverbgo's checks, pinned, measured and profiled exactly as reverbgo is (same port, core 0,
# GOMAXPROCS=1, --pid, --debug-addr). Calls API only: the MCP scenarios are refused; the log
# level is ignored (the floor logs nothing per call), so satwarn is sat. Each JSON line
# records the server; use a separate OUT per server.
#
# Needs taskset (util-linux) and a machine with at least 2 cores. Only loopback is used.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
OUT=${OUT:-/tmp/bridgebench-results}
ROUNDS=${ROUNDS:-3}
SCENARIOS=${SCENARIOS:-"sat satwarn target lat1s lat10s seq"}
PORT=${PORT:-16421}
DEBUG_ADDR=${DEBUG_ADDR:-127.0.0.1:16497}
PROFILE=${PROFILE:-}
# The profile starts PROFILE_DELAY s after the server (default 1: sat now ends within ~4 s of
# its start, so the former fixed 6 s delay profiled an idle server).
PROFILE_DELAY=${PROFILE_DELAY:-1}
TRACE=${TRACE:-}
SERVER=${SERVER:-reverbgo}
case $SERVER in
reverbgo | floor) ;;
*) echo "SERVER must be reverbgo or floor, not $SERVER" >&2; exit 1 ;;
esac
mkdir -p "$OUT"

if [ "$SERVER" = floor ]; then
	(cd "$repo" && go build -o "$OUT/bridgefloor" ./bench/bridgefloor && go build -o "$OUT/bridgebench" ./bench/bridgebench)
else
	(cd "$repo" && go build -o "$OUT/rg-bridge" ./cmd/reverbgo && go build -o "$OUT/bridgebench" ./bench/bridgebench)
fi

cat >"$OUT/bridge-bench.yaml" <<EOF
server:
  host: 127.0.0.1
  port: $PORT
  public_url: "http://127.0.0.1:$PORT" # the aud of the MCP scenarios' tokens
apps:
  - app_id: "bench"
    key: "bench-key"
    secret: "bench-secret"
    max_message_size: 100000
    client_event_rate_limit: 0
    toolmark:
      enabled: true
      mcp:
        enabled: true
EOF

# scenario NAME → server log level and tool flags. 1000 pages = 1000 conversations with one
# call in flight each, so no default limit is reached below 10,000 results/s.
args_for() {
	case $1 in
	sat) echo "info --pages 1000 --inflight 1000 --calls 30000" ;;     # unpaced: throughput and CPU/call
	satwarn) echo "warn --pages 1000 --inflight 1000 --calls 30000" ;; # same with the audit log off
	# Paced: the page holds each call for a simulated tool time (±50 %), so 1,000 calls are in
	# flight while the rate is 1,000/think; overhead = round trip - page time.
	target) echo "info --pages 1000 --inflight 1000 --think 200ms --think-jitter 0.5 --calls 30000" ;; # offers 5,000/s
	lat1s) echo "info --pages 1000 --inflight 1000 --think 1s --think-jitter 0.5 --calls 15000" ;;      # offers 1,000/s
	lat10s) echo "info --pages 1000 --inflight 1000 --think 10s --think-jitter 0.5 --warmup 1000 --calls 2000" ;; # 100/s
	seq) echo "info --pages 1000 --inflight 1 --warmup 200 --calls 8000" ;; # one call at a time: the floor
	# The same over h2c: the agent's calls as HTTP/2 streams (pages still POST over HTTP/1.1,
	# as a browser on plain HTTP does), and with the pages' POSTs over h2c too.
	sat-h2c) echo "info --pages 1000 --inflight 1000 --calls 30000 --h2c agent" ;;
	sat-h2call) echo "info --pages 1000 --inflight 1000 --calls 30000 --h2c all" ;;
	lat1s-h2c) echo "info --pages 1000 --inflight 1000 --think 1s --think-jitter 0.5 --calls 15000 --h2c agent" ;;
	# The same with the agent on the MCP endpoint (tools/call over Streamable HTTP, one session
	# per conversation, HS256 tokens) instead of the calls API; pages unchanged.
	sat-mcp) echo "info --pages 1000 --inflight 1000 --calls 30000 --agent mcp" ;;
	lat1s-mcp) echo "info --pages 1000 --inflight 1000 --think 1s --think-jitter 0.5 --calls 15000 --agent mcp" ;;
	seq-mcp) echo "info --pages 1000 --inflight 1 --warmup 200 --calls 8000 --agent mcp" ;;
	*) echo "unknown scenario $1" >&2; return 1 ;;
	esac
}

# Refuse what the floor does not serve before any run starts.
if [ "$SERVER" = floor ]; then
	for sc in $SCENARIOS; do
		a=$(args_for "$sc")
		case " $a " in
		*" --agent mcp "*) echo "SERVER=floor serves the calls API only: drop scenario $sc" >&2; exit 1 ;;
		esac
	done
fi

# machine_busy prints the cores in use over 2 s (from /proc/stat).
machine_busy() {
	local a b
	a=($(head -1 /proc/stat))
	sleep 2
	b=($(head -1 /proc/stat))
	awk -v a="${a[*]}" -v b="${b[*]}" 'BEGIN{split(a,x," ");split(b,y," ");t=0;for(i=2;i<=9;i++){if(i==5||i==6)continue;t+=y[i]-x[i]};printf "%.2f", t/200}'
}

server_pid=""
stop_server() {
	if [ -n "$server_pid" ]; then
		kill "$server_pid" 2>/dev/null || true
		for _ in $(seq 1 50); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$server_pid" 2>/dev/null || true
		server_pid=""
	fi
}
trap stop_server EXIT

for round in $(seq 1 "$ROUNDS"); do
	for sc in $SCENARIOS; do
		read -r level flags < <(args_for "$sc")
		# Wait (at most 60 s) for the machine to be quiet, and record what it was.
		busy=$(machine_busy)
		for _ in $(seq 1 30); do
			awk -v b="$busy" 'BEGIN{exit !(b < 0.3)}' && break
			busy=$(machine_busy)
		done
		# taskset execs the server, so $! is the server's own pid (bridgebench --pid, VmHWM).
		if [ "$SERVER" = floor ]; then
			GOMAXPROCS=1 taskset -c 0 "$OUT/bridgefloor" --host 127.0.0.1 --port "$PORT" \
				--debug-addr "$DEBUG_ADDR" 2>"$OUT/server-$sc-$round.log" &
		else
			GOMAXPROCS=1 taskset -c 0 "$OUT/rg-bridge" start --config "$OUT/bridge-bench.yaml" \
				--log-level "$level" --debug-addr "$DEBUG_ADDR" 2>"$OUT/server-$sc-$round.log" &
		fi
		server_pid=$!
		for _ in $(seq 1 50); do (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break; sleep 0.1; done
		if [[ " $PROFILE " == *" $sc "* ]] && [ "$round" = 1 ]; then
			(sleep "$PROFILE_DELAY" && curl -s -o "$OUT/server-$sc.pprof" "http://$DEBUG_ADDR/debug/pprof/profile?seconds=10") &
		fi
		if [[ " $TRACE " == *" $sc "* ]] && [ "$round" = 1 ]; then
			(sleep 8 && curl -s -o "$OUT/server-$sc.trace" "http://$DEBUG_ADDR/debug/pprof/trace?seconds=5") &
		fi
		echo "== round $round $sc on $SERVER (machine busy before: $busy cores)"
		# shellcheck disable=SC2086
		GOMAXPROCS=1 taskset -c 1 "$OUT/bridgebench" --port "$PORT" --pid "$server_pid" --timeout 3m --quiet \
			$flags >"$OUT/run-$sc-$round.txt" 2>&1 || true
		grep -E '^(calls|round trip|overhead|  dispatch|  return|server CPU|errors|  e\.g\.|bridgebench:)' "$OUT/run-$sc-$round.txt" || true
		rss=$(awk '/VmHWM/{print $2}' "/proc/$server_pid/status")
		tail -1 "$OUT/run-$sc-$round.txt" | awk -v s="$sc" -v r="$round" -v b="$busy" -v rss="$rss" -v srv="$SERVER" \
			'/^\{/{sub(/^\{/, "{\"scenario\":\"" s "\",\"round\":" r ",\"server\":\"" srv "\",\"busy_before\":" b ",\"server_hwm_kib\":" rss ","); print}' >>"$OUT/$sc.jsonl"
		wait_profile=$(jobs -p | grep -v "^$server_pid$" || true)
		[ -n "$wait_profile" ] && wait $wait_profile 2>/dev/null || true
		stop_server
	done
done
echo "results: $OUT/*.jsonl"
