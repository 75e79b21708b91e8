#!/usr/bin/env bash
# bench/fleet_bench.sh: durabox.Fleet through one worker on local sandboxes.
#
#   bench/fleet_bench.sh [BUILD_DIR] [ITEMS] [CONCURRENCY] [RUNNING]
#   (defaults: build 1000 50 200)
#
# Spawns `durabox server start-dev` and one `durabox worker` (--activity-slots
# 256, local sandboxes under a temporary DURABOX_HOME), then
#  1. throughput: a fleet of ITEMS items whose child is a durabox.Script with
#     one exec step `true` (sandbox create, exec, delete), at CONCURRENCY:
#     items per second over the whole `durabox fleet run`, and the parent's
#     history: runs (continue-as-new), events and bytes of each run;
#  2. memory: a new worker, and a fleet of RUNNING items of `sleep 20` at
#     concurrency RUNNING: the worker's peak RSS (VmHWM) while they all run,
#     and the most running at once (the fleet's progress query).
# Prints one line per measure. Not part of the test suite.
set -euo pipefail
build=${1:-build}
items=${2:-1000}
conc=${3:-50}
running=${4:-200}
bin=$(cd "$build" && pwd)/cli/durabox
work=$(mktemp -d "${TMPDIR:-/tmp}/dbx-fleet-bench.XXXXXX")
spid= wpid=
cleanup() {
  [ -n "$wpid" ] && kill "$wpid" 2>/dev/null || true
  [ -n "$spid" ] && kill "$spid" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
export DURABOX_HOME="$work/home"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
addr=127.0.0.1:$port
"$bin" server start-dev --headless --port "$port" --db-filename "$work/svc" --log-level warn >/dev/null 2>&1 &
spid=$!
for _ in $(seq 100); do "$bin" workflow list --address "$addr" >/dev/null 2>&1 && break; sleep 0.2; done
start_worker() {
  "$bin" worker --address "$addr" --task-queue bench --db "$work/wdb" --activity-slots 256 \
    --log-level error >/dev/null 2>&1 &
  wpid=$!
}
start_worker

# 1. throughput
python3 - "$work/items.jsonl" "$items" <<'PY'
import sys
with open(sys.argv[1], "w") as f:
    for i in range(int(sys.argv[2])):
        f.write('{"key": "i%d"}\n' % i)
PY
cat > "$work/tput.json" <<JSON
{"items_file": "$work/items.jsonl", "concurrency": $conc,
 "template": {"input": {"sandbox": {}, "steps": [{"name": "t", "kind": "exec", "command": "true"}]}}}
JSON
t0=$(date +%s.%N)
"$bin" fleet run "$work/tput.json" --address "$addr" --task-queue bench --id bench-tput \
  --output json > "$work/tput.out" || true
t1=$(date +%s.%N)
"$bin" workflow list --address "$addr" --query "WorkflowId = 'bench-tput'" --output json \
  > "$work/runs.json" 2>/dev/null || true
python3 - "$work/tput.out" "$t0" "$t1" "$work/runs.json" "$bin" "$addr" <<'PY'
import json, subprocess, sys
r = json.load(open(sys.argv[1]))
secs = float(sys.argv[3]) - float(sys.argv[2])
n = r["succeeded"] + r["failed"]
print("throughput: %d items (%d succeeded, %d failed) in %.1f s = %.2f items/s, %d parent runs"
      % (n, r["succeeded"], r["failed"], secs, n / secs, r["runs"]))
try:
    runs = json.load(open(sys.argv[4]))
except Exception:
    runs = []
if isinstance(runs, dict):
    runs = runs.get("executions", [])
lens = []
for x in runs:
    rid = x.get("execution", {}).get("runId")
    if not rid:
        continue
    d = json.loads(subprocess.run([sys.argv[5], "workflow", "describe", "--address", sys.argv[6],
                                   "--workflow-id", "bench-tput", "--run-id", rid, "--output", "json"],
                                  capture_output=True, text=True).stdout)
    i = d["workflowExecutionInfo"]
    lens.append((int(i.get("historyLength", 0)), int(i.get("historySizeBytes", 0))))
if lens:
    print("parent history: %d runs; events per run max %d, total %d; bytes per run max %d, total %d"
          % (len(lens), max(l for l, _ in lens), sum(l for l, _ in lens),
             max(b for _, b in lens), sum(b for _, b in lens)))
PY

# 2. memory with RUNNING at once
kill "$wpid"; wait "$wpid" 2>/dev/null || true
start_worker
cat > "$work/mem.json" <<JSON
{"items": [$(python3 -c "print(','.join('{\"key\": \"m%d\"}' % i for i in range($running)))")],
 "concurrency": $running,
 "template": {"input": {"sandbox": {}, "steps": [{"name": "t", "kind": "exec", "command": "sleep 20", "heartbeat_timeout_s": 60}]}}}
JSON
"$bin" fleet run "$work/mem.json" --address "$addr" --task-queue bench --id bench-mem \
  --output json > "$work/mem.out" &
fpid=$!
maxrun=0 maxrss=0
while kill -0 "$fpid" 2>/dev/null; do
  rss=$(awk '/^VmRSS/ {print $2}' "/proc/$wpid/status" 2>/dev/null || echo 0)
  [ "${rss:-0}" -gt "$maxrss" ] && maxrss=$rss
  n=$("$bin" fleet status bench-mem --address "$addr" --output json 2>/dev/null |
      python3 -c 'import json,sys; print(json.load(sys.stdin).get("running", 0))' 2>/dev/null || echo 0)
  [ "${n:-0}" -gt "$maxrun" ] && maxrun=$n
  sleep 1
done
hwm=$(awk '/^VmHWM/ {print $2}' "/proc/$wpid/status")
python3 - "$work/mem.out" "$maxrun" "$maxrss" "$hwm" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print("memory: %d items, at most %s running at once; worker RSS sampled max %.1f MB, peak (VmHWM) %.1f MB; %d succeeded"
      % (len(r["items"]), sys.argv[2], int(sys.argv[3]) / 1024, int(sys.argv[4]) / 1024, r["succeeded"]))
PY
