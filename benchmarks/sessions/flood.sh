#!/usr/bin/env bash
# flood.sh APP_DLL PORT [extra app args...]: one client (127.0.0.1) floods session starts for 10 s with wrk (16 connections);
# a second client (source address 127.0.0.2) asks for a session once a second from the flood's start until it gets one.
dll=$1; port=$2; shift 2
log=$(mktemp -d /tmp/ps-flood-XXXX)
dotnet "$dll" --urls "http://127.0.0.1:$port" --LogDirectory "$log/log" "$@" > "$log/out.txt" 2>&1 &
server=$!
for _ in $(seq 300); do curl -sf -o /dev/null "http://127.0.0.1:$port/health" && break; sleep 0.2; done
start=$(date +%s.%N)
wrk -t2 -c16 -d${FLOOD_SECONDS:-10}s -s "$(dirname "$0")/flood.lua" "http://127.0.0.1:$port" | grep FLOOD
end=$(date +%s.%N)
echo "live sessions at the flood's end: $(curl -s "http://127.0.0.1:$port/health" )"
got=""
for i in $(seq 0 ${WAIT_SECONDS:-300}); do
  code=$(curl -s -o /dev/null -w "%{http_code}" --interface 127.0.0.2 -X POST "http://127.0.0.1:$port/ps/sessions" -D "$log/h.txt")
  now=$(date +%s.%N)
  if [ "$code" = 201 ]; then got=$(awk -v a="$start" -v b="$now" -v e="$end" 'BEGIN{printf "%.1f s after the flood began, %.1f s after it ended", b-a, b-e}'); break; fi
  ra=$(grep -i '^retry-after' "$log/h.txt" | tr -d '\r' | awk '{print $2}')
  [ -n "$ra" ] && echo "t=$(awk -v a="$start" -v b="$now" 'BEGIN{printf "%.1f", b-a}') s: second client $code, Retry-After $ra" >> "$log/second.txt"
  sleep 1
done
echo "second client (asking once a second from the flood's end): got a session ${got:-never}"
awk 'NR==1 || NR%10==0' "$log/second.txt" 2>/dev/null | head -12
rss=$(awk '/VmRSS/{print $2}' /proc/$server/status)
echo "server RSS after: $((rss / 1024)) MiB"
kill $server; wait $server 2>/dev/null
rm -rf "$log"
