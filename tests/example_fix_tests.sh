#!/usr/bin/env bash
# The main job as a test: examples/fix-tests on Debian's cJSON source through
# `durabox run` (embedded service and worker in-process). Asserts that the
# first build-and-test step failed naming cJSON's compare_tests, that the
# script completed after the fix, and that the checkpoint holds the fix commit.
# Needs root for apt (prepare.sh enables deb-src and runs apt-get source).
set -euo pipefail
: "${DBX_BIN:?DBX_BIN is not set: run through ctest}"
src=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/dbx-example.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "example_fix_tests: $*" >&2; exit 1; }

"$src/examples/fix-tests/prepare.sh" "$work" > "$work/prepare.log" 2>&1 || { cat "$work/prepare.log" >&2; fail "prepare.sh failed"; }
export DURABOX_HOME="$work/home"
set +e
"$DBX_BIN" run "$work/script.json" --workflow-id example-fix-tests > "$work/run.out" 2>&1
rc=$?
set -e
cat "$work/run.out"
[ "$rc" -eq 0 ] || fail "durabox run exited $rc"
grep -q 'compare_tests (Failed)' "$work/run.out" || fail "the first test run does not name compare_tests as failing"
grep -Eq '^build-and-test +exec +NO +8 ' "$work/run.out" || fail "build-and-test did not fail with exit 8"
grep -Eq '^test-again +exec +yes +0 ' "$work/run.out" || fail "test-again did not pass"
grep -q '100% tests passed, 0 tests failed out of 22' "$work/run.out" || fail "the fixed suite did not pass all 22 tests"
grep -q '^script completed$' "$work/run.out" || fail "the script did not complete"
snap=$(find "$DURABOX_HOME/snapshots" -mindepth 1 -maxdepth 1 -type d | head -n 1)
[ -n "$snap" ] || fail "no checkpoint under $DURABOX_HOME/snapshots"
subject=$(git -C "$snap" log -1 --format=%s)
case "$subject" in
  *"Fix the regression"*) ;;
  *) fail "the checkpoint's HEAD is '$subject', not the fix commit" ;;
esac
git -C "$snap" diff --quiet HEAD~2 HEAD -- cJSON.c || fail "the fix does not restore cJSON.c as it was before the regression"
echo "example_fix_tests: ok (checkpoint $snap at '$subject')"
