#!/usr/bin/env bash
# on-temporal.sh SUITE [args...]: run an interop suite (run.sh,
# python/run.sh) with DBX_BIN set to Temporal's CLI, so the suite starts
# Temporal's real dev server instead of durabox. Fails (never skips) when
# the binary is missing: scripts/setup.sh builds it (temporal-server.sh).
set -euo pipefail
ITP_NAME=on-temporal
. "$(dirname "$0")/servers.sh"
itp_find_temporal
"$ITP_TEMPORAL" --version >/dev/null || itp_fail "$ITP_TEMPORAL does not run"
export DBX_BIN=$ITP_TEMPORAL DBX_TEMPORAL_BIN=$ITP_TEMPORAL
exec bash "$@"
