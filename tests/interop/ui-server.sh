#!/usr/bin/env bash
# Build Temporal's Web UI server (github.com/temporalio/ui-server, the version
# Temporal's CLI v1.5.1 embeds) from the Go module proxy into
# .cache/ui-server-<version>/server, once: rebuilt only when the pin below
# changes. .cache/ui-server links to it; `durabox server start-dev` and
# `durabox dev` find it there (cli/ui.h). Prints the binary's path on stdout;
# progress goes to stderr. Called by scripts/setup.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
version=v2.42.1
dir=.cache/ui-server-$version
bin=$dir/server
if [ -x "$bin" ] && "$bin" --version 2>/dev/null | grep -q "${version#v}"; then
  echo "ui-server: Temporal UI server $version already built ($bin)" >&2
else
  command -v go >/dev/null || {
    echo "ui-server: go is not installed (needs go >= 1.24)" >&2
    exit 1
  }
  echo "ui-server: building Temporal's UI server $version from the Go module proxy into $dir" >&2
  start=$(date +%s)
  rm -rf "$dir.tmp"
  mkdir -p "$dir.tmp"
  GOFLAGS=-mod=mod GOBIN="$PWD/$dir.tmp" go install "github.com/temporalio/ui-server/v2/cmd/server@$version" >&2
  rm -rf "$dir"
  mv "$dir.tmp" "$dir"
  echo "ui-server: built in $(($(date +%s) - start)) s" >&2
fi
ln -sfn "ui-server-$version" .cache/ui-server
echo "$PWD/$bin"
