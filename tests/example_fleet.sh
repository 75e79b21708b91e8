#!/usr/bin/env bash
# The fleet example as a test: examples/fleet (11 small C projects from
# Debian's source packages, each fetched, built and tested in its own local
# sandbox) through `durabox fleet run` at concurrency 2, embedded service and
# worker in-process. Asserts that the fleet completed with every item
# accounted for, that an item failed only where its source package could not
# be downloaded (with the reason in its error), that most items passed their
# test suites, and that no sandbox is left. Needs root for apt (prepare.sh).
set -euo pipefail
: "${DBX_BIN:?DBX_BIN is not set: run through ctest}"
src=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/dbx-fleet-example.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "example_fleet: $*" >&2; exit 1; }

"$src/examples/fleet/prepare.sh" > "$work/prepare.log" 2>&1 || { cat "$work/prepare.log" >&2; fail "prepare.sh failed"; }
export DURABOX_HOME="$work/home"
start=$(date +%s)
set +e
"$DBX_BIN" fleet run "$src/examples/fleet/fleet.json" --id example-fleet > "$work/run.out" 2>&1
rc=$?
set -e
cat "$work/run.out"
echo "example_fleet: fleet run exited $rc after $(( $(date +%s) - start )) s"
[ "$rc" -le 1 ] || fail "durabox fleet run exited $rc"
"$DBX_BIN" fleet status example-fleet --output json > "$work/result.json" || fail "fleet status failed"
grep -q '^progress: ' "$work/run.out" || fail "no progress lines"
python3 - "$work/result.json" "$src/examples/fleet/items.jsonl" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
keys = [json.loads(l)["key"] for l in open(sys.argv[2]) if l.strip()]
def die(m):
    print("example_fleet: " + m, file=sys.stderr); sys.exit(1)
if r["status"] != "completed": die("fleet status %s" % r["status"])
items = {i["key"]: i for i in r["items"]}
if sorted(items) != sorted(keys): die("items %s, want %s" % (sorted(items), sorted(keys)))
if r["succeeded"] + r["failed"] != len(keys): die("counts %s" % r)
for k, i in items.items():
    if i["status"] == "succeeded": continue
    err = i.get("error", "")
    # only a download may fail, and it says why
    if "step fetch" not in err or "apt-get source" not in err:
        die("%s failed outside the download: %s" % (k, err))
if r["succeeded"] < 6: die("only %d of %d items passed" % (r["succeeded"], len(keys)))
print("example_fleet: %d passed, %d failed to download: %s" % (r["succeeded"], r["failed"],
      ", ".join(k for k, i in items.items() if i["status"] != "succeeded") or "none"))
PY
left=$(find "$DURABOX_HOME/sandboxes" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)
[ "$left" -eq 0 ] || fail "$left sandboxes left"
echo "example_fleet: ok"
