#!/usr/bin/env bash
# Packaging check (CI, .ci/run): packs the packages into a temporary feed and uses them as a stranger would, following
# README.md "Install" and "Quick start":
#   1. the .nuspec files: minimum versions (no [x.y.z] pins but FASTER's), readme, licence, symbol packages;
#   2. a fresh `dotnet new web` app with PersistentServices.AspNetCore and Grpc.AspNetCore beside it, warnings as errors
#      (no NU1608 on Google.Protobuf), the README's quick-start files, built;
#   3. that app run: a session, two requests, a retry (PS-Replayed), kill -9, restart, the same state;
#   4. psctl installed from the feed as a .NET tool, `psctl verify` on the app's log;
#   5. a BenchmarkDotNet 0.15.8 project referencing the app restores under warnings as errors (no NU1608/NU1107 on Roslyn).
# Needs the .NET SDK, curl and python3. Prints one line in `dotnet test`'s format for .ci/run's count.
# Usage: eng/check-packages.sh [--no-build]   (--no-build packs what `dotnet build PersistentServices.sln` built, in
# Debug: what .ci/run does; otherwise it builds Release).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/ps-package-check.XXXXXX")
suffix="check.$(date -u +%Y%m%d%H%M%S)"
version="0.1.0-$suffix"
app_pid=""
passed=0
started=$SECONDS

cleanup() {
  [ -n "$app_pid" ] && kill -9 "$app_pid" 2>/dev/null
  rm -rf "$work"
  # This check's own version only: the next check packs another one.
  rm -rf "${NUGET_PACKAGES:-$HOME/.nuget/packages}"/persistentservices.*/"$version" "${NUGET_PACKAGES:-$HOME/.nuget/packages}/psctl/$version"
}
trap cleanup EXIT

fail() {
  echo "eng/check-packages.sh: FAILED: $*" >&2
  echo "Failed!  - Failed:     1, Passed: $(printf '%5d' "$passed"), Skipped:     0, Total: $(printf '%5d' $((passed + 1))), Duration: $((SECONDS - started)) s - eng/check-packages.sh"
  exit 1
}
ok() { passed=$((passed + 1)); echo "eng/check-packages.sh: ok $passed: $* ($((SECONDS - started)) s)"; }

if [ "${1:-}" = "--no-build" ]; then pack=(-c Debug --no-build); else pack=(-c Release); fi
dotnet pack "$root/eng/packages.slnf" "${pack[@]}" -o "$work/feed" --version-suffix "$suffix" -p:PersistentServicesReadyToRun=false \
  -nologo -v q -clp:NoSummary >"$work/pack.log" 2>&1 || { cat "$work/pack.log"; fail "dotnet pack"; }

# 1. What the packages say.
nuspec() { python3 -c 'import sys, zipfile; print(zipfile.ZipFile(sys.argv[1]).read(sys.argv[2]).decode("utf-8-sig"))' "$work/feed/$1.$version.nupkg" "$1.nuspec"; }
for id in PersistentServices.Core PersistentServices.AspNetCore PersistentServices.Client PersistentServices.OpenTelemetry PersistentServices.Testing PersistentServices.Gateway psctl; do
  [ -f "$work/feed/$id.$version.nupkg" ] || fail "$id was not packed"
  [ -f "$work/feed/$id.$version.snupkg" ] || fail "$id has no symbol package"
  spec=$(nuspec "$id")
  grep -q '<readme>README.md</readme>' <<<"$spec" || fail "$id has no readme"
  grep -q '<license type="expression">MIT</license>' <<<"$spec" || fail "$id has no licence"
  pins=$(grep -o '<dependency id="[^"]*" version="\[[^"]*"' <<<"$spec" | grep -v 'Microsoft.FASTER.Core' || true)
  [ -z "$pins" ] || fail "$id pins exact versions: $pins"
done
# Here-strings, not pipes: grep -q stops reading at its match, and with pipefail the writer's broken pipe failed the check.
grep -q '<dependency id="Google.Protobuf" version="3.25.1"' <<<"$(nuspec PersistentServices.Core)" || fail "Core: Google.Protobuf is not a minimum version"
grep -q '<dependency id="Microsoft.CodeAnalysis.CSharp" version="5.0.0" include="ContentFiles"' <<<"$(nuspec PersistentServices.AspNetCore)" || fail "AspNetCore: no Roslyn floor"
ok "packages: minimum versions, readme, licence, symbols"

# 2. A fresh app from the feed, next to gRPC, warnings as errors.
cd "$work" && dotnet new web -n Fresh -o Fresh >/dev/null 2>&1 || fail "dotnet new web"
cd Fresh
dotnet new nugetconfig >/dev/null 2>&1 && dotnet nuget add source "$work/feed" --name persistentservices-local >/dev/null || fail "nuget.config (README: Install)"
sed -i 's|<Nullable>enable</Nullable>|<Nullable>enable</Nullable>\n    <TreatWarningsAsErrors>true</TreatWarningsAsErrors>|' Fresh.csproj
dotnet add package PersistentServices.AspNetCore --version "$version" >"$work/add1.log" 2>&1 || { cat "$work/add1.log"; fail "dotnet add package PersistentServices.AspNetCore"; }
dotnet add package Grpc.AspNetCore --version 2.85.0 >"$work/add2.log" 2>&1 || { cat "$work/add2.log"; fail "dotnet add package Grpc.AspNetCore beside it"; }
mkdir -p Controllers && cp "$root/samples/QuickStart/Program.cs" Program.cs && cp "$root/samples/QuickStart/Controllers/CartController.cs" Controllers/
dotnet build -nologo -v q -clp:NoSummary >"$work/build.log" 2>&1 || { cat "$work/build.log"; fail "the fresh app does not build"; }
ok "fresh app with PersistentServices.AspNetCore $version and Grpc.AspNetCore builds, warnings as errors"

# 3. The quick start's protocol through kill -9.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
url="http://127.0.0.1:$port"
start_app() {
  dotnet bin/Debug/net10.0/Fresh.dll --urls "$url" >>"$work/app.log" 2>&1 &
  app_pid=$!
  for _ in $(seq 1 300); do curl -s -o /dev/null "$url/cart/stats" && return 0; sleep 0.1; done
  cat "$work/app.log"; fail "the app did not start"
}
start_app
session=$(curl -s -X POST "$url/ps/sessions" | sed -E 's/.*"sessionId":"([^"]+)".*/\1/')
curl -s -X POST "$url/cart/items?sku=book" -H "PS-Session: $session" -H "PS-Seq: 1" >/dev/null
two=$(curl -s -X POST "$url/cart/items?sku=pen" -H "PS-Session: $session" -H "PS-Seq: 2")
[ "$two" = '{"items":["book","pen"],"itemsAdded":2}' ] || fail "second request answered $two"
grep -qi '^PS-Replayed: true' <<<"$(curl -s -i -X POST "$url/cart/items?sku=pen" -H "PS-Session: $session" -H "PS-Seq: 2")" || fail "the retry was not replayed"
kill -9 "$app_pid"; wait "$app_pid" 2>/dev/null; app_pid=""
start_app
cart=$(curl -s "$url/cart" -H "PS-Session: $session")
stats=$(curl -s "$url/cart/stats")
[ "$cart" = '{"items":["book","pen"]}' ] && [ "$stats" = '{"itemsAdded":2}' ] || { cat "$work/app.log"; fail "after kill -9: cart $cart, stats $stats"; }
kill -TERM "$app_pid"; wait "$app_pid" 2>/dev/null; app_pid=""
ok "quick start: session, two requests, replayed retry, kill -9, restart, same state"

# 4. psctl from the feed.
dotnet tool install --tool-path "$work/tools" --add-source "$work/feed" --version "$version" psctl >"$work/tool.log" 2>&1 || { cat "$work/tool.log"; fail "dotnet tool install psctl"; }
"$work/tools/psctl" verify data/log >"$work/verify.log" 2>&1 || { cat "$work/verify.log"; fail "psctl verify on the app's log"; }
ok "psctl $version installed from the feed; psctl verify data/log: $(head -1 "$work/verify.log")"

# 5. BenchmarkDotNet beside the package.
cd "$work" && dotnet new console -n Bench -o Bench >/dev/null 2>&1 && cd Bench || fail "dotnet new console"
cp ../Fresh/nuget.config .
sed -i 's|<Nullable>enable</Nullable>|<Nullable>enable</Nullable>\n    <TreatWarningsAsErrors>true</TreatWarningsAsErrors>|' Bench.csproj
dotnet add reference ../Fresh/Fresh.csproj >/dev/null 2>&1 || fail "dotnet add reference"
dotnet add package BenchmarkDotNet --version 0.15.8 >"$work/bdn.log" 2>&1 || { cat "$work/bdn.log"; fail "a BenchmarkDotNet project beside the package does not restore"; }
dotnet build -nologo -v q -clp:NoSummary >"$work/bdn-build.log" 2>&1 || { cat "$work/bdn-build.log"; fail "the BenchmarkDotNet project does not build"; }
ok "BenchmarkDotNet 0.15.8 project referencing the app restores and builds, warnings as errors"

echo "Passed!  - Failed:     0, Passed: $(printf '%5d' "$passed"), Skipped:     0, Total: $(printf '%5d' "$passed"), Duration: $((SECONDS - started)) s - eng/check-packages.sh"
