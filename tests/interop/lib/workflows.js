'use strict';
// Workflow definitions for the interop suite. Plain CommonJS: the worker's
// webpack bundler loads this file by path, so no build step is needed.
// Every exported function is registered as a workflow type of that name.
const wf = require('@temporalio/workflow');

const fast = { initialInterval: '200ms', backoffCoefficient: 1, maximumInterval: '200ms' };

// (a) one activity, its result returned as is.
async function greetWorkflow(name) {
  const { greet } = wf.proxyActivities({ startToCloseTimeout: '30s', retry: fast });
  return await greet(name);
}

// (b) an activity that fails twice before it succeeds.
async function retryWorkflow() {
  const { flaky } = wf.proxyActivities({
    startToCloseTimeout: '30s',
    retry: { ...fast, maximumAttempts: 5 },
  });
  return await flaky(3);
}

// (c) a non-retryable failure under a retry policy that would otherwise wait
// 30 s between attempts: the workflow reports what it caught.
async function nonRetryableWorkflow() {
  const { alwaysFailNonRetryable } = wf.proxyActivities({
    startToCloseTimeout: '30s',
    retry: { initialInterval: '30s', backoffCoefficient: 2, maximumAttempts: 5 },
  });
  try {
    await alwaysFailNonRetryable();
    return { caught: false };
  } catch (err) {
    return {
      caught: true,
      isActivityFailure: err instanceof wf.ActivityFailure,
      activityType: err.activityType,
      retryState: err.retryState,
      causeIsApplicationFailure: err.cause instanceof wf.ApplicationFailure,
      causeType: err.cause && err.cause.type,
      causeMessage: err.cause && err.cause.message,
      causeNonRetryable: err.cause && err.cause.nonRetryable,
    };
  }
}

// (d) attempt 1 heartbeats progress then goes silent; attempt 2 resumes.
async function heartbeatWorkflow() {
  const { resumable } = wf.proxyActivities({
    startToCloseTimeout: '60s',
    heartbeatTimeout: '2s',
    retry: { ...fast, maximumAttempts: 3 },
  });
  return await resumable();
}

// (e) a durable timer.
async function timerWorkflow() {
  await wf.sleep('1s');
  return 'woke';
}

// (f) waits for one signal and returns its payload.
const deliverSignal = wf.defineSignal('deliver');
async function signalWorkflow() {
  let got;
  wf.setHandler(deliverSignal, (payload) => {
    got = payload;
  });
  await wf.condition(() => got !== undefined);
  return got;
}

// (g) a query handler reporting state while the workflow waits.
const stateQuery = wf.defineQuery('state');
const finishSignal = wf.defineSignal('finish');
async function queryWorkflow(label) {
  const state = { label, stage: 'waiting', finishedWith: null };
  wf.setHandler(stateQuery, () => state);
  wf.setHandler(finishSignal, (value) => {
    state.finishedWith = value;
  });
  await wf.condition(() => state.finishedWith !== null);
  state.stage = 'done';
  return state;
}

// (n), (o) a counter changed by the update 'add' (its validator refuses
// non-positive amounts); the signal 'finish' ends it with the total.
const addUpdate = wf.defineUpdate('add');
async function updateWorkflow() {
  let total = 0;
  let finished = false;
  wf.setHandler(
    addUpdate,
    (amount) => {
      total += amount;
      return total;
    },
    {
      validator: (amount) => {
        if (!(amount > 0)) throw new Error(`amount must be positive, got ${amount}`);
      },
    }
  );
  wf.setHandler(finishSignal, () => {
    finished = true;
  });
  await wf.condition(() => finished);
  return total;
}

// (h) parent and child.
async function childWorkflow(n) {
  return n * 2;
}
async function parentWorkflow(n) {
  const info = wf.workflowInfo();
  const childResult = await wf.executeChild(childWorkflow, {
    args: [n],
    workflowId: `${info.workflowId}-child`,
  });
  return { parent: info.workflowId, childResult };
}

// (i) continues as new until the counter reaches 3.
async function counterWorkflow(counter) {
  if (counter < 3) {
    await wf.continueAsNew(counter + 1);
  }
  return counter;
}

// (j), (k) sleeps for an hour; cancelled or terminated by the test.
async function longSleepWorkflow() {
  await wf.sleep('1 hour');
  return 'slept';
}

module.exports = {
  greetWorkflow,
  retryWorkflow,
  nonRetryableWorkflow,
  heartbeatWorkflow,
  timerWorkflow,
  signalWorkflow,
  queryWorkflow,
  childWorkflow,
  parentWorkflow,
  counterWorkflow,
  longSleepWorkflow,
  updateWorkflow,
};
