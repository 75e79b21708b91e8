#!/usr/bin/env bash
# The main job end to end on real input, from a fresh Debian 12 machine:
# install and build durabox, fetch Debian's source of cJSON and plant a
# regression in it (examples/fix-tests), then `durabox run` the fix-tests
# script: a sandbox is created from the repository, cJSON's own test suite is
# built and run (one named test fails, on purpose, and the demo says so
# first), the fix is written, the suite passes,
# the fix is committed and the sandbox checkpointed. Prints the step summary.
# Everything runs in this process tree: the embedded workflow service and a
# worker start inside `durabox run`. Set DURABOX_DEMO_DIR to keep the work
# somewhere else than /tmp/durabox-demo.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh build
work=${DURABOX_DEMO_DIR:-/tmp/durabox-demo}
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
$SUDO examples/fix-tests/prepare.sh "$work"
export DURABOX_HOME=${DURABOX_HOME:-$work/home}
cat <<'MSG'

demo: the first test run (step build-and-test) fails ON PURPOSE: the source
carries a planted regression, so cJSON's compare_tests fails and the step
shows FAILED. The script reads that result, writes the fix, and the second
run (test-again) passes; the script ends "script completed".

MSG
exec build/cli/durabox run "$work/script.json" --workflow-id "fix-tests-$(date +%s)"
