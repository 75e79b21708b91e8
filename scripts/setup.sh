#!/usr/bin/env bash
# Install everything durabox needs on a fresh Debian 12 machine (as root, or
# with sudo available): C libraries from Debian's packages, and the pinned
# npm packages of the interop tests. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

pkgs=(build-essential cmake ninja-build pkg-config git
      libgrpc-dev protobuf-c-compiler libprotobuf-c-dev protobuf-compiler libprotobuf-dev
      liblmdb-dev lmdb-utils libssl-dev libcurl4-openssl-dev libcjson-dev libyaml-dev libcmocka-dev
      valgrind bubblewrap nodejs npm ca-certificates)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# nodejs may come from outside Debian's packages (a newer build): accept any node >= 20.
if command -v node >/dev/null && node -e 'process.exit(+process.versions.node.split(".")[0] >= 20 ? 0 : 1)'; then
  missing=("${missing[@]/nodejs}"); missing=("${missing[@]/npm}")
fi
clean=(); for p in "${missing[@]}"; do [ -n "$p" ] && clean+=("$p"); done
if [ ${#clean[@]} -gt 0 ]; then
  echo "setup: installing ${clean[*]}"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${clean[@]}"
fi

# npm writes node_modules/.package-lock.json on every install: when it is newer
# than the lock file, the installed tree already matches and npm ci (which
# deletes and refetches node_modules) is skipped.
if [ -f tests/interop/package.json ]; then
  stamp=tests/interop/node_modules/.package-lock.json
  if [ -f "$stamp" ] && [ "$stamp" -nt tests/interop/package-lock.json ]; then
    echo "setup: npm packages up to date"
  else
    echo "setup: npm packages for tests/interop"
    (cd tests/interop && npm ci --no-audit --no-fund --loglevel=error)
  fi
fi
echo "setup: done"
