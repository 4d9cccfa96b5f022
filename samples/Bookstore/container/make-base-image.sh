#!/usr/bin/env bash
# Makes a local stand-in for mcr.microsoft.com/dotnet/aspnet:10.0 where no container registry can be reached: Debian
# bookworm (debootstrap --variant=minbase, plus the libraries the official image carries) with the ASP.NET Core runtime
# copied from this machine's .NET installation, the official image's non-root user "app" (uid and gid 1654) and its
# environment. Usage: make-base-image.sh [IMAGE]   (default localhost/dotnet-aspnet-local:10.0). Needs root, podman and
# debootstrap (Debian: apt-get install podman runc debootstrap). Takes about a minute; the image is about 300 MB.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
image="${1:-localhost/dotnet-aspnet-local:10.0}"
export CONTAINERS_CONF="${CONTAINERS_CONF:-$here/containers.conf}"

dotnet_root="$(dirname "$(readlink -f "$(command -v dotnet)")")"
aspnet="$(ls -d "$dotnet_root"/shared/Microsoft.AspNetCore.App/10.* | sort -V | tail -1)"
netcore="$(ls -d "$dotnet_root"/shared/Microsoft.NETCore.App/10.* | sort -V | tail -1)"
fxr="$(ls -d "$dotnet_root"/host/fxr/10.* | sort -V | tail -1)"
version="$(basename "$aspnet")"

root="$(mktemp -d /tmp/aspnet-base.XXXXXX)"
trap 'rm -rf "$root"' EXIT
# The packages the official bookworm-slim based image installs (ca-certificates, ICU, OpenSSL, tzdata, zlib).
debootstrap --variant=minbase --include=ca-certificates,libicu72,libssl3,tzdata,zlib1g bookworm "$root" >/dev/null
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*

mkdir -p "$root/usr/share/dotnet/shared/Microsoft.AspNetCore.App" "$root/usr/share/dotnet/shared/Microsoft.NETCore.App" "$root/usr/share/dotnet/host/fxr"
cp -a "$dotnet_root/dotnet" "$root/usr/share/dotnet/"
cp -a "$dotnet_root"/LICENSE.txt "$dotnet_root"/ThirdPartyNotices.txt "$root/usr/share/dotnet/" 2>/dev/null || true
cp -a "$aspnet" "$root/usr/share/dotnet/shared/Microsoft.AspNetCore.App/"
cp -a "$netcore" "$root/usr/share/dotnet/shared/Microsoft.NETCore.App/"
cp -a "$fxr" "$root/usr/share/dotnet/host/fxr/"
ln -s /usr/share/dotnet/dotnet "$root/usr/bin/dotnet"

# The official images' non-root user: "app", uid and gid 1654, home /home/app.
echo 'app:x:1654:' >>"$root/etc/group"
echo 'app:x:1654:1654::/home/app:/usr/sbin/nologin' >>"$root/etc/passwd"
echo 'app:!:20000::::::' >>"$root/etc/shadow"
mkdir -p "$root/home/app" && chown 1654:1654 "$root/home/app" && chmod 700 "$root/home/app"

tar -C "$root" -c . | podman import \
  --change 'ENV APP_UID=1654' \
  --change 'ENV ASPNETCORE_HTTP_PORTS=8080' \
  --change 'ENV DOTNET_RUNNING_IN_CONTAINER=true' \
  --change "ENV DOTNET_VERSION=$(basename "$netcore")" \
  --change "ENV ASPNET_VERSION=$version" \
  --change 'CMD ["/bin/bash"]' \
  - "$image" >/dev/null
echo "$image: Debian bookworm (minbase) with ASP.NET Core $version from $dotnet_root"
