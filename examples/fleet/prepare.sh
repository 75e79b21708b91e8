#!/bin/sh
# prepare.sh: what the fleet example needs on this machine: deb-src entries
# mirroring the machine's apt sources (../fix-tests/enable-deb-src.sh, which
# runs apt-get update), dpkg-source to unpack source packages, and the build
# tools the items use (cmake, make, a C compiler). Needs root. Idempotent.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
"$here/../fix-tests/enable-deb-src.sh"
need=""
command -v dpkg-source >/dev/null 2>&1 || need="$need dpkg-dev"
command -v cmake >/dev/null 2>&1 || need="$need cmake"
command -v make >/dev/null 2>&1 || need="$need make"
command -v cc >/dev/null 2>&1 || need="$need gcc libc6-dev"
command -v python3 >/dev/null 2>&1 || need="$need python3-minimal"
if [ -n "$need" ]; then
  # shellcheck disable=SC2086
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need
fi
echo "prepared: deb-src enabled; dpkg-source, cmake, make, cc present"
