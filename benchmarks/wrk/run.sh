#!/usr/bin/env bash
# Plain vs [Persistent] endpoints of one server process, loaded by wrk from another process (the end-to-end figure of
# docs/benchmarks.md, "request path CPU"). Needs wrk (apt-get install wrk). Usage:
#   benchmarks/wrk/run.sh [CONNECTIONS...]        default: 16 64; SECONDS_PER_CELL=10 by default
# SERVER_DLL=path/to/PersistentServices.EndToEnd.dll runs that build instead of building this one (A/B comparisons).
# ROUNDS=N (default 1) measures each connection count N times, plain and persistent cells alternating in ABBA order
# (plain, persistent, persistent, plain, ...) so that the host's drift during a run cancels out, and ends with the ratio
# of the mean rates over all rounds: a single cell pair varies by about ±10 % on a shared 2-core host.
set -euo pipefail
cd "$(dirname "$0")/../.."
conns=("${@:-16 64}"); conns=(${conns[@]})
seconds=${SECONDS_PER_CELL:-10}
port=${PORT:-5090}
work=$(mktemp -d)
server=""
trap '[ -n "$server" ] && kill $server 2>/dev/null || true; wait $server 2>/dev/null || true; rm -rf "$work"' EXIT
server_dll=${SERVER_DLL:-}
if [ -z "$server_dll" ]; then
  dotnet build -c Release benchmarks/PersistentServices.EndToEnd >/dev/null
  server_dll=benchmarks/PersistentServices.EndToEnd/bin/Release/net10.0/PersistentServices.EndToEnd.dll
fi
dotnet "$server_dll" serve --port "$port" --log "$work/log" >"$work/server.log" 2>&1 &
server=$!
for _ in $(seq 100); do curl -sf -o /dev/null -X POST "http://127.0.0.1:$port/plain" -H 'Content-Type: application/json' -d '{"n":1}' && break; sleep 0.2; done
cpu_ticks() { awk '{print $14 + $15}' "/proc/$server/stat"; }
hz=$(getconf CLK_TCK)
echo "| endpoint | connections | requests/s | p50 (ms) | p99 (ms) | errors | server CPU per request (µs) | persistent / plain (req/s) |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
rounds=${ROUNDS:-1}
summary=()
sessions() {
  : > "$work/sessions"
  for _ in $(seq "$1"); do curl -s -X POST "http://127.0.0.1:$port/ps/sessions" | sed -E 's/.*"sessionId":"([^"]+)".*/\1/' >> "$work/sessions"; echo >> "$work/sessions"; done
}
for c in "${conns[@]}"; do
  sessions "$c"
  for path in /plain /persistent; do   # warm-up
    PS_SESSIONS="$work/sessions" PS_PATH=$path wrk -t "$c" -c "$c" -d 3s -s benchmarks/wrk/session.lua "http://127.0.0.1:$port" >/dev/null
  done
  declare -A total=([/plain]=0 [/persistent]=0)
  per_round=""
  for round in $(seq "$rounds"); do
    order=(/plain /persistent); [ $((round % 2)) -eq 0 ] && order=(/persistent /plain)
    declare -A rps=()
    for path in "${order[@]}"; do
      [ "$path" = /persistent ] && sessions "$c"   # fresh sessions: every persistent cell starts at request number 1
      before=$(cpu_ticks)
      line=$(PS_SESSIONS="$work/sessions" PS_PATH=$path wrk -t "$c" -c "$c" -d "${seconds}s" -s benchmarks/wrk/session.lua "http://127.0.0.1:$port" | grep '^RESULT')
      after=$(cpu_ticks)
      eval "$(echo "$line" | sed -E 's/RESULT //; s/([a-z0-9_]+)=/r_\1=/g')"
      rps[$path]=$r_rps
      total[$path]=$((total[$path] + r_rps))
      ratio=""; [ -n "${rps[/plain]:-}" ] && [ -n "${rps[/persistent]:-}" ] && ratio=$(awk -v a="${rps[/persistent]}" -v b="${rps[/plain]}" 'BEGIN{printf "%.2f", a/b}')
      cpu=$(awk -v t=$((after - before)) -v hz="$hz" -v n="$r_requests" 'BEGIN{printf "%.1f", t / hz * 1e6 / n}')
      echo "| ${path#/} | $c | $r_rps | $r_p50_ms | $r_p99_ms | $r_errors | $cpu | $ratio |"
    done
    per_round="$per_round $(awk -v a="${rps[/persistent]}" -v b="${rps[/plain]}" 'BEGIN{printf "%.2f", a/b}')"
  done
  summary+=("$(awk -v a="${total[/persistent]}" -v b="${total[/plain]}" -v c="$c" -v n="$rounds" -v r="$per_round" 'BEGIN{printf "%d connections: persistent / plain %.3f over %d round(s) (per round:%s)", c, a/b, n, r}')")
done
if [ "$rounds" -gt 1 ]; then
  echo
  printf '%s\n' "${summary[@]}"
fi
