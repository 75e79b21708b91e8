#!/usr/bin/env bash
# Build Temporal's CLI (the same binary is Temporal's real dev server:
# `temporal server start-dev`) from the Go module proxy at the pinned version,
# and keep it in .cache/temporal-<version>/temporal, so a second run costs
# nothing: it is rebuilt only when the pin below changes (a new version is a
# new directory). Prints the binary's path on stdout; progress goes to stderr.
# Called by scripts/setup.sh; the interop tests against Temporal's server read
# the path from .cache/temporal (a link to the current version's binary).
set -euo pipefail
cd "$(dirname "$0")/../.."
version=v1.5.1
dir=.cache/temporal-$version
bin=$dir/temporal
# (a binary built by `go install` says "0.0.0-DEV": the directory names the pin)
if [ -x "$bin" ] && "$bin" --version 2>/dev/null | grep -q "^temporal version"; then
  echo "temporal-server: Temporal CLI $version already built ($bin)" >&2
else
  command -v go >/dev/null || {
    echo "temporal-server: go is not installed (needs go >= 1.23; Debian 12's golang-go is too old)" >&2
    exit 1
  }
  echo "temporal-server: building Temporal CLI $version from the Go module proxy into $dir" >&2
  start=$(date +%s)
  rm -rf "$dir.tmp"
  mkdir -p "$dir.tmp"
  GOFLAGS=-mod=mod GOBIN="$PWD/$dir.tmp" go install "github.com/temporalio/cli/cmd/temporal@$version" >&2
  rm -rf "$dir"
  mv "$dir.tmp" "$dir"
  echo "temporal-server: built in $(($(date +%s) - start)) s" >&2
fi
ln -sfn "temporal-$version/temporal" .cache/temporal
echo "$PWD/$bin"
