#!/usr/bin/env bash
# The gateway's steady-state cost against direct access (docs/benchmarks.md, "The gateway"), with wrk, at 1, 16 and 64
# connections, direct and through the gateway in ABBA order (direct, gateway, gateway, direct per round), two workloads:
#   read        the test service's read-only GET /balances: almost no work in the service, the gateway's worst case
#   persistent  POST /k, a [Persistent] endpoint, each connection its own session (benchmarks/wrk/session.lua): the
#               request logged and its reply forced before it is sent, what the gateway is for
# Each cell prints requests/s, p50, p99 and the CPU time per request of the service and of the gateway process.
# Needs a Release build (dotnet build PersistentServices.sln -c Release) and wrk (apt-get install wrk).
#   benchmarks/gateway/run.sh [seconds per run, default 10] [rounds, default 2]
# Environment:
#   WORKLOADS="read persistent"  which workloads (default both)
#   CONNECTIONS="1 16 64"        connection counts
#   GATEWAY=ps|yarp              ps-gateway (default) or YARP's bare direct forwarding (benchmarks/PersistentServices.GatewayBaseline)
#   PIN=1                        the gateway on CPU 1, the service and wrk on CPU 0 (taskset): the gateway on a core of its own,
#                                as on its own pod; without it all three share every core
#   GATEWAY_ENV="A=1 B=2"        environment for the gateway process only (runtime knobs, for A/B trials)
#   WARMUP=20                    seconds of warm-up through the gateway before measuring (the JIT's tiers settle)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
seconds=${1:-10}
rounds=${2:-2}
workloads=(${WORKLOADS:-read persistent})
connections=(${CONNECTIONS:-1 16 64})
warmup=${WARMUP:-20}
work=$(mktemp -d)
svc_port=$((20000 + RANDOM % 10000)); gw_port=$((svc_port + 1))
svc_cpu=(); gw_cpu=()
if [ "${PIN:-0}" = 1 ]; then svc_cpu=(taskset -c 0); gw_cpu=(taskset -c 1); fi
PS_LOG_DIR=$work/log Logging__LogLevel__Default=Warning \
  "${svc_cpu[@]}" dotnet "$root/test/PersistentServices.TestService/bin/Release/net10.0/PersistentServices.TestService.dll" --urls "http://127.0.0.1:$svc_port" > "$work/service.out" 2>&1 &
svc=$!
case "${GATEWAY:-ps}" in
  ps) gw_dll=$root/src/PersistentServices.Gateway.Host/bin/Release/net10.0/ps-gateway.dll ;;
  yarp) gw_dll=$root/benchmarks/PersistentServices.GatewayBaseline/bin/Release/net10.0/PersistentServices.GatewayBaseline.dll ;;
  *) echo "GATEWAY is ps or yarp" >&2; exit 2 ;;
esac
Logging__LogLevel__Default=Warning "${gw_cpu[@]}" env ${GATEWAY_ENV:-} dotnet "$gw_dll" --urls "http://127.0.0.1:$gw_port" --Backend "http://127.0.0.1:$svc_port" \
  --PersistentGateway:Services:test:Persistent=true --PersistentGateway:Services:test:Instances:0="http://127.0.0.1:$svc_port" > "$work/gateway.out" 2>&1 &
gw=$!
trap 'kill $svc $gw 2>/dev/null; wait $svc $gw 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 1 100); do
  curl -sf "http://127.0.0.1:$svc_port/health/ready" > /dev/null && curl -sf "http://127.0.0.1:$gw_port/balances" > /dev/null && break
  sleep 0.2
done
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)
sessions() { # $1 sessions, started through the gateway's port: one id per line
  : > "$work/sessions"
  for _ in $(seq "$1"); do curl -sf -X POST "http://127.0.0.1:$gw_port/ps/sessions" | sed -E 's/.*"sessionId":"([^"]+)".*/\1/' >> "$work/sessions"; echo >> "$work/sessions"; done
}
load() { # $1 workload, $2 connections, $3 port, $4 seconds -> "requests requests/s p50 p99 errors"
  local out
  if [ "$1" = read ]; then
    out=$("${svc_cpu[@]}" wrk -t"$(( $2 < 2 ? 1 : 2 ))" -c"$2" -d"$4s" --latency "http://127.0.0.1:$3/balances")
    awk '/requests in/ {n=$1} /Requests\/sec/ {r=$2} $1 == "50%" {p50=$2} $1 == "99%" {p99=$2} /Non-2xx|Socket errors/ {e="yes"} END {print n, r, p50, p99, (e ? e : "0")}' <<< "$out"
  else
    out=$(PS_SESSIONS="$work/sessions" PS_PATH=/k "${svc_cpu[@]}" wrk -t"$2" -c"$2" -d"$4s" -s "$root/benchmarks/wrk/session.lua" "http://127.0.0.1:$3")
    sed -nE 's/^RESULT requests=([0-9]+) seconds=[0-9.]+ rps=([0-9]+) p50_ms=([0-9.]+) p99_ms=([0-9.]+) errors=([0-9]+).*/\1 \2 \3ms \4ms \5/p' <<< "$out"
  fi
}
echo "warm-up: ${warmup}s through the gateway, 5 s direct (gateway: ${GATEWAY:-ps} ${GATEWAY_ENV:-}, pinned: ${PIN:-0})"
load read 64 "$gw_port" "$warmup" > /dev/null
load read 64 "$svc_port" 5 > /dev/null
printf '%-11s %-8s %-6s %12s %10s %10s %8s %9s %9s\n' workload target conns requests/s p50 p99 errors svc-µs/req gw-µs/req
for workload in "${workloads[@]}"; do
  for c in "${connections[@]}"; do
    # Persistent: each wrk connection a session of its own, started afresh for each cell (PS-Seq starts at 1).
    for round in $(seq 1 "$rounds"); do
      for target in direct gateway gateway direct; do
        port=$([ "$target" = direct ] && echo "$svc_port" || echo "$gw_port")
        [ "$workload" = persistent ] && sessions "$c"
        s0=$(ticks $svc); g0=$(ticks $gw)
        read -r n rps p50 p99 errors <<< "$(load "$workload" "$c" "$port" "$seconds")"
        s1=$(ticks $svc); g1=$(ticks $gw)
        printf '%-11s %-8s %-6s %12s %10s %10s %8s %9d %9d\n' "$workload" "$target" "$c" "$rps" "$p50" "$p99" "$errors" \
          $(( (s1 - s0) * 1000000 / hz / n )) $(( (g1 - g0) * 1000000 / hz / n ))
      done
    done
  done
done
