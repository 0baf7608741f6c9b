#!/usr/bin/env bash
# Starts (and stops) real Redis topologies on free 127.0.0.1 ports for the cluster tests and
# CI, with Debian's redis-server / redis-sentinel / redis-cli:
#
#   scripts/redis-topologies.sh start standalone DIR   one redis-server
#   scripts/redis-topologies.sh start sentinel DIR     master + replica + 3 sentinels (mymaster)
#   scripts/redis-topologies.sh start cluster DIR      3 masters, redis-cli --cluster create
#   scripts/redis-topologies.sh start cluster-replicas DIR
#                                                      3 masters + 3 replicas (--cluster-replicas 1)
#   scripts/redis-topologies.sh restart DIR NAME       restarts server NAME (master, cluster-4, ...)
#                                                      of DIR with its first arguments, e.g. a
#                                                      killed Sentinel master (it rejoins as a replica)
#   scripts/redis-topologies.sh stop DIR               kills what DIR/pids lists
#
# `start` waits until the topology serves (replica in sync and sentinel quorum reachable;
# cluster_state:ok on every node) and prints KEY=value lines on stdout:
#   REDIS_URL=redis://127.0.0.1:P/0                     (standalone)
#   SENTINEL_ADDRS=127.0.0.1:S1,...  SENTINEL_MASTER=mymaster
#   MASTER_PID_FILE=DIR/master.pid  MASTER_PORT=P  REPLICA_PORT=P  REPLICA_PID_FILE=DIR/replica.pid
#   TOPOLOGY_DIR=DIR                                    (sentinel: the test kills the master and
#                                                        restarts it with `restart DIR master`)
#   CLUSTER_ADDRS=127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3 (cluster)
#   CLUSTER_ADDRS=...6 nodes  CLUSTER_MASTER_PORTS=P1,P2,P3  CLUSTER_REPLICA_PORTS=R1,R2,R3
#   (cluster-replicas: Ri replicates Pi; pid files DIR/cluster-I.pid, I = 1..6 in that order)
# Everything runs with persistence off and daemonized, pid files and logs in DIR.
set -euo pipefail

die() { echo "redis-topologies: $*" >&2; exit 1; }

# free_port prints a currently free TCP port on 127.0.0.1 (the kernel picks it).
free_port() {
  if command -v python3 >/dev/null 2>&1; then
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
  else
    node -e 'const s=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})'
  fi
}

# wait_for TRIES CMD...: runs CMD every 0.1 s until it succeeds.
wait_for() {
  local tries=$1; shift
  for _ in $(seq 1 "$tries"); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.1
  done
  return 1
}

server() { # server DIR NAME PORT [extra redis-server args...]
  local dir=$1 name=$2 port=$3; shift 3
  # The arguments, one a line, for `restart`.
  printf '%s\n' "$port" "$@" >"$dir/$name.args"
  redis-server --bind 127.0.0.1 --port "$port" --save "" --appendonly no --daemonize yes \
    --dir "$dir" --pidfile "$dir/$name.pid" --logfile "$dir/$name.log" "$@"
  wait_for 50 test -s "$dir/$name.pid" || die "$name did not start (see $dir/$name.log)"
  echo "$dir/$name.pid" >>"$dir/pids"
  wait_for 50 redis-cli -p "$port" ping || die "$name on $port does not answer"
}

start_standalone() {
  local dir=$1 port
  port=$(free_port)
  server "$dir" standalone "$port"
  echo "REDIS_URL=redis://127.0.0.1:$port/0"
}

sentinel_ok() { redis-cli -p "$1" sentinel ckquorum mymaster | grep -q '^OK'; }
replica_synced() { redis-cli -p "$1" info replication | grep -q 'master_link_status:up'; }
sentinel_sees_all() {
  [ "$(redis-cli -p "$1" sentinel sentinels mymaster | grep -c '^name$')" -ge 2 ] &&
    redis-cli -p "$1" sentinel replicas mymaster | grep -q "$2"
}

start_sentinel() {
  local dir=$1 master replica addrs="" s
  master=$(free_port)
  replica=$(free_port)
  server "$dir" master "$master"
  server "$dir" replica "$replica" --replicaof 127.0.0.1 "$master"
  wait_for 100 replica_synced "$replica" || die "replica never synced"
  for i in 1 2 3; do
    s=$(free_port)
    cat >"$dir/sentinel-$i.conf" <<CONF
bind 127.0.0.1
port $s
daemonize yes
pidfile $dir/sentinel-$i.pid
logfile $dir/sentinel-$i.log
dir $dir
sentinel monitor mymaster 127.0.0.1 $master 2
sentinel down-after-milliseconds mymaster 1000
sentinel failover-timeout mymaster 4000
sentinel parallel-syncs mymaster 1
CONF
    redis-sentinel "$dir/sentinel-$i.conf"
    wait_for 50 test -s "$dir/sentinel-$i.pid" || die "sentinel $i did not start"
    echo "$dir/sentinel-$i.pid" >>"$dir/pids"
    addrs="$addrs${addrs:+,}127.0.0.1:$s"
  done
  # Sentinels find each other through hello messages every 2 s: wait until each knows the
  # other two and the replica, so a failover can be authorized.
  for a in ${addrs//,/ }; do
    wait_for 300 sentinel_sees_all "${a#*:}" "$replica" || die "sentinel $a never saw its peers"
    wait_for 50 sentinel_ok "${a#*:}" || die "sentinel $a has no quorum"
  done
  echo "SENTINEL_ADDRS=$addrs"
  echo "SENTINEL_MASTER=mymaster"
  echo "MASTER_PID_FILE=$dir/master.pid"
  echo "MASTER_PORT=$master"
  echo "REPLICA_PORT=$replica"
  echo "REPLICA_PID_FILE=$dir/replica.pid"
  echo "TOPOLOGY_DIR=$dir"
}

cluster_ok() { redis-cli -p "$1" cluster info | grep -q 'cluster_state:ok'; }

start_cluster() {
  local dir=$1 ports=() addrs="" p bus
  for i in 1 2 3; do
    p=$(free_port)
    bus=$(free_port)
    server "$dir" "cluster-$i" "$p" --cluster-enabled yes --cluster-port "$bus" \
      --cluster-config-file "$dir/nodes-$i.conf" --cluster-node-timeout 2000
    ports+=("$p")
    addrs="$addrs${addrs:+,}127.0.0.1:$p"
  done
  redis-cli --cluster create "127.0.0.1:${ports[0]}" "127.0.0.1:${ports[1]}" "127.0.0.1:${ports[2]}" \
    --cluster-replicas 0 --cluster-yes >"$dir/create.log" 2>&1 || die "cluster create failed: $(tail -5 "$dir/create.log")"
  for p in "${ports[@]}"; do
    wait_for 200 cluster_ok "$p" || die "cluster node $p never reached cluster_state:ok"
  done
  echo "CLUSTER_ADDRS=$addrs"
}

# replicas_synced PORT...: every replica among PORT... has its master link up and no sync in
# progress.
replicas_synced() {
  local p
  for p in "$@"; do
    redis-cli -p "$p" info replication | grep -q 'master_link_status:up' || return 1
    redis-cli -p "$p" info replication | grep -q 'master_sync_in_progress:0' || return 1
  done
}

# cluster_consistent PORT...: every node reports cluster_state:ok and sees 6 known nodes.
cluster_consistent() {
  local p
  for p in "$@"; do
    redis-cli -p "$p" cluster info | grep -q 'cluster_state:ok' || return 1
    redis-cli -p "$p" cluster info | grep -q 'cluster_known_nodes:6' || return 1
  done
}

start_cluster_replicas() {
  local dir=$1 ports=() addrs="" p bus masters replicas
  for i in 1 2 3 4 5 6; do
    p=$(free_port)
    bus=$(free_port)
    server "$dir" "cluster-$i" "$p" --cluster-enabled yes --cluster-port "$bus" \
      --cluster-config-file "$dir/nodes-$i.conf" --cluster-node-timeout 2000
    ports+=("$p")
    addrs="$addrs${addrs:+,}127.0.0.1:$p"
  done
  # redis-cli makes the first three masters and gives each one replica among the last three
  # (on one host it may pair them in any order: the pairs are read back below).
  redis-cli --cluster create "${ports[@]/#/127.0.0.1:}" --cluster-replicas 1 --cluster-yes \
    >"$dir/create.log" 2>&1 || die "cluster create failed: $(tail -5 "$dir/create.log")"
  wait_for 300 cluster_consistent "${ports[@]}" || die "cluster never reached cluster_state:ok with 6 nodes"
  wait_for 300 replicas_synced "${ports[@]:3}" || die "cluster replicas never synced"
  # Read who replicates whom: CLUSTER_REPLICA_PORTS lists the replica of each master in order.
  masters=""; replicas=""
  for i in 0 1 2; do
    local id r=""
    id=$(redis-cli -p "${ports[$i]}" cluster myid)
    for j in 3 4 5; do
      if redis-cli -p "${ports[$j]}" info replication | grep -q "master_port:${ports[$i]}"; then r=${ports[$j]}; fi
    done
    [ -n "$r" ] || die "master ${ports[$i]} ($id) has no replica"
    masters="$masters${masters:+,}${ports[$i]}"
    replicas="$replicas${replicas:+,}$r"
  done
  echo "CLUSTER_ADDRS=$addrs"
  echo "CLUSTER_MASTER_PORTS=$masters"
  echo "CLUSTER_REPLICA_PORTS=$replicas"
  echo "TOPOLOGY_DIR=$dir"
}

# restart DIR NAME: starts server NAME again with the arguments it was first started with
# (after a kill: its pid file is stale).
restart() {
  local dir=$1 name=$2 args=()
  [ -f "$dir/$name.args" ] || die "no server $name in $dir"
  mapfile -t args <"$dir/$name.args"
  rm -f "$dir/$name.pid"
  server "$dir" "$name" "${args[@]}"
}

stop() {
  local dir=$1
  [ -f "$dir/pids" ] || return 0
  while read -r f; do
    [ -s "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null || true
  done <"$dir/pids"
  rm -f "$dir/pids"
}

cmd=${1:-}
case "$cmd" in
  start)
    [ $# -eq 3 ] || die "usage: $0 start standalone|sentinel|cluster|cluster-replicas DIR"
    command -v redis-server >/dev/null || die "redis-server is not installed"
    mkdir -p "$3"
    dir=$(cd "$3" && pwd)
    # On failure, leave nothing running behind.
    trap 'rc=$?; [ $rc -eq 0 ] || stop "$dir"' EXIT
    case "$2" in
      standalone) start_standalone "$dir" ;;
      sentinel) command -v redis-sentinel >/dev/null || die "redis-sentinel is not installed"; start_sentinel "$dir" ;;
      cluster) start_cluster "$dir" ;;
      cluster-replicas) start_cluster_replicas "$dir" ;;
      *) die "unknown topology $2" ;;
    esac
    ;;
  restart)
    [ $# -eq 3 ] || die "usage: $0 restart DIR NAME"
    restart "$(cd "$2" && pwd)" "$3"
    ;;
  stop)
    [ $# -eq 2 ] || die "usage: $0 stop DIR"
    stop "$2"
    ;;
  *) die "usage: $0 start standalone|sentinel|cluster|cluster-replicas DIR | restart DIR NAME | stop DIR" ;;
esac
