#!/usr/bin/env bash
# Install and cache the peers of bench/matrix.sh from the package registries:
#   - Temporal's dev server: tests/interop/temporal-server.sh (go install of
#     Temporal's CLI, pinned there);
#   - the Go SDK worker + load driver (bench/peers/go, go.temporal.io/sdk
#     pinned in its go.mod/go.sum), built into .cache/bench-peers/go-<sdk>/;
#   - the TypeScript SDK worker (bench/peers/ts, @temporalio/* pinned in its
#     package.json): node_modules in .cache/bench-peers/ts-<sdk>/ (reused from
#     tests/interop/node_modules when that holds the same version, else
#     `npm install`), its workflows bundled once into workflow-bundle.js.
# A second run costs nothing unless a pin or a peer's source changed.
# Prints nothing on stdout; progress on stderr. Needs go and node/npm.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
say() { echo "bench/peers/setup: $*" >&2; }

tests/interop/temporal-server.sh >/dev/null

# Go peer: rebuilt when its sources (or the SDK pin in go.mod) change.
go_sdk=$(awk '$1 == "require" && $2 == "go.temporal.io/sdk" {print $3} $1 == "go.temporal.io/sdk" {print $2}' bench/peers/go/go.mod | head -1)
go_dir=.cache/bench-peers/go-$go_sdk
go_sum=$(cat bench/peers/go/go.mod bench/peers/go/go.sum bench/peers/go/*.go | sha256sum | cut -c1-16)
if [ -x "$go_dir/dbx-peer-go" ] && [ "$(cat "$go_dir/src.sha" 2>/dev/null)" = "$go_sum" ]; then
  say "Go peer (go.temporal.io/sdk $go_sdk) already built"
else
  say "building the Go peer with go.temporal.io/sdk $go_sdk into $go_dir"
  mkdir -p "$go_dir"
  (cd bench/peers/go && GOFLAGS=-mod=readonly go build -o "$root/$go_dir/dbx-peer-go" .)
  echo "$go_sum" >"$go_dir/src.sha"
fi
ln -sfn "go-$go_sdk/dbx-peer-go" .cache/bench-peers/dbx-peer-go

# TypeScript peer.
ts_sdk=$(sed -n 's/.*"@temporalio\/worker": *"\([^"]*\)".*/\1/p' bench/peers/ts/package.json)
ts_dir=.cache/bench-peers/ts-$ts_sdk
mkdir -p "$ts_dir"
have() { [ "$(node -p "require('$1/@temporalio/worker/package.json').version" 2>/dev/null)" = "$ts_sdk" ]; }
if have "$root/$ts_dir/node_modules"; then
  say "TypeScript peer (@temporalio/worker $ts_sdk) already installed"
elif have "$root/tests/interop/node_modules" &&
  [ "$(node -p "require('$root/tests/interop/node_modules/@temporalio/workflow/package.json').version" 2>/dev/null)" = "$ts_sdk" ]; then
  say "TypeScript peer: reusing tests/interop/node_modules (@temporalio/worker $ts_sdk)"
  ln -sfn "$(readlink -f tests/interop/node_modules)" "$ts_dir/node_modules"
else
  say "installing @temporalio/worker $ts_sdk with npm into $ts_dir"
  cp bench/peers/ts/package.json "$ts_dir/"
  (cd "$ts_dir" && npm install --no-audit --no-fund --loglevel=error >&2)
fi
ln -sfn "$root/$ts_dir/node_modules" bench/peers/ts/node_modules
ts_sum=$(cat bench/peers/ts/workflows.js bench/peers/ts/package.json | sha256sum | cut -c1-16)
if [ ! -s "$ts_dir/workflow-bundle.js" ] || [ "$(cat "$ts_dir/bundle.sha" 2>/dev/null)" != "$ts_sum" ]; then
  say "bundling the TypeScript peer's workflows"
  node bench/peers/ts/bundle.js "$ts_dir/workflow-bundle.js.tmp"
  mv "$ts_dir/workflow-bundle.js.tmp" "$ts_dir/workflow-bundle.js"
  echo "$ts_sum" >"$ts_dir/bundle.sha"
fi
ln -sfn "ts-$ts_sdk/workflow-bundle.js" .cache/bench-peers/ts-workflow-bundle.js
say "ready: .cache/bench-peers/dbx-peer-go, bench/peers/ts/worker.js, .cache/temporal"
