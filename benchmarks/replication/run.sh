#!/usr/bin/env bash
# Synchronous replication against none, side by side (docs/benchmarks.md, "Replication"), with wrk: a [Persistent]
# endpoint (the test service's POST /k, each wrk connection its own session, benchmarks/wrk/session.lua), at 1, 16 and
# 64 connections, against three deployments started once and measured in interleaved order per round:
#   none   one node, no replication
#   sync   a primary and one replica (RequiredReplicas 1, the default for one replica): a reply waits for the replica's fsync
#   async  a primary and one replica, RequiredReplicas 0: the replica follows, the reply waits for the local commit only
#   raft3  the recommended group: three nodes with Failover = Raft (one configuration for all, InitialPrimary the first),
#          RequiredReplicas the default (a majority: 1 of the 2 replicas); each replica's hot follower re-executes every request
# Every process shares the machine's cores and its one disk (each node its own log directory on it).
# Needs a Release build (dotnet build test/PersistentServices.TestService -c Release) and wrk (apt-get install wrk).
#   benchmarks/replication/run.sh [seconds per run, default 10] [rounds, default 2]
# Environment: CONNECTIONS="1 16 64", MODES="none sync async", LOG_ROOT=<dir> (default a temp dir: its file system matters)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
seconds=${1:-10}
rounds=${2:-2}
connections=(${CONNECTIONS:-1 16 64})
modes=(${MODES:-none sync async raft3})
work=$(mktemp -d "${LOG_ROOT:-${TMPDIR:-/tmp}}/ps-replication-bench.XXXXXX")
dll=$root/test/PersistentServices.TestService/bin/Release/net10.0/PersistentServices.TestService.dll
[ -f "$dll" ] || { echo "build first: dotnet build test/PersistentServices.TestService -c Release" >&2; exit 2; }
key=replication-benchmark-peer-key-0123456789
base=$((20000 + RANDOM % 10000))
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
start() { # $1 name, $2 port, then environment assignments
  local name=$1 port=$2; shift 2
  env PS_LOG_DIR="$work/$name" PS_SERVICE_NAME=bench PS_PEER_KEY=$key PS_ANONYMOUS_STATUS=1 Logging__LogLevel__Default=Warning "$@" \
    dotnet "$dll" --urls "http://127.0.0.1:$port" > "$work/$name.out" 2>&1 &
  pids+=($!)
}
start none $base
start sync-replica $((base + 2)) PS_REPLICATION=Replica PS_REPLICAS=http://127.0.0.1:$((base + 1))
start sync $((base + 1)) PS_REPLICATION=Primary PS_REPLICAS=http://127.0.0.1:$((base + 2))
start async-replica $((base + 4)) PS_REPLICATION=Replica PS_REPLICAS=http://127.0.0.1:$((base + 3))
start async $((base + 3)) PS_REPLICATION=Primary PS_REPLICAS=http://127.0.0.1:$((base + 4)) PS_REQUIRED_REPLICAS=0
group=http://127.0.0.1:$((base + 5)),http://127.0.0.1:$((base + 6)),http://127.0.0.1:$((base + 7))
for i in 5 6 7; do
  start raft3-$i $((base + i)) PS_REPLICATION=None PS_FAILOVER=Raft PS_ADDRESS=http://127.0.0.1:$((base + i)) \
    PS_INITIAL_PRIMARY=http://127.0.0.1:$((base + 5)) PS_REPLICAS=$group
done
port_of() { case $1 in none) echo $base ;; sync) echo $((base + 1)) ;; async) echo $((base + 3)) ;; raft3) echo $((base + 5)) ;; esac; }
for mode in "${modes[@]}"; do
  for _ in $(seq 1 150); do curl -sf "http://127.0.0.1:$(port_of $mode)/health/ready" > /dev/null && break; sleep 0.2; done
done
sessions() { # $1 count, $2 port
  : > "$work/sessions"
  for _ in $(seq "$1"); do curl -sf -X POST "http://127.0.0.1:$2/ps/sessions" | sed -E 's/.*"sessionId":"([^"]+)".*/\1/' >> "$work/sessions"; echo >> "$work/sessions"; done
}
load() { # $1 connections, $2 port, $3 seconds -> "requests rps p50 p99 errors"
  PS_SESSIONS="$work/sessions" PS_PATH=/k wrk -t"$1" -c"$1" -d"$3s" -s "$root/benchmarks/wrk/session.lua" "http://127.0.0.1:$2" |
    sed -nE 's/^RESULT requests=([0-9]+) seconds=[0-9.]+ rps=([0-9]+) p50_ms=([0-9.]+) p99_ms=([0-9.]+) errors=([0-9]+).*/\1 \2 \3 \4 \5/p'
}
echo "warm-up: 5 s at 16 connections on each"
for mode in "${modes[@]}"; do sessions 16 "$(port_of $mode)"; load 16 "$(port_of $mode)" 5 > /dev/null; done
printf '%-6s %-6s %6s %12s %10s %10s %7s\n' mode conns round requests/s p50_ms p99_ms errors
for c in "${connections[@]}"; do
  for round in $(seq 1 "$rounds"); do
    order=("${modes[@]}")
    [ $((round % 2)) -eq 0 ] && order=($(printf '%s\n' "${modes[@]}" | tac))
    for mode in "${order[@]}"; do
      port=$(port_of "$mode")
      sessions "$c" "$port"
      read -r n rps p50 p99 errors <<< "$(load "$c" "$port" "$seconds")"
      printf '%-6s %-6s %6s %12s %10s %10s %7s\n' "$mode" "$c" "$round" "$rps" "$p50" "$p99" "$errors"
    done
  done
done
# The replicas held what their primaries acknowledged (a check, not a figure): each primary's replicated end.
for mode in sync async raft3; do
  echo "$mode: $(curl -sf "http://127.0.0.1:$(port_of $mode)/ps/replication/status")"
done
