#!/usr/bin/env bash
# The C worker (`durabox worker`, the built-in durabox.Script workflow and the
# local sandbox driver) on Temporal's real dev server: `temporal server
# start-dev --headless` on a free loopback port with a fresh SQLite file,
# runs started and followed with `durabox run --address`, checked with
# Temporal's own CLI. Scenarios: the examples/fix-tests Script end to end
# (Debian's cJSON source: the test fails, the fix, the suite passes, a
# commit, a checkpoint), a retry on exit code, a failure no retry mends
# (non-retryable, one attempt), an at_most_once step redelivered after a
# kill -9 (OutcomeUnknown, never run twice), a durable timer, cancel,
# terminate, a worker killed with -9 mid-step and a new worker re-attaching
# to finish the run, and `durabox replay` of the recorded runs.
# Fails (never skips) when DBX_BIN or Temporal's CLI is missing.
set -euo pipefail
ITP_NAME=cworker-temporal
here=$(cd "$(dirname "$0")" && pwd)
. "$here/servers.sh"
[ -x "${DBX_BIN:-}" ] || itp_fail "DBX_BIN is not set to the durabox binary"
itp_find_temporal
command -v jq >/dev/null || itp_fail "jq is not installed; run scripts/setup.sh"
work=$(mktemp -d "${TMPDIR:-/tmp}/dbx-cwt.XXXXXX")
wpid=""
cleanup() {
  [ -n "$wpid" ] && kill -9 "$wpid" 2>/dev/null || true
  [ -n "${ITP_PID:-}" ] && itp_stop "$ITP_PID"
  rm -rf "$work"
}
trap cleanup EXIT
export DURABOX_HOME=$work/home DURABOX_WORKER_DB=$work/worker
mkdir -p "$DURABOX_HOME"
itp_start_temporal "$work"
addr=$ITP_ADDR
T() { "$ITP_TEMPORAL" "$@" --address "$addr"; }
ok() { echo "cworker-temporal: ok: $*"; }

start_worker() {
  "$DBX_BIN" worker --address "$addr" --log-level warn >>"$work/worker.log" 2>&1 &
  wpid=$!
}
kill_worker() {
  kill -9 "$wpid" 2>/dev/null || true
  wait "$wpid" 2>/dev/null || true
  wpid=""
}
status_of() { T workflow describe -w "$1" --output json | jq -r '.workflowExecutionInfo.status'; }
# wait_for DESC SECS CMD...: poll CMD until it succeeds, up to SECS.
wait_for() {
  local desc=$1 secs=$2 until
  shift 2
  until=$((SECONDS + secs))
  while [ $SECONDS -lt $until ]; do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.2
  done
  itp_fail "$desc: not within $secs s (worker log: $(tail -5 "$work/worker.log"))"
}
has_status() { [ "$(status_of "$1")" = "$2" ]; }
closed() { [ "$(status_of "$1")" != WORKFLOW_EXECUTION_STATUS_RUNNING ]; }
history() { T workflow show -w "$1" --output json; }
has_event() { history "$1" | jq -e --arg t "$2" '[.events[] | select(.eventType == $t)] | length > 0'; }
# a step running: the progress query names it as current
step_running() {
  "$DBX_BIN" workflow query --address "$addr" -w "$1" --type progress 2>/dev/null |
    jq -e --arg s "$2" '.current.name == $s'
}
# the step's attempt started: Temporal's server handed its activity task to a
# worker. The progress query names a step as current from when it is
# scheduled, so a kill right after it could land before any worker took the
# task, and the next worker would then run its first attempt.
attempt_started() {
  T workflow describe -w "$1" --output json |
    jq -e '[.pendingActivities[]? | select(.state == "PENDING_ACTIVITY_STATE_STARTED")] | length > 0'
}
run_json() { # run_json ID FILE: durabox run --address, its output json in $work/ID.json, exit in $rc
  set +e
  # --pickup-timeout 60: a just-started (or restarted) worker's first poll
  # can take over 10 s to reach Temporal's server on a loaded machine
  "$DBX_BIN" run "$2" --address "$addr" -w "$1" --output json --pickup-timeout 60 >"$work/$1.json" 2>"$work/$1.err"
  rc=$?
  set -e
}
script() { cat >"$work/$1.json.in"; echo "$work/$1.json.in"; }

start_worker

# 1. Script with a durable timer, files, an exec whose output is the result
f=$(script basic <<'EOF'
{"sandbox": {"source": {"kind": "empty"}},
 "steps": [{"name": "write", "kind": "write_file", "path": "a.txt", "content": "hello temporal\n"},
           {"name": "nap", "kind": "sleep", "seconds": 1},
           {"name": "cat", "kind": "exec", "command": "cat a.txt; echo 42 > b.txt"},
           {"name": "read", "kind": "read_file", "path": "b.txt"}]}
EOF
)
run_json basic "$f"
[ "$rc" = 0 ] || itp_fail "basic: durabox run exited $rc: $(cat "$work/basic.err")"
jq -e '.status == "completed" and (.steps | length) == 4' "$work/basic.json" >/dev/null || itp_fail "basic: $(cat "$work/basic.json")"
jq -e '.steps[2].stdout | contains("hello temporal")' "$work/basic.json" >/dev/null || itp_fail "basic: cat's stdout"
jq -e '.steps[3].content == "42\n"' "$work/basic.json" >/dev/null || itp_fail "basic: read_file content"
has_status basic WORKFLOW_EXECUTION_STATUS_COMPLETED || itp_fail "basic: Temporal says $(status_of basic)"
history basic | jq -e '[.events[].eventType] | (index("EVENT_TYPE_TIMER_STARTED") != null) and (index("EVENT_TYPE_TIMER_FIRED") != null)' >/dev/null ||
  itp_fail "basic: no TimerStarted/TimerFired in Temporal's history"
history basic | jq -e '.events[] | select(.eventType == "EVENT_TYPE_TIMER_STARTED") | .timerStartedEventAttributes.startToFireTimeout == "1s"' >/dev/null ||
  itp_fail "basic: the timer is not 1 s"
ok "Script with a timer, files and exec completed on Temporal's server"

# 2. retry on exit code: the first run exits 3, the second succeeds
f=$(script retry <<'EOF'
{"sandbox": {"source": {"kind": "empty"}},
 "steps": [{"name": "flaky", "kind": "exec",
            "command": "n=$(cat n 2>/dev/null || echo 0); n=$((n+1)); echo $n > n; [ $n -ge 2 ] || exit 3; echo run $n",
            "retry_on_exit": {"codes": [3], "max_attempts": 3, "backoff_s": 0}}]}
EOF
)
run_json retry "$f"
[ "$rc" = 0 ] || itp_fail "retry: durabox run exited $rc: $(cat "$work/retry.err")"
jq -e '.status == "completed" and .steps[0].runs == 2 and .steps[0].retried_exit_codes == [3]' "$work/retry.json" >/dev/null ||
  itp_fail "retry: $(cat "$work/retry.json")"
history retry | jq -e '[.events[] | select(.eventType == "EVENT_TYPE_ACTIVITY_TASK_COMPLETED")] | length >= 3' >/dev/null ||
  itp_fail "retry: fewer activity completions than create + 2 runs"
ok "retry_on_exit ran the step again and it passed"

# 3. a failure no retry mends: one attempt, non-retryable
f=$(script nonretry <<EOF
{"sandbox": {"source": {"kind": "git", "path": "$work/no-such-repo"}},
 "steps": [{"name": "never", "kind": "exec", "command": "true"}]}
EOF
)
t0=$SECONDS
run_json nonretry "$f"
[ "$rc" != 0 ] || itp_fail "nonretry: durabox run succeeded on a missing repository"
[ $((SECONDS - t0)) -lt 10 ] || itp_fail "nonretry: took $((SECONDS - t0)) s: it was retried"
grep -q "does not exist" "$work/nonretry.json" "$work/nonretry.err" || itp_fail "nonretry: no cause in $(cat "$work/nonretry.json" "$work/nonretry.err")"
history nonretry | jq -e '[.events[] | select(.eventType == "EVENT_TYPE_ACTIVITY_TASK_FAILED")] | length == 1' >/dev/null ||
  itp_fail "nonretry: not exactly one failed attempt"
history nonretry | jq -e '.events[] | select(.eventType == "EVENT_TYPE_ACTIVITY_TASK_FAILED") | .activityTaskFailedEventAttributes.failure.applicationFailureInfo.nonRetryable == true' >/dev/null ||
  itp_fail "nonretry: the failure is not non-retryable"
ok "a missing repository failed at its first attempt, non-retryable"

# 4. a worker killed with -9 mid-step; a new worker re-attaches and the run completes
f=$(script reattach <<'EOF'
{"sandbox": {"source": {"kind": "empty"}},
 "steps": [{"name": "long", "kind": "exec", "command": "sleep 4; echo finished", "heartbeat_timeout_s": 2}]}
EOF
)
"$DBX_BIN" workflow start --address "$addr" -w reattach --type durabox.Script -t durabox --input-file "$f" >/dev/null
wait_for "reattach: step running" 30 step_running reattach long
wait_for "reattach: attempt started" 30 attempt_started reattach
kill_worker
start_worker
wait_for "reattach: completed after the new worker" 60 has_status reattach WORKFLOW_EXECUTION_STATUS_COMPLETED
"$DBX_BIN" workflow result --address "$addr" -w reattach >"$work/reattach.json"
jq -e '.status == "completed" and (.steps[0].stdout | contains("finished"))' "$work/reattach.json" >/dev/null ||
  itp_fail "reattach: $(cat "$work/reattach.json")"
ok "kill -9 of the worker mid-step; the next worker finished the run"

# 5. at_most_once: a kill -9 during the step; the redelivery is OutcomeUnknown, not a second run
f=$(script amo <<'EOF'
{"sandbox": {"source": {"kind": "empty"}},
 "steps": [{"name": "once", "kind": "exec", "retry_class": "at_most_once", "heartbeat_timeout_s": 2,
            "command": "sleep 30"}]}
EOF
)
"$DBX_BIN" workflow start --address "$addr" -w amo --type durabox.Script -t durabox --input-file "$f" >/dev/null
wait_for "amo: step running" 30 step_running amo once
wait_for "amo: attempt started" 30 attempt_started amo
kill_worker
start_worker
wait_for "amo: closed after the lost attempt" 60 closed amo
"$DBX_BIN" workflow result --address "$addr" -w amo >"$work/amo.json" || true
jq -e '.status == "failed" and .failed_step == "once"' "$work/amo.json" >/dev/null || itp_fail "amo: $(cat "$work/amo.json")"
jq -e '.steps[-1].attempts == 1' "$work/amo.json" >/dev/null || itp_fail "amo: the step ran more than once"
history amo | jq -e '[.events[] | select(.eventType == "EVENT_TYPE_ACTIVITY_TASK_SCHEDULED") | .activityTaskScheduledEventAttributes | select(.activityType.name == "sandbox.exec")] | length == 1 and .[0].retryPolicy.maximumAttempts == 1' >/dev/null ||
  itp_fail "amo: the exec was not scheduled once with one attempt"
ok "at_most_once: the step lost with its worker was not run again ($(jq -r '.steps[-1].reason' "$work/amo.json"))"

# 6. cancel and 7. terminate, by Temporal's CLI, of a run whose step is running
f=$(script slow <<'EOF'
{"sandbox": {"source": {"kind": "empty"}},
 "steps": [{"name": "slow", "kind": "exec", "command": "sleep 60"}]}
EOF
)
for how in cancel terminate; do
  "$DBX_BIN" workflow start --address "$addr" -w "$how" --type durabox.Script -t durabox --input-file "$f" >/dev/null
  wait_for "$how: step running" 30 step_running "$how" slow
  if [ "$how" = cancel ]; then
    T workflow cancel -w cancel >/dev/null
    wait_for "cancel: closed" 30 has_status cancel WORKFLOW_EXECUTION_STATUS_CANCELED
  else
    T workflow terminate -w terminate --reason "by the test" >/dev/null
    wait_for "terminate: closed" 30 has_status terminate WORKFLOW_EXECUTION_STATUS_TERMINATED
    history terminate | jq -e '.events[-1].workflowExecutionTerminatedEventAttributes.reason == "by the test"' >/dev/null ||
      itp_fail "terminate: the reason is not in the last event"
  fi
  ok "$how by Temporal's CLI"
done

# 8. replay: every completed run recorded by the worker replays deterministically
for id in basic retry reattach; do
  "$DBX_BIN" replay -w "$id" >"$work/replay-$id.out" 2>&1 || itp_fail "replay $id: $(cat "$work/replay-$id.out")"
done
ok "durabox replay of the recorded runs"

# 9. the examples/fix-tests Script end to end (Debian's cJSON source)
"$here/../../examples/fix-tests/prepare.sh" "$work/fix" >"$work/prepare.log" 2>&1 ||
  itp_fail "examples/fix-tests/prepare.sh failed: $(tail -20 "$work/prepare.log")"
set +e
"$DBX_BIN" run "$work/fix/script.json" --address "$addr" -w fix-tests --pickup-timeout 60 >"$work/fix.out" 2>&1
rc=$?
set -e
[ "$rc" = 0 ] || itp_fail "fix-tests: durabox run exited $rc: $(tail -30 "$work/fix.out")"
grep -q 'compare_tests (Failed)' "$work/fix.out" || itp_fail "fix-tests: the first test run does not name compare_tests"
grep -q '100% tests passed, 0 tests failed out of 22' "$work/fix.out" || itp_fail "fix-tests: the fixed suite did not pass"
grep -q '^script completed$' "$work/fix.out" || itp_fail "fix-tests: the script did not complete"
has_status fix-tests WORKFLOW_EXECUTION_STATUS_COMPLETED || itp_fail "fix-tests: Temporal says $(status_of fix-tests)"
"$DBX_BIN" replay -w fix-tests >"$work/replay-fix.out" 2>&1 || itp_fail "replay fix-tests: $(cat "$work/replay-fix.out")"
ok "examples/fix-tests end to end on Temporal's server, and its replay"
echo "cworker-temporal: 9 passed, 0 failed"
