#!/usr/bin/env bash
# The main job over Daytona: examples/fix-tests, the same script.json as
# example_fix_tests.sh, through `durabox run --sandbox daytona` against the
# fake Daytona server (tests/fakes/daytona/fake_daytona.py on loopback, real
# commands and git in its per-sandbox folders). Asserts what the local run
# asserts (the first build-and-test fails naming compare_tests, the fixed
# suite passes, the script completes, the checkpoint holds the fix commit:
# here a snapshot in the fake's store), plus that the fake made exactly one
# sandbox and none is left. Needs root for apt (prepare.sh), python3, cmake.
set -euo pipefail
: "${DBX_BIN:?DBX_BIN is not set: run through ctest}"
src=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/dbx-example-dt.XXXXXX")
fake_pid=""
cleanup() {
  if [ -n "$fake_pid" ]; then kill "$fake_pid" 2>/dev/null || true; wait "$fake_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "example_fix_tests_daytona: $*" >&2; exit 1; }

"$src/examples/fix-tests/prepare.sh" "$work" > "$work/prepare.log" 2>&1 || { cat "$work/prepare.log" >&2; fail "prepare.sh failed"; }

key=dtn_example_key
python3 "$src/tests/fakes/daytona/fake_daytona.py" --root "$work/fake" --port-file "$work/fake.port" \
  --api-key "$key" > "$work/fake.log" 2>&1 &
fake_pid=$!
for _ in $(seq 1 200); do [ -s "$work/fake.port" ] && break; sleep 0.1; done
[ -s "$work/fake.port" ] || { cat "$work/fake.log" >&2; fail "the fake Daytona server did not start"; }
port=$(cat "$work/fake.port")
ctl() { python3 - "$port" "$@" <<'PY'
import sys, urllib.request
port, method, path = sys.argv[1], sys.argv[2], sys.argv[3]
data = sys.argv[4].encode() if len(sys.argv) > 4 else None
req = urllib.request.Request("http://127.0.0.1:%s%s" % (port, path), data=data, method=method)
print(urllib.request.urlopen(req, timeout=10).read().decode())
PY
}
ctl POST /_control/faults '{"transition_ms": 50}' > /dev/null

export DAYTONA_API_URL="http://127.0.0.1:$port/api" DAYTONA_API_KEY="$key"
export DURABOX_HOME="$work/home"
set +e
"$DBX_BIN" run "$work/script.json" --workflow-id example-fix-tests-daytona --sandbox daytona \
  > "$work/run.out" 2>&1
rc=$?
set -e
cat "$work/run.out"
[ "$rc" -eq 0 ] || fail "durabox run --sandbox daytona exited $rc"
grep -q 'compare_tests (Failed)' "$work/run.out" || fail "the first test run does not name compare_tests as failing"
grep -Eq '^build-and-test +exec +NO +8 ' "$work/run.out" || fail "build-and-test did not fail with exit 8"
grep -Eq '^test-again +exec +yes +0 ' "$work/run.out" || fail "test-again did not pass"
grep -q '100% tests passed, 0 tests failed out of 22' "$work/run.out" || fail "the fixed suite did not pass all 22 tests"
grep -q '^script completed$' "$work/run.out" || fail "the script did not complete"
[ ! -d "$DURABOX_HOME/sandboxes" ] || [ -z "$(ls -A "$DURABOX_HOME/sandboxes")" ] || fail "a local sandbox was made"

# the fake: one create, the sandbox gone, the checkpoint a snapshot of the fixed repository
ctl GET /_control/log > "$work/log.json"
creates=$(python3 -c 'import json,sys; print(sum(1 for e in json.load(open(sys.argv[1]))["requests"] if e["method"] == "POST" and e["path"] == "/api/sandbox"))' "$work/log.json")
[ "$creates" = 1 ] || fail "the fake saw $creates creates, not 1"
left=""
for _ in $(seq 1 100); do
  left=$(ctl GET /_control/sandboxes | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["items"]))')
  [ "$left" = 0 ] && break
  sleep 0.1
done
[ "$left" = 0 ] || fail "$left sandbox(es) left in the fake"
snap=$(find "$work/fake/snap" -mindepth 1 -maxdepth 1 -type d | head -n 1)
[ -n "$snap" ] || fail "no snapshot in the fake's store"
subject=$(git -C "$snap" log -1 --format=%s)
case "$subject" in
  *"Fix the regression"*) ;;
  *) fail "the snapshot's HEAD is '$subject', not the fix commit" ;;
esac
git -C "$snap" diff --quiet HEAD~2 HEAD -- cJSON.c || fail "the fix does not restore cJSON.c as it was before the regression"
echo "example_fix_tests_daytona: ok (snapshot $snap at '$subject')"
