#!/usr/bin/env bash
# Forwards local ports to the bookstore's pods for BookBuyer (docs/operations.md, "Kubernetes"), and keeps forwarding
# when a pod is deleted or restarted (kubectl port-forward ends with its pod: each forward runs again in a loop).
#   samples/Bookstore/k8s/port-forward.sh [FIRST_PORT]    default 18100: pricegrabber, bookseller, store-0, store-1, …
# Prints the buyer's command; Ctrl+C stops every forward. Needs kubectl pointed at the cluster.
set -uo pipefail
ns="${NAMESPACE:-bookstore}"
port="${1:-18100}"
stores="${STORES:-3}"
pods=(pricegrabber-0 bookseller-0)
names=(pricegrabber bookseller)
for ((i = 0; i < stores; i++)); do pods+=("store-$i"); names+=("store-$i"); done

trap 'kill $(jobs -p) 2>/dev/null; exit 0' INT TERM
args=()
for ((i = 0; i < ${#pods[@]}; i++)); do
  local_port=$((port + i))
  args+=(--base-url "${names[$i]}=http://127.0.0.1:$local_port")
  (
    while true; do
      kubectl -n "$ns" port-forward --address 127.0.0.1 "pod/${pods[$i]}" "$local_port:8080" >/dev/null 2>&1
      sleep 1 # the pod is gone or not running yet: forward again
    done
  ) &
done
echo "forwarding; in another terminal:"
echo "  dotnet run --project samples/Bookstore -- buyer ${args[*]}"
wait
