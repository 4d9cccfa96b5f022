#!/usr/bin/env bash
# The gateway's steady-state cost against direct access (docs/benchmarks.md, "The gateway"): the test service's
# read-only GET /balances, with wrk, directly and through ps-gateway, at 1, 16 and 64 connections, alternating.
# Needs a Release build (dotnet build PersistentServices.sln -c Release) and wrk (apt-get install wrk).
#   benchmarks/gateway/run.sh [seconds per run, default 10] [rounds, default 2]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
seconds=${1:-10}
rounds=${2:-2}
work=$(mktemp -d)
svc_port=$((20000 + RANDOM % 10000)); gw_port=$((svc_port + 1))
PS_LOG_DIR=$work/log Logging__LogLevel__Default=Warning \
  dotnet "$root/test/PersistentServices.TestService/bin/Release/net10.0/PersistentServices.TestService.dll" --urls "http://127.0.0.1:$svc_port" > "$work/service.out" 2>&1 &
svc=$!
Logging__LogLevel__Default=Warning dotnet "$root/src/PersistentServices.Gateway.Host/bin/Release/net10.0/ps-gateway.dll" --urls "http://127.0.0.1:$gw_port" \
  --PersistentGateway:Services:test:Persistent=true --PersistentGateway:Services:test:Instances:0="http://127.0.0.1:$svc_port" > "$work/gateway.out" 2>&1 &
gw=$!
trap 'kill $svc $gw 2>/dev/null; wait $svc $gw 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 1 100); do
  curl -sf "http://127.0.0.1:$svc_port/health/ready" > /dev/null && curl -sf "http://127.0.0.1:$gw_port/ps-gateway/health" > /dev/null && break
  sleep 0.2
done
# warm-up (JIT, connections)
wrk -t2 -c16 -d3s "http://127.0.0.1:$svc_port/balances" > /dev/null
wrk -t2 -c16 -d3s "http://127.0.0.1:$gw_port/balances" > /dev/null
printf '%-8s %-6s %12s %10s %10s\n' target conns requests/s p50 p99
for round in $(seq 1 "$rounds"); do
  for c in 1 16 64; do
    t=$(( c < 2 ? 1 : 2 ))
    for target in direct gateway; do
      port=$([ "$target" = direct ] && echo "$svc_port" || echo "$gw_port")
      out=$(wrk -t"$t" -c"$c" -d"${seconds}s" --latency "http://127.0.0.1:$port/balances")
      rps=$(awk '/Requests\/sec/ {print $2}' <<< "$out")
      p50=$(awk '$1 == "50%" {print $2}' <<< "$out")
      p99=$(awk '$1 == "99%" {print $2}' <<< "$out")
      errors=$(grep -E 'Non-2xx|Socket errors' <<< "$out" || true)
      printf '%-8s %-6s %12s %10s %10s %s\n' "$target" "$c" "$rps" "$p50" "$p99" "$errors"
    done
  done
done
