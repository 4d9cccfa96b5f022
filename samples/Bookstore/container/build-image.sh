#!/usr/bin/env bash
# Builds the bookstore's container image with podman (or docker: CONTAINER_TOOL=docker).
#   build-image.sh [IMAGE]   default localhost/bookstore:dev
#   BASE_IMAGE=...           the ASP.NET Core 10 runtime image (default: the Containerfile's, the official one)
#   RID=linux-x64            the runtime identifier to publish for (linux-arm64 for arm64 nodes)
# Publishes samples/Bookstore (Release, framework-dependent, ReadyToRun) into a temporary build context with the
# Containerfile, then builds. Run from anywhere in the repository.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
image="${1:-localhost/bookstore:dev}"
tool="${CONTAINER_TOOL:-podman}"
rid="${RID:-linux-x64}"
if [ "$tool" = podman ]; then export CONTAINERS_CONF="${CONTAINERS_CONF:-$here/containers.conf}"; fi

context="$(mktemp -d /tmp/bookstore-image.XXXXXX)"
trap 'rm -rf "$context"' EXIT
dotnet publish "$repo/samples/Bookstore/Bookstore.csproj" -c Release -r "$rid" --self-contained false \
  -p:PublishReadyToRun=true -o "$context/publish" --nologo -v quiet
rm -f "$context"/publish/*.pdb

build_args=()
if [ -n "${BASE_IMAGE:-}" ]; then build_args+=(--build-arg "BASE_IMAGE=$BASE_IMAGE"); fi
"$tool" build -q -f "$here/Containerfile" "${build_args[@]}" -t "$image" "$context" >/dev/null
base="${BASE_IMAGE:-the default base image}"
echo "$image built from $base ($rid, $(du -sh "$context/publish" | cut -f1) of application)"
