#!/usr/bin/env bash
# Temporal's own CLI (`temporal`, v1.5.1) against durabox's service and
# against Temporal's real dev server: the same commands, in the same order,
# on each (a fresh server, a `durabox worker` polling it), and for every
# command its exit status and the key fields of its `--output json` are
# written down; the test passes only when both lists are the same and the
# values asserted below hold. So the test itself proves that the CLI gets the
# same outcome from both servers.
# Fails (never skips) when DBX_BIN or Temporal's CLI is missing.
set -euo pipefail
ITP_NAME=cli
here=$(cd "$(dirname "$0")" && pwd)
. "$here/servers.sh"
[ -x "${DBX_BIN:-}" ] || itp_fail "DBX_BIN is not set to the durabox binary"
itp_find_temporal
command -v jq >/dev/null || itp_fail "jq is not installed; run scripts/setup.sh"
work=$(mktemp -d "${TMPDIR:-/tmp}/dbx-cli.XXXXXX")
wpid=""
cleanup() {
  [ -n "$wpid" ] && kill -9 "$wpid" 2>/dev/null || true
  [ -n "${ITP_PID:-}" ] && itp_stop "$ITP_PID"
  rm -rf "$work"
}
trap cleanup EXIT

slow='{"sandbox": {"source": {"kind": "empty"}}, "steps": [{"name": "slow", "kind": "exec", "command": "sleep 60"}]}'
quick='{"sandbox": {"source": {"kind": "empty"}}, "steps": [{"name": "hi", "kind": "exec", "command": "echo hi"}]}'

# rec NAME JQ CMD...: run `temporal CMD --address A --output json`, write
# "NAME <exit> <JQ of its stdout>" to the outcome list.
# Temporal's dev server (SQLite underneath) now and then answers a call with
# a transient error when the machine is loaded; such an answer from the peer,
# and only from the peer, is retried (up to twice, 2 s apart) and said on
# stderr. durabox's service gets no second try.
rec() {
  local name=$1 filter=$2 rc key try
  shift 2
  for try in 1 2 3; do
    set +e
    "$ITP_TEMPORAL" "$@" --address "$addr" --output json >"$dir/$name.out" 2>"$dir/$name.err"
    rc=$?
    set -e
    [ "$rc" != 0 ] && [ "$server" = temporal ] && [ "$try" -lt 3 ] &&
      grep -qiE 'unavailable|deadline ?exceeded|resource ?exhausted|database is locked|shard' "$dir/$name.err" ||
      break
    echo "cli: NOTE: Temporal's dev server answered $name with a transient error, retried: $(head -c 300 "$dir/$name.err" | tr '\n' ' ')" >&2
    sleep 2
  done
  key=$(jq -c -s "$filter" "$dir/$name.out" 2>/dev/null) || key="(not json: $(head -c 200 "$dir/$name.out" | tr '\n' ' '))"
  printf '%s\t%s\t%s\n' "$name" "$rc" "$key" >>"${OUT:-$dir/outcomes.tsv}"
}
T() { "$ITP_TEMPORAL" "$@" --address "$addr"; }
status_of() { T workflow describe -w "$1" --output json 2>/dev/null | jq -r '.workflowExecutionInfo.status'; }
wait_until() { # wait_until DESC SECS CMD...
  local desc=$1 secs=$2 until=$((SECONDS + $2))
  shift 2
  while [ $SECONDS -lt $until ]; do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.2
  done
  itp_fail "$server: $desc: not within $secs s (outcomes so far: $(cat "$dir/outcomes.tsv"); what the failed commands printed: $(errs_so_far); server log: $(tail -c 1500 "$dir/$server.log"); worker: $(tail -5 "$dir/worker.log"))"
}
# errs_so_far: the stderr of every recorded command that exited non-zero, so a
# failure names what the server answered, not only the exit status
errs_so_far() {
  local name rc
  while IFS=$'\t' read -r name rc _; do
    [ "$rc" != 0 ] && [ -s "$dir/$name.err" ] && printf '[%s: %s] ' "$name" "$(head -c 400 "$dir/$name.err" | tr '\n' ' ')"
  done <"$dir/outcomes.tsv"
  return 0
}
has_status() { [ "$(status_of "$1")" = "$2" ]; }
gone() { ! T workflow describe -w "$1" >/dev/null 2>&1; }
has_pending() { T workflow describe -w "$1" --output json | jq -e '(.pendingActivities // []) | length > 0'; }

sched_listed() { T schedule list --output json | jq -e '[.[].scheduleId] | index("cli-sched") != null'; }
sched_ran() { # the triggered start of cli-sched ran to completion
  T schedule describe -s cli-sched --output json |
    jq -e '((.info.recentActions // []) | length == 1 and .[0].startWorkflowResult != null) and
      ((.info.runningWorkflows // []) | length == 0)' || return 1
  local w
  w=$(T schedule describe -s cli-sched --output json | jq -r '.info.recentActions[0].startWorkflowResult.workflowId')
  has_status "$w" WORKFLOW_EXECUTION_STATUS_COMPLETED
}
# schedule create/list/describe/trigger/delete (an hourly schedule, so only
# the trigger starts a run while the test lasts)
schedules() {
  rec sched-create 'length' schedule create -s cli-sched --interval 1h --workflow-id cli-sched-wf \
    --type durabox.Script -t durabox --input "$quick" --notes by-the-cli
  rec sched-create-dup 'length' schedule create -s cli-sched --interval 1h --workflow-id cli-sched-wf \
    --type durabox.Script -t durabox --input "$quick"
  wait_until "cli-sched is listed" 30 sched_listed
  rec sched-list '.[0] | map(select(.scheduleId == "cli-sched")) | .[0].info |
    {spec, type: .workflowType.name, future: (.futureActionTimes | length)}' schedule list
  rec sched-describe '.[0] | {spec: .schedule.spec, wf: .schedule.action.startWorkflow.workflowId,
    type: .schedule.action.startWorkflow.workflowType.name, tq: .schedule.action.startWorkflow.taskQueue.name,
    policies: .schedule.policies, state: .schedule.state, future: (.info.futureActionTimes | length),
    actions: (.info.actionCount // "0")}' schedule describe -s cli-sched
  rec sched-describe-missing 'length' schedule describe -s no-such-schedule
  rec sched-trigger 'length' schedule trigger -s cli-sched
  wait_until "the triggered run of cli-sched completes" 60 sched_ran
  rec sched-describe-after '.[0].info | {actions: .actionCount, recent: (.recentActions | length),
    id: (.recentActions[0].startWorkflowResult.workflowId | test("^cli-sched-wf-[0-9T:-]+Z$")),
    running: ((.runningWorkflows // []) | length)}' schedule describe -s cli-sched
  rec sched-delete 'length' schedule delete -s cli-sched
  rec sched-describe-deleted 'length' schedule describe -s cli-sched
  rec sched-delete-missing 'length' schedule delete -s cli-sched
}

session() {
  server=$1
  dir=$work/$server
  mkdir -p "$dir/home"
  if [ "$server" = temporal ]; then itp_start_temporal "$dir"; else itp_start_durabox "$dir"; fi
  addr=$ITP_ADDR
  DURABOX_HOME=$dir/home DURABOX_WORKER_DB=$dir/worker "$DBX_BIN" worker --address "$addr" --log-level warn >"$dir/worker.log" 2>&1 &
  wpid=$!
  : >"$dir/outcomes.tsv"

  rec ns-list '.[0] | [.[].namespaceInfo.name] | index("default") != null' operator namespace list
  rec ns-describe '.[0] | {name: .namespaceInfo.name, state: .namespaceInfo.state, global: .isGlobalNamespace}' \
    operator namespace describe -n default
  rec ns-describe-missing 'length' operator namespace describe -n no-such-namespace
  set +e
  T operator cluster health >"$dir/health.out" 2>&1
  printf 'cluster-health\t%s\t%s\n' $? "$(tr -d '\n' <"$dir/health.out")" >>"$dir/outcomes.tsv"
  set -e
  rec sa-create 'length' operator search-attribute create --name DbxCliKw --type Keyword
  rec sa-list '.[0] | {kw: (.customAttributes.DbxCliKw // null), text: (.customAttributes.DbxCliText // null)}' \
    operator search-attribute list

  rec start-quick '.[0] | {workflowId, type}' workflow start -w cli-quick --type durabox.Script -t durabox --input "$quick"
  # RejectDuplicate: refused whether or not the first run has finished by now
  # (with the default policy a fast machine may close it first and start a
  # second run, on either server)
  rec start-dup 'length' workflow start -w cli-quick --type durabox.Script -t durabox --input "$quick" \
    --id-reuse-policy RejectDuplicate
  rec result '.[0] | {status, result: .closeEvent.workflowExecutionCompletedEventAttributes.result[0].status}' \
    workflow result -w cli-quick
  rec describe '.[0].workflowExecutionInfo | {id: .execution.workflowId, type: .type.name, status, taskQueue}' \
    workflow describe -w cli-quick
  rec show '[.[0].events[].eventType]' workflow show -w cli-quick
  rec describe-missing 'length' workflow describe -w no-such-workflow
  # --legacy-mode reads the deprecated task_queue_status (the CLI shows it as
  # taskQueues, one partition)
  rec tq-describe-legacy '.[0] | {partitions: (.taskQueues | length)}' \
    task-queue describe -t durabox --legacy-mode
  for w in cli-cancel cli-terminate cli-activity cli-update; do
    rec "start-$w" '.[0] | {workflowId}' workflow start -w "$w" --type durabox.Script -t durabox --input "$slow"
  done
  wait_until "cli-activity has a pending activity" 30 has_pending cli-activity
  # the exec step's activity: its id from Describe's pending activities
  local act
  wait_until "cli-activity runs its exec" 30 sh -c "'$ITP_TEMPORAL' workflow describe -w cli-activity --address $addr --output json | jq -e '.pendingActivities[-1].activityType.name == \"sandbox.exec\"'"
  act=$(T workflow describe -w cli-activity --output json | jq -r '.pendingActivities[-1].activityId')
  rec activity-complete 'length' activity complete -w cli-activity --activity-id "$act" --result '{"exit_code": 0}' --identity cli-test
  rec activity-complete-missing 'length' activity complete -w cli-activity --activity-id no-such-activity --result '1' --identity cli-test
  rec signal 'length' workflow signal -w cli-cancel --name poke --input '1'
  rec signal-missing 'length' workflow signal -w no-such-workflow --name poke --input '1'
  wait_until "cli-cancel runs its exec" 30 has_pending cli-cancel
  rec query '.[0] | {type: (.queryResult[0] | type), step: (.queryResult[0].current.name // null)}' \
    workflow query -w cli-cancel --type progress
  rec query-unknown 'length' workflow query -w cli-cancel --type no-such-query
  # durabox.Script has no update handlers: the C worker rejects the update
  # (UnknownUpdate); it runs aside in case a server kept it instead, and
  # cli-update is terminated below
  OUT=$dir/update.tsv rec update-unknown 'length' workflow update execute -w cli-update --name no-such-update --input '1' &
  local upd=$!
  rec list '.[0] | [.[].execution.workflowId] | sort' workflow list --query 'WorkflowId = "cli-quick" OR WorkflowId = "cli-cancel"'
  rec count '.[0].count' workflow count --query 'WorkflowType = "durabox.Script"'
  rec cancel 'length' workflow cancel -w cli-cancel
  wait_until "cli-cancel is cancelled" 60 has_status cli-cancel WORKFLOW_EXECUTION_STATUS_CANCELED
  # a cancel of a closed run: a no-op success on both
  rec cancel-closed 'length' workflow cancel -w cli-cancel
  rec terminate 'length' workflow terminate -w cli-terminate --reason by-the-cli
  rec describe-terminated '.[0].workflowExecutionInfo.status' workflow describe -w cli-terminate
  rec terminate-closed 'length' workflow terminate -w cli-terminate --reason again
  T workflow terminate -w cli-update --reason done >/dev/null
  wait "$upd"
  cat "$dir/update.tsv" >>"$dir/outcomes.tsv"
  rec reset '.[0] | has("runId")' workflow reset -w cli-quick --type FirstWorkflowTask --reason by-the-cli
  wait_until "the reset run of cli-quick completes" 60 has_status cli-quick WORKFLOW_EXECUTION_STATUS_COMPLETED
  rec count-quick-runs '.[0].count' workflow count --query 'WorkflowId = "cli-quick"'
  rec delete 'length' workflow delete -w cli-terminate
  wait_until "cli-terminate is deleted" 60 gone cli-terminate
  rec describe-deleted 'length' workflow describe -w cli-terminate
  schedules
  kill -9 "$wpid" 2>/dev/null || true
  wait "$wpid" 2>/dev/null || true
  wpid=""
  itp_stop "$ITP_PID"
  ITP_PID=""
}

session temporal
session durabox
if ! diff -u "$work/temporal/outcomes.tsv" "$work/durabox/outcomes.tsv" >"$work/diff"; then
  cat "$work/diff" >&2
  for f in "$work"/durabox/*.err; do [ -s "$f" ] && echo "--- durabox $(basename "$f"): $(head -c 300 "$f")" >&2; done
  itp_fail "Temporal's CLI got different outcomes from durabox's service and Temporal's server (- Temporal, + durabox)"
fi
# the outcomes themselves (the same on both, so checked once)
o=$work/durabox/outcomes.tsv
want() { grep -qxF "$1" "$o" || itp_fail "expected the line '$1' in $(cat "$o")"; }
want $'ns-list\t0\ttrue'
want $'ns-describe-missing\t1\t0'
want $'update-unknown\t1\t0'
want $'describe-missing\t1\t0'
want $'cancel\t0\t0'
want $'terminate\t0\t0'
want $'describe-terminated\t0\t"WORKFLOW_EXECUTION_STATUS_TERMINATED"'
want $'reset\t0\ttrue'
want $'start-dup\t0\t1'
want $'query\t0\t{"type":"object","step":"slow"}'
want $'list\t0\t["cli-cancel","cli-quick"]'
want $'describe-deleted\t1\t0'
want $'activity-complete\t0\t0'
want $'sched-create\t0\t0'
want $'sched-create-dup\t1\t0'
want $'sched-describe-missing\t1\t0'
want $'sched-describe-after\t0\t{"actions":"1","recent":1,"id":true,"running":0}'
want $'sched-describe-deleted\t1\t0'
n=$(wc -l <"$o")
echo "cli: the same $n outcomes from Temporal's server and durabox's service:"
cat "$o"
echo "cli: $n passed, 0 failed"
