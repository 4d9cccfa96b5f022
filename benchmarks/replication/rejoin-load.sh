#!/usr/bin/env bash
# The primary's throughput while a replica rejoins by total recovery ([Replicated FS] §5.2: recovery time against the
# service's throughput; docs/benchmarks.md, "Replication: rejoining"). A primary and two replicas (RequiredReplicas 1:
# the primary acknowledges with the replica that stays). For each state size S (MiB of log, [Persistent] replies of
# 60 KB kept in the log), 8 wrk connections send small [Persistent] requests (each its own session) for 3 s with all
# replicas up (the baseline), then replica r1 is killed, its log directory deleted, and it is started again while the
# same load runs for 3 s: the primary ships its whole log to r1 meanwhile. Prints both throughputs, p50/p99, and the
# rejoin time (r1's start until its durable end reaches the primary's end at r1's start).
# Needs a Release build of the test service and wrk (apt-get install wrk).
#   benchmarks/replication/rejoin-load.sh ["16 64 128" sizes in MiB] [seconds, default 3]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
sizes=(${1:-16 64 128})
seconds=${2:-3}
dll=$root/test/PersistentServices.TestService/bin/Release/net10.0/PersistentServices.TestService.dll
[ -f "$dll" ] || { echo "build first: dotnet build test/PersistentServices.TestService -c Release" >&2; exit 2; }
command -v wrk > /dev/null || { echo "needs wrk (apt-get install wrk)" >&2; exit 2; }
work=$(mktemp -d "${LOG_ROOT:-${TMPDIR:-/tmp}}/ps-rejoin-load.XXXXXX")
key=replication-benchmark-peer-key-0123456789
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
now_ms() { date +%s%3N; }
node() { # $1 name, $2 port, $3 role, $4 other ports
  local others=""; for p in $4; do others+="${others:+,}http://127.0.0.1:$p"; done
  env PS_LOG_DIR="$work/$1" PS_SERVICE_NAME=bench PS_PEER_KEY=$key PS_ANONYMOUS_STATUS=1 PS_REPLICATION=$3 PS_REPLICAS=$others PS_REQUIRED_REPLICAS=1 \
    PS_SERVICE_CHECKPOINT_SECONDS=3600 PS_SERVICE_CHECKPOINT_LOG_BYTES=$((4 << 30)) Logging__LogLevel__Default=Warning \
    dotnet "$dll" --urls "http://127.0.0.1:$2" > "$work/$1.out" 2>&1 &
  echo $!
}
field() { sed -nE "s/.*\"$1\":(-?[0-9]+).*/\1/p" | head -1; }
load() { # $1 port: 8 connections, each its own session; prints wrk's RESULT line
  : > "$work/sessions"
  for _ in $(seq 1 8); do printf '%s\n' "$(curl -sf -X POST "http://127.0.0.1:$1/ps/sessions" | sed -E 's/.*"sessionId":"([^"]+)".*/\1/')" >> "$work/sessions"; done
  PS_SESSIONS="$work/sessions" PS_PATH=/k wrk -t8 -c8 -d"${seconds}s" -s "$root/benchmarks/wrk/session.lua" "http://127.0.0.1:$1" | grep RESULT
}
printf '%6s  %-48s  %-48s  %9s\n' state_MiB "all replicas up" "one replica rejoining (total)" rejoin_ms
for size in "${sizes[@]}"; do
  rm -rf "$work"/p "$work"/r1 "$work"/r2
  base=$((20000 + RANDOM % 10000)); pp=$base; p1=$((base + 1)); p2=$((base + 2))
  r2=$(node r2 $p2 Replica "$pp $p1"); pids+=($r2)
  r1=$(node r1 $p1 Replica "$pp $p2"); pids+=($r1)
  pr=$(node p $pp Primary "$p1 $p2"); pids+=($pr)
  for _ in $(seq 1 150); do curl -sf "http://127.0.0.1:$pp/health/ready" > /dev/null && break; sleep 0.2; done
  s=$(curl -sf -X POST "http://127.0.0.1:$pp/ps/sessions" | sed -E 's/.*"sessionId":"([^"]+)".*/\1/')
  for i in $(seq 1 $((size * 1024 * 1024 / 61440))); do
    curl -sf -o /dev/null -X POST "http://127.0.0.1:$pp/page" -H "PS-Session: $s" -H "PS-Seq: $i" -H 'Content-Type: application/json' -d "{\"opId\":\"p$i\",\"size\":61440}"
  done
  until [ "$(curl -sf "http://127.0.0.1:$p1/ps/replication/status" | field durableUntil)" = "$(curl -sf "http://127.0.0.1:$pp/ps/replication/status" | field localDurableUntil)" ]; do sleep 0.1; done
  steady=$(load $pp | sed 's/RESULT //')
  kill -9 "$r1"; wait "$r1" 2>/dev/null || true
  rm -rf "$work/r1"
  end=$(curl -sf "http://127.0.0.1:$pp/ps/replication/status" | field localDurableUntil)
  r1=$(node r1 $p1 Replica "$pp $p2"); pids+=($r1)
  ( until curl -sf -o /dev/null "http://127.0.0.1:$p1/ps/replication/status"; do sleep 0.02; done; up=$(now_ms)
    until [ "$(curl -sf "http://127.0.0.1:$p1/ps/replication/status" | field durableUntil)" -ge "$end" ] 2>/dev/null; do sleep 0.02; done
    echo $(( $(now_ms) - up )) > "$work/rejoin_ms" ) &
  watcher=$!
  during=$(load $pp | sed 's/RESULT //')
  wait "$watcher" || true
  printf '%6s  %-48s  %-48s  %9s\n' "$size" "$(echo "$steady" | cut -d' ' -f3-5)" "$(echo "$during" | cut -d' ' -f3-5)" "$(cat "$work/rejoin_ms" 2>/dev/null || echo '?')"
  kill "$pr" "$r1" "$r2" 2>/dev/null; wait "$pr" "$r1" "$r2" 2>/dev/null || true
done
