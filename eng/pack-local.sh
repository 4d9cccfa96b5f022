#!/usr/bin/env bash
# Packs PersistentServices' packages into a local NuGet feed (README.md "Install"), until they are on a public feed:
#   eng/pack-local.sh                 # -> artifacts/packages, version 0.1.0-local.<UTC time>
#   eng/pack-local.sh -p:PersistentServicesReadyToRun=false    # IL only: faster, no ReadyToRun images (docs/dependencies.md)
# Arguments are passed to `dotnet pack`. PS_PACK_OUTPUT changes the folder, PS_VERSION_SUFFIX the version's suffix.
# Every run gets a new version, so an application that updates takes the new packages, never a stale copy from NuGet's cache.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${PS_PACK_OUTPUT:-$root/artifacts/packages}
suffix=${PS_VERSION_SUFFIX:-local.$(date -u +%Y%m%d%H%M%S)}
mkdir -p "$out"
echo "Packing PersistentServices (version suffix $suffix) into $out ..."
dotnet pack "$root/eng/packages.slnf" -c Release -o "$out" --version-suffix "$suffix" -nologo -v q -clp:NoSummary "$@"
echo "Packed:"
ls -1 "$out" | grep -F -- "$suffix" | sed 's/^/  /'
echo "Add the feed to an application:  dotnet nuget add source $out --name persistentservices-local"
