#!/usr/bin/env bash
# The bookstore's container image, built and run under podman as a cluster would run it (docs/operations.md,
# "Kubernetes"): each of the six services in its own container (read-only root file system, non-root user 1654, every
# capability dropped, no new privileges, a memory limit, /tmp a tmpfs, the log on a volume of its own, the peer key a
# podman secret), in one pod so that they reach each other on 127.0.0.1 as the ConfigMap's addresses say. BookBuyer
# runs on the host against the pod's published ports, as it would through `kubectl port-forward`.
#
#   1. build the image (and the local base image when BASE_IMAGE is not given and it is missing)
#   2. start the six services; check each runs as PID 1 of its container, as uid 1654
#   3. the buyer's loops while BookSeller, then store-1, are killed with SIGKILL (`podman kill`) and started again on the
#      same volume; the buyer reconciles (nothing acknowledged lost, nothing executed twice)
#   4. state intact, from the client side: every store's inventory and ledger and BookSeller's ledger read, every
#      service SIGKILLed and started again, read again: the same
#   5. the buyer's loops while store-0 is stopped with `podman stop` (SIGTERM) and started again (a rolling restart)
#   6. `podman stop` of every service: each drains ("Drained" in its log) within the grace period and exits 0
#
# Usage: samples/Bookstore/container/run-check.sh   (root; podman, runc and debootstrap, installed with apt-get when
# missing). BASE_IMAGE=mcr.microsoft.com/dotnet/aspnet:10.0 uses the official base image instead of the local stand-in.
# KEEP=1 keeps the pod, its volumes and the secret. Exit status 0 when every check passed.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
export CONTAINERS_CONF="${CONTAINERS_CONF:-$here/containers.conf}"
export DOTNET_NOLOGO=1 DOTNET_CLI_TELEMETRY_OPTOUT=1
image="${IMAGE:-localhost/bookstore:dev}"
pod=bookstore-check
grace=50   # the manifests' terminationGracePeriodSeconds; the services' drain timeout is 40 s (DOTNET_SHUTDOWNTIMEOUTSECONDS)
base_port="${BASE_PORT:-18300}"
started=$(date +%s)
failures=0
checks=0

say() { printf '[%4ss] %s\n' "$(($(date +%s) - started))" "$*"; }
pass() { checks=$((checks + 1)); say "ok   $*"; }
fail() { checks=$((checks + 1)); failures=$((failures + 1)); say "FAIL $*"; }

for tool in podman runc debootstrap; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    say "installing podman, runc and debootstrap (apt-get)"
    apt-get install -y -qq podman runc debootstrap >/dev/null 2>&1 ||
      { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq podman runc debootstrap >/dev/null 2>&1; } ||
      { say "cannot install podman, runc and debootstrap"; exit 2; }
    break
  fi
done

# --- 1. the image ------------------------------------------------------------------------------------------------
if [ -z "${BASE_IMAGE:-}" ]; then
  BASE_IMAGE=localhost/dotnet-aspnet-local:10.0
  if ! podman image exists "$BASE_IMAGE"; then
    say "making the local base image $BASE_IMAGE (debootstrap; about a minute or two)"
    "$here/make-base-image.sh" "$BASE_IMAGE" 2>&1 | grep -v '^Copying\|^Getting\|^Writing\|^Storing' || exit 2
  fi
fi
say "building $image on $BASE_IMAGE"
BASE_IMAGE="$BASE_IMAGE" "$here/build-image.sh" "$image" || exit 2
say "building the buyer (dotnet build -c Release samples/Bookstore)"
dotnet build "$repo/samples/Bookstore/Bookstore.csproj" -c Release --nologo -v quiet >/dev/null || exit 2
buyer_dll="$repo/samples/Bookstore/bin/Release/net10.0/Bookstore.dll"

# --- 2. the six services -------------------------------------------------------------------------------------------
services=(store-0 store-1 store-2 pricegrabber taxcalculator bookseller)
declare -A component=([store-0]=store [store-1]=store [store-2]=store [pricegrabber]=pricegrabber [taxcalculator]=tax [bookseller]=seller)
declare -A port
i=0
for s in "${services[@]}"; do port[$s]=$((8100 + i)); i=$((i + 1)); done
published() { echo $((base_port + $(printf '%s\n' "${services[@]}" | grep -nx "$1" | cut -d: -f1) - 1)); }

cleanup() {
  if [ "${KEEP:-0}" = 1 ]; then say "kept: pod $pod, volumes $pod-*, secret $pod-peer-key"; return; fi
  podman pod rm -f -t 0 "$pod" >/dev/null 2>&1
  for s in "${services[@]}"; do podman volume rm -f "$pod-$s" >/dev/null 2>&1; done
  podman secret rm "$pod-peer-key" >/dev/null 2>&1
}
cleanup
trap cleanup EXIT

publish=()
for s in "${services[@]}"; do publish+=(-p "127.0.0.1:$(published "$s"):${port[$s]}"); done
podman pod create --name "$pod" "${publish[@]}" >/dev/null || exit 2
head -c 48 /dev/urandom | base64 | tr -d '\n' | podman secret create "$pod-peer-key" - >/dev/null || exit 2
store_list="store-0=http://127.0.0.1:${port[store-0]};store-1=http://127.0.0.1:${port[store-1]};store-2=http://127.0.0.1:${port[store-2]}"

run_service() {
  local s=$1
  podman volume exists "$pod-$s" || podman volume create "$pod-$s" >/dev/null
  podman run -d --pod "$pod" --name "$s" \
    --read-only --tmpfs /tmp:rw,size=64m --cap-drop ALL --security-opt no-new-privileges --memory 256m \
    -v "$pod-$s:/data:U" --secret "$pod-peer-key,type=env,target=PersistentServices__Calls__PeerKey" \
    -e "PersistentServices__ServiceName=$s" -e "ASPNETCORE_HTTP_PORTS=${port[$s]}" \
    -e "Bookstore__Stores=$store_list" -e "Bookstore__TaxUrl=http://127.0.0.1:${port[taxcalculator]}" \
    -e DOTNET_SHUTDOWNTIMEOUTSECONDS=40 \
    -e PersistentServices__Log__SegmentSizeBits=24 -e PersistentServices__ServiceCheckpointLogBytes=16777216 \
    -e PersistentServices__IdleCheckpointAfter=4 -e PersistentServices__Log__ZeroFillBytes=4194304 \
    "$image" serve "${component[$s]}" >/dev/null
}

wait_ready() { # service [seconds]
  local s=$1 deadline=$(($(date +%s) + ${2:-60}))
  while [ "$(date +%s)" -lt "$deadline" ]; do
    [ "$(curl -s -m 2 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$(published "$s")/health/ready")" = 200 ] && return 0
    sleep 0.2
  done
  return 1
}

say "starting the six services in pod $pod"
for s in "${services[@]}"; do run_service "$s" || { fail "podman run $s"; exit 1; }; done
for s in "${services[@]}"; do
  if wait_ready "$s"; then pass "$s ready (/health/ready 200, /health/live $(curl -s -m 2 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$(published "$s")/health/live"))"
  else fail "$s not ready within 60 s"; podman logs "$s" 2>&1 | tail -20; exit 1; fi
done

for s in "${services[@]}"; do
  hostpid=$(podman inspect -f '{{.State.Pid}}' "$s")
  nspid=$(awk '/^NSpid:/ {print $NF}' "/proc/$hostpid/status")
  uid=$(awk '/^Uid:/ {print $2}' "/proc/$hostpid/status")
  cmd=$(tr '\0' ' ' <"/proc/$hostpid/cmdline")
  if [ "$nspid" = 1 ] && [ "$uid" = 1654 ] && [[ "$cmd" == dotnet* ]]; then pass "$s: PID 1 in its container is '$cmd', uid $uid"
  else fail "$s: PID in its container $nspid, uid $uid, command '$cmd'"; fi
done
if podman exec store-0 touch /app/x 2>/dev/null; then fail "the root file system is writable"; else pass "the root file system is read-only (touch /app/x refused)"; fi

buyer_args=(--base-url "pricegrabber=http://127.0.0.1:$(published pricegrabber)" --base-url "bookseller=http://127.0.0.1:$(published bookseller)")
for s in store-0 store-1 store-2; do buyer_args+=(--base-url "$s=http://127.0.0.1:$(published "$s")"); done

run_buyer() { # seconds output-file
  dotnet "$buyer_dll" buyer "${buyer_args[@]}" --seconds "$1" --quiet >"$2" 2>&1
}

check_buyer() { # what output-file exit-status
  local result
  result=$(grep '^RESULT ' "$2")
  if [ "$3" = 0 ] && [[ "$result" == *"mismatches=0 duplicates=0"* ]]; then pass "$1: $result"
  else fail "$1: exit $3, ${result:-no RESULT line}"; tail -20 "$2"; fi
}

# --- 3. SIGKILL under load -----------------------------------------------------------------------------------------
out=$(mktemp)
say "buyer for 30 s; podman kill (SIGKILL) bookseller at ~8 s and store-1 at ~18 s, each started again on its volume"
run_buyer 30 "$out" &
buyer=$!
for victim in bookseller store-1; do
  sleep 8
  podman kill "$victim" >/dev/null
  code=$(podman wait "$victim")
  down=$(date +%s%N)
  podman start "$victim" >/dev/null
  if wait_ready "$victim"; then
    pass "$victim: SIGKILL (exit $code), started again, ready in $(( ($(date +%s%N) - down) / 1000000 )) ms"
  else fail "$victim did not come back"; fi
done
wait "$buyer"
check_buyer "buyer across two SIGKILLs" "$out" $?
say "     the buyer resent $(grep -c 'resending' "$out") requests (a connection error, a timeout or a 503 each)"

# --- 4. state intact across SIGKILL of every service ------------------------------------------------------------------
snapshot() {
  for s in store-0 store-1 store-2; do curl -sf -m 10 "http://127.0.0.1:$(published "$s")/inventory"; echo; done
  curl -sf -m 10 "http://127.0.0.1:$(published bookseller)/ledger"; echo
}
before=$(snapshot)
for s in "${services[@]}"; do podman kill "$s" >/dev/null; done
for s in "${services[@]}"; do podman wait "$s" >/dev/null; podman start "$s" >/dev/null; done
for s in "${services[@]}"; do wait_ready "$s" || fail "$s did not come back after SIGKILL"; done
after=$(snapshot)
sold=$(echo "$before" | grep -o '"sold":[0-9]*' | cut -d: -f2 | awk '{n += $1} END {print n + 0}')
if [ -n "$before" ] && [ "$before" = "$after" ]; then
  pass "state intact: every store's inventory and ledger and BookSeller's ledger read the same after SIGKILL of all six ($sold books sold so far)"
else fail "state after SIGKILL differs"; diff <(echo "$before") <(echo "$after") | head; fi

# --- 5. a graceful restart under load ------------------------------------------------------------------------------
say "buyer for 20 s; podman stop (SIGTERM) store-0 at ~8 s, started again"
run_buyer 20 "$out" &
buyer=$!
sleep 8
t0=$(date +%s%N)
podman stop -t "$grace" store-0 >/dev/null
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
code=$(podman inspect -f '{{.State.ExitCode}}' store-0)
drained=$(podman logs store-0 2>&1 | grep 'Drained:' | tail -1)
if [ "$code" = 0 ] && [ -n "$drained" ] && [ "$ms" -lt $((grace * 1000)) ]; then pass "store-0: SIGTERM under load, exit 0 after $ms ms: ${drained#*info: }"
else fail "store-0: SIGTERM: exit $code after $ms ms, drained: ${drained:-no}"; fi
podman start store-0 >/dev/null
wait_ready store-0 || fail "store-0 did not come back after its stop"
wait "$buyer"
check_buyer "buyer across a graceful restart" "$out" $?

# --- 6. every service stopped with SIGTERM ---------------------------------------------------------------------------
say "resources before the stop (podman stats):"
podman stats --no-stream --format '       {{.Name}} {{.MemUsage}} {{.CPUPerc}}' "${services[@]}" 2>/dev/null
for s in "${services[@]}"; do
  mountpoint=$(podman volume inspect -f '{{.Mountpoint}}' "$pod-$s")
  say "       $s: log volume holds $(du -sk "$mountpoint" | cut -f1) KiB ($(ls "$mountpoint/log" | grep -c '^log\.') segment files)"
done
for s in "${services[@]}"; do
  before_drains=$(podman logs "$s" 2>&1 | grep -c 'Drained:')
  t0=$(date +%s%N)
  podman stop -t "$grace" "$s" >/dev/null
  ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  code=$(podman inspect -f '{{.State.ExitCode}}' "$s")
  after_drains=$(podman logs "$s" 2>&1 | grep -c 'Drained:')
  if [ "$code" = 0 ] && [ "$after_drains" -gt "$before_drains" ] && [ "$ms" -lt $((grace * 1000)) ]; then
    pass "$s: podman stop (SIGTERM): drained, exit 0 after $ms ms (grace $grace s)"
  else fail "$s: podman stop: exit $code after $ms ms, drained lines $before_drains -> $after_drains"; fi
done
rm -f "$out"

say "$checks checks, $failures failed ($(($(date +%s) - started)) s)"
[ "$failures" -eq 0 ]
