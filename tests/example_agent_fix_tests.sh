#!/usr/bin/env bash
# The agent's headline job as a test: examples/fix-tests' real cJSON source
# (prepare.sh: apt-get source, the planted regression) driven by
# durabox.Agent with the scripted model (tests/fakes/llm) instead of a real
# one: it runs the failing suite, reads cJSON.c, writes the fix, runs the
# suite again and commits, then asks for a pull request. examples/agent's
# policy holds open_pr; `durabox approval grant` releases it and the fake
# GitHub (tests/fakes/github) gets exactly one pull request. A spawned
# `durabox server start-dev` and `durabox worker`; every model turn is
# requested once. Needs root for apt (prepare.sh), python3, cmake.
set -euo pipefail
: "${DBX_BIN:?DBX_BIN is not set: run through ctest}"
src=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/dbx-example-agent.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "example_agent_fix_tests: $*" >&2; [ -f "$work/worker.log" ] && tail -20 "$work/worker.log" >&2; exit 1; }
waitfile() { for _ in $(seq 1 200); do [ -s "$1" ] && return 0; sleep 0.1; done; return 1; }

"$src/examples/fix-tests/prepare.sh" "$work" > "$work/prepare.log" 2>&1 || { cat "$work/prepare.log" >&2; fail "prepare.sh failed"; }
python3 "$src/examples/agent/make-input.py" "$work" acme/cjson > /dev/null

# the model's side of the conversation, the fix being the file as it was before the regression
python3 - "$work/cJSON.c.fixed" "$work/model.json" <<'PY'
import json, sys
fixed = open(sys.argv[1], encoding="utf-8").read()
build = ("grep -qx build/ .git/info/exclude || echo build/ >> .git/info/exclude; "
         "cmake -S . -B build -DENABLE_CJSON_TEST=On -DENABLE_CJSON_UTILS=On >build.log 2>&1 && "
         "cmake --build build -j2 >>build.log 2>&1 || { tail -20 build.log; exit 2; }; "
         "cd build && ctest --output-on-failure | tail -40")
script = {"replies": [
    {"tool_calls": [{"name": "shell", "arguments": {"command": build, "timeout_s": 900}}]},
    {"expect": "compare_tests", "tool_calls": [{"name": "shell", "arguments": {
        "command": "grep -n 'cJSON_Compare' cJSON.c | head"}}]},
    {"expect": "cJSON_Compare", "tool_calls": [{"name": "write_file", "arguments": {
        "path": "cJSON.c", "content": fixed}}]},
    {"expect": "wrote", "tool_calls": [{"name": "shell", "arguments": {"command": build, "timeout_s": 900}}]},
    {"expect": "100% tests passed", "tool_calls": [{"name": "shell", "arguments": {
        "command": "git commit -qam 'Fix cJSON_Compare: arrays of different lengths are not equal' && git log -1 --format=%s"}}]},
    {"expect": "Fix cJSON_Compare", "tool_calls": [{"name": "open_pr", "arguments": {
        "title": "Fix cJSON_Compare for arrays of different lengths",
        "body": "compare_tests failed: an array and its prefix compared equal."}}]},
    {"expect": "pull request #1", "content": "Fixed cJSON_Compare; the suite passes; pull request #1."},
]}
json.dump(script, open(sys.argv[2], "w"))
PY

key=sk-example-key-7f6e5d
token=ghp_example_token_4c3b2a
python3 "$src/tests/fakes/llm/fake_llm.py" --script "$work/model.json" --log "$work/llm.log" \
  --key "$key" --port-file "$work/llm.port" > /dev/null 2>&1 &
pids+=($!)
python3 "$src/tests/fakes/github/fake_github.py" --log "$work/github.log" --token "$token" \
  --port-file "$work/github.port" > /dev/null 2>&1 &
pids+=($!)
waitfile "$work/llm.port" && waitfile "$work/github.port" || fail "the fakes did not start"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
addr=127.0.0.1:$port
"$DBX_BIN" server start-dev --headless --port "$port" --db-filename "$work/svc" --log-level warn > /dev/null 2>&1 &
pids+=($!)
export DURABOX_HOME="$work/home"
LLM_BASE_URL="http://127.0.0.1:$(cat "$work/llm.port")/v1" LLM_MODEL=fake-model LLM_API_KEY=$key \
  GITHUB_TOKEN=$token GITHUB_API_URL="http://127.0.0.1:$(cat "$work/github.port")" \
  "$DBX_BIN" worker --address "$addr" --task-queue durabox --db "$work/wrk" --log-level info \
  > /dev/null 2> "$work/worker.log" &
pids+=($!)
for _ in $(seq 1 100); do "$DBX_BIN" workflow list --address "$addr" > /dev/null 2>&1 && break; sleep 0.2; done
"$DBX_BIN" workflow start --address "$addr" --type durabox.Agent --task-queue durabox \
  --workflow-id example-agent --input-file "$work/agent.json" > /dev/null || fail "start failed"

held=""
for _ in $(seq 1 3000); do  # the two builds take minutes
  held=$("$DBX_BIN" approval list --address "$addr" 2>/dev/null | grep 'workflow_id=example-agent ' || true)
  [ -n "$held" ] && break
  "$DBX_BIN" workflow describe --address "$addr" --workflow-id example-agent 2>/dev/null | grep -q 'COMPLETED\|FAILED' && break
  sleep 0.5
done
[ -n "$held" ] || fail "open_pr was not held (llm log: $(tail -c 600 "$work/llm.log"))"
echo "held: $held"
case "$held" in *"open_pr (rule review-pull-requests"*) ;; *) fail "the held step is not open_pr under review-pull-requests" ;; esac
[ ! -s "$work/github.log" ] || fail "GitHub was called before the approval"
"$DBX_BIN" approval grant example-agent --by example-reviewer --reason "the fix restores the check" \
  --address "$addr" || fail "grant failed"
"$DBX_BIN" workflow result --address "$addr" --workflow-id example-agent > "$work/result.json" || fail "the run did not complete"
python3 - "$work" <<'PY' || fail "the result or the logs are not as expected"
import json, sys
w = sys.argv[1]
r = json.load(open(w + "/result.json"))
r = r.get("result", r) if isinstance(r, dict) and "status" not in r else r
assert r["status"] == "completed", r["status"]
assert r["pull_request"]["number"] == 1, r["pull_request"]
gh = [json.loads(l) for l in open(w + "/github.log")]
assert [e["method"] for e in gh] == ["POST"], gh
assert gh[0]["body"]["head"] == "durabox/example-agent", gh[0]["body"]
llm = [json.loads(l) for l in open(w + "/llm.log")]
turns = [e["turn"] for e in llm]
assert turns == list(range(7)), turns
assert all(e["status"] == 200 and e["auth_ok"] for e in llm), llm
print("example_agent_fix_tests: ok (%d model calls, pull request #1, %d steps)" % (len(llm), len(r["steps"])))
PY
for s in "$key" "$token"; do
  ! grep -rqF -- "$s" "$work/home" "$work/worker.log" || fail "a secret's value is in the sandbox or the worker's log"
  ! "$DBX_BIN" workflow show --address "$addr" --workflow-id example-agent --output json | grep -qF -- "$s" || fail "a secret's value is in the history"
done
