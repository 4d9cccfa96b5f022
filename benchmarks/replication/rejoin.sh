#!/usr/bin/env bash
# How long a replica takes to rejoin ([Replicated FS] §5.2's experiment for this system; docs/benchmarks.md,
# "Replication: rejoining"): a primary and two replicas (RequiredReplicas 1, so the primary goes on acknowledging while
# one replica is away). For each state size S (MiB of log the primary holds, written as [Persistent] replies of 60 KB
# kept in the log) and each number of missed operations M (small [Persistent] requests while the replica is away):
#   partial  the replica is stopped (SIGKILL), M operations run, it restarts on its directory: the primary sends the suffix
#   total    the same, but the replica's log directory is deleted before it restarts: the primary sends its whole log
# Rejoin time: from the replica's process start until its durable end equals the primary's (polled every 20 ms), minus
# the process's own start (until its status endpoint answers). Also the bytes the primary shipped for the rejoin.
# No service checkpoint runs during the measurement (interval 1 h, log bytes 4 GiB): the log is the state. With
# checkpoints, truncation keeps the log from the last checkpoint, so a total recovery ships the checkpointed state and
# the suffix after it, not the history (docs/replication.md, "Catching up").
# Needs a Release build (dotnet build test/PersistentServices.TestService -c Release).
#   benchmarks/replication/rejoin.sh ["1 16 64" sizes in MiB] ["100 5000" missed operations]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
sizes=(${1:-1 16 64})
missed=(${2:-100 5000})
dll=$root/test/PersistentServices.TestService/bin/Release/net10.0/PersistentServices.TestService.dll
[ -f "$dll" ] || { echo "build first: dotnet build test/PersistentServices.TestService -c Release" >&2; exit 2; }
work=$(mktemp -d "${LOG_ROOT:-${TMPDIR:-/tmp}}/ps-rejoin-bench.XXXXXX")
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
printf '%-8s %6s %8s %10s %12s %12s\n' path state_MiB missed rejoin_ms shipped_MiB log_end_MiB
for size in "${sizes[@]}"; do
  rm -rf "$work"/p "$work"/r1 "$work"/r2
  base=$((20000 + RANDOM % 10000)); pp=$base; p1=$((base + 1)); p2=$((base + 2))
  r2=$(node r2 $p2 Replica "$pp $p1"); pids+=($r2)
  r1=$(node r1 $p1 Replica "$pp $p2"); pids+=($r1)
  pr=$(node p $pp Primary "$p1 $p2"); pids+=($pr)
  for _ in $(seq 1 150); do curl -sf "http://127.0.0.1:$pp/health/ready" > /dev/null && break; sleep 0.2; done
  s=$(curl -sf -X POST "http://127.0.0.1:$pp/ps/sessions" | sed -E 's/.*"sessionId":"([^"]+)".*/\1/'); seq=0
  pages=$((size * 1024 * 1024 / 61440))
  for i in $(seq 1 "$pages"); do
    seq=$((seq + 1)); curl -sf -o /dev/null -X POST "http://127.0.0.1:$pp/page" -H "PS-Session: $s" -H "PS-Seq: $seq" -H 'Content-Type: application/json' -d "{\"opId\":\"p$i\",\"size\":61440}"
  done
  for m in "${missed[@]}"; do
    for path in partial total; do
      kill -9 "$r1"; wait "$r1" 2>/dev/null || true
      for i in $(seq 1 "$m"); do
        seq=$((seq + 1)); curl -sf -o /dev/null -X POST "http://127.0.0.1:$pp/k" -H "PS-Session: $s" -H "PS-Seq: $seq"
      done
      [ "$path" = total ] && rm -rf "$work/r1"
      before=$(curl -sf "http://127.0.0.1:$pp/ps/replication/status" | sed -E 's/.*"address":"http:\/\/127.0.0.1:'$p1'\/"[^}]*"bytes":([0-9]+).*/\1/')
      end=$(curl -sf "http://127.0.0.1:$pp/ps/replication/status" | field localDurableUntil)
      started=$(now_ms)
      r1=$(node r1 $p1 Replica "$pp $p2"); pids+=($r1)
      until curl -sf -o /dev/null "http://127.0.0.1:$p1/ps/replication/status"; do sleep 0.02; done
      up=$(now_ms)
      until [ "$(curl -sf "http://127.0.0.1:$p1/ps/replication/status" | field durableUntil)" = "$end" ]; do sleep 0.02; done
      done_at=$(now_ms)
      after=$(curl -sf "http://127.0.0.1:$pp/ps/replication/status" | sed -E 's/.*"address":"http:\/\/127.0.0.1:'$p1'\/"[^}]*"bytes":([0-9]+).*/\1/')
      printf '%-8s %6s %8s %10s %12s %12s\n' "$path" "$size" "$m" $((done_at - up)) \
        "$(awk -v a="$after" -v b="$before" 'BEGIN { printf "%.1f", (a - b) / 1048576 }')" "$(awk -v e="$end" 'BEGIN { printf "%.1f", e / 1048576 }')"
    done
  done
  kill "$pr" "$r1" "$r2" 2>/dev/null; wait "$pr" "$r1" "$r2" 2>/dev/null || true
done
