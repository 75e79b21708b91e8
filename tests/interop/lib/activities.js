'use strict';
// Activities for the interop suite. They run in the test process, so each
// records what it saw in `seen` (keyed by workflow id) for the test to assert.
const { Context, ApplicationFailure } = require('@temporalio/activity');

const seen = new Map(); // workflowId -> array of { activity, attempt, heartbeatDetails }
const waiters = new Map(); // workflowId -> resolve() called when attempt 2 starts

function record(activity) {
  const info = Context.current().info;
  const id = info.workflowExecution.workflowId;
  if (!seen.has(id)) seen.set(id, []);
  const entry = { activity, attempt: info.attempt, heartbeatDetails: info.heartbeatDetails };
  seen.get(id).push(entry);
  return { id, info };
}

async function greet(name) {
  record('greet');
  return `hello, ${name}`;
}

async function flaky(succeedOnAttempt) {
  const { info } = record('flaky');
  if (info.attempt < succeedOnAttempt) {
    throw ApplicationFailure.retryable(`planned failure on attempt ${info.attempt}`, 'Planned');
  }
  return { attempt: info.attempt };
}

async function alwaysFailNonRetryable() {
  record('alwaysFailNonRetryable');
  throw ApplicationFailure.nonRetryable('disk is on fire', 'FatalDisk');
}

async function resumable() {
  const { id, info } = record('resumable');
  if (info.attempt === 1) {
    Context.current().heartbeat({ progress: 7 });
    // Go silent: no more heartbeats, so the server times this attempt out and
    // schedules attempt 2. Stay busy until attempt 2 has begun (or a cap).
    await new Promise((resolve) => {
      waiters.set(id, resolve);
      setTimeout(resolve, 60_000).unref();
    });
    return { attempt: 1, stale: true };
  }
  const wake = waiters.get(id);
  if (wake) wake();
  return { attempt: info.attempt, resumedFrom: info.heartbeatDetails };
}

module.exports = { activities: { greet, flaky, alwaysFailNonRetryable, resumable }, seen };
