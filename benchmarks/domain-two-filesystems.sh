#!/usr/bin/env bash
# The domain benchmark with each member's log on its own file system, as [MSP §5] ran each service on its own machine
# and disk (and as two Kubernetes pods each get their own volume). Needs root: it makes two ext4 images, mounts them on
# loop devices, runs the benchmark with --log-roots, then unmounts and deletes them. Extra arguments go to the benchmark.
#
#   sudo benchmarks/domain-two-filesystems.sh --seconds 15 --sessions 1,16 --calls 1,2,3,4 --configs pessimistic,optimistic --crash-every ""
set -euo pipefail

if [[ $(id -u) -ne 0 ]]; then
  echo "needs root (mount)" >&2
  exit 2
fi

work=$(mktemp -d /var/tmp/ps-domain-fs.XXXXXX)
cleanup() {
  for m in a b; do
    umount "$work/$m" 2>/dev/null || true
  done
  rm -rf "$work"
}
trap cleanup EXIT

for m in a b; do
  # Written, not fallocated: the image's blocks exist, so the loop device's writes do not allocate in the host file system.
  dd if=/dev/zero of="$work/$m.img" bs=1M count=2048 status=none
  mkfs.ext4 -q -F "$work/$m.img"
  mkdir -p "$work/$m"
  mount -o loop "$work/$m.img" "$work/$m"
done

cd "$(dirname "$0")/.."
dotnet run -c Release --project benchmarks/PersistentServices.EndToEnd -- domain --log-roots "$work/a,$work/b" "$@"
