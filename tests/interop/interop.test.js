'use strict';
// Temporal's TypeScript SDK (client + sdk-core worker) against the server at
// DBX_BIN, started as `DBX_BIN server start-dev ...` by @temporalio/testing.
// Each scenario uses its own task queue and worker and asserts real values.
const { describe, test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const {
  WorkflowFailedError,
  CancelledFailure,
  TerminatedFailure,
  WorkflowExecutionAlreadyStartedError,
  WorkflowUpdateFailedError,
  WithStartWorkflowOperation,
} = require('@temporalio/client');
const { startSuite, withWorker, waitForEvent, uniqueName, NAMESPACE } = require('./lib/harness');
const { seen } = require('./lib/activities');

const T = { timeout: 120_000 }; // per scenario; generous for a busy 2-core box

describe('temporal typescript sdk interop', () => {
  let suite;
  before(async () => {
    suite = await startSuite();
  });
  after(async () => {
    if (suite) await suite.close();
  });

  const attemptsOf = (workflowId) => (seen.get(workflowId) || []).map((e) => e.attempt);

  test('(a) activity success returns its value', T, async () => {
    const workflowId = uniqueName('greet');
    const result = await withWorker(suite, 'greet', ({ client, taskQueue }) =>
      client.workflow.execute('greetWorkflow', { taskQueue, workflowId, args: ['durabox'] })
    );
    assert.equal(result, 'hello, durabox');
    assert.deepEqual(attemptsOf(workflowId), [1]);
  });

  test('(b) activity retried twice then succeeds on attempt 3', T, async () => {
    const workflowId = uniqueName('retry');
    const result = await withWorker(suite, 'retry', ({ client, taskQueue }) =>
      client.workflow.execute('retryWorkflow', { taskQueue, workflowId })
    );
    assert.deepEqual(result, { attempt: 3 });
    assert.deepEqual(attemptsOf(workflowId), [1, 2, 3]);
  });

  test('(c) non-retryable failure reaches the workflow after one attempt', T, async () => {
    const workflowId = uniqueName('nonretry');
    const result = await withWorker(suite, 'nonretry', ({ client, taskQueue }) =>
      client.workflow.execute('nonRetryableWorkflow', { taskQueue, workflowId })
    );
    assert.deepEqual(result, {
      caught: true,
      isActivityFailure: true,
      activityType: 'alwaysFailNonRetryable',
      retryState: 'NON_RETRYABLE_FAILURE',
      causeIsApplicationFailure: true,
      causeType: 'FatalDisk',
      causeMessage: 'disk is on fire',
      causeNonRetryable: true,
    });
    // The retry policy's 30 s backoff was never used: exactly one attempt ran.
    assert.deepEqual(attemptsOf(workflowId), [1]);
  });

  test('(d) heartbeat timeout retries with the last heartbeat details', T, async () => {
    const workflowId = uniqueName('heartbeat');
    const result = await withWorker(suite, 'heartbeat', ({ client, taskQueue }) =>
      client.workflow.execute('heartbeatWorkflow', { taskQueue, workflowId })
    );
    assert.deepEqual(result, { attempt: 2, resumedFrom: { progress: 7 } });
    const runs = seen.get(workflowId);
    assert.deepEqual(
      runs.map((e) => [e.attempt, e.heartbeatDetails]),
      [
        [1, undefined],
        [2, { progress: 7 }],
      ]
    );
  });

  test('(e) timer: sleep 1s, history has TimerStarted and TimerFired', T, async () => {
    const workflowId = uniqueName('timer');
    const history = await withWorker(suite, 'timer', async ({ client, taskQueue }) => {
      const handle = await client.workflow.start('timerWorkflow', { taskQueue, workflowId });
      assert.equal(await handle.result(), 'woke');
      return await handle.fetchHistory();
    });
    const started = history.events.filter((e) => e.timerStartedEventAttributes != null);
    const fired = history.events.filter((e) => e.timerFiredEventAttributes != null);
    assert.equal(started.length, 1);
    assert.equal(fired.length, 1);
    const timerId = started[0].timerStartedEventAttributes.timerId;
    assert.equal(fired[0].timerFiredEventAttributes.timerId, timerId);
    assert.equal(Number(started[0].timerStartedEventAttributes.startToFireTimeout.seconds), 1);
    assert.equal(
      Number(fired[0].timerFiredEventAttributes.startedEventId),
      Number(started[0].eventId)
    );
    assert.ok(Number(fired[0].eventId) > Number(started[0].eventId));
  });

  test('(f) signal payload is delivered and returned', T, async () => {
    const workflowId = uniqueName('signal');
    const payload = { msg: 'hello', n: 42, list: [1, 'two'] };
    const result = await withWorker(suite, 'signal', async ({ client, taskQueue }) => {
      const handle = await client.workflow.start('signalWorkflow', { taskQueue, workflowId });
      await handle.signal('deliver', payload);
      return await handle.result();
    });
    assert.deepEqual(result, payload);
  });

  test('(g) query returns state while waiting; signal finishes', T, async () => {
    const workflowId = uniqueName('query');
    const { whileWaiting, result } = await withWorker(suite, 'query', async ({ client, taskQueue }) => {
      const handle = await client.workflow.start('queryWorkflow', {
        taskQueue,
        workflowId,
        args: ['q1'],
      });
      const whileWaiting = await handle.query('state');
      await handle.signal('finish', 'enough');
      return { whileWaiting, result: await handle.result() };
    });
    assert.deepEqual(whileWaiting, { label: 'q1', stage: 'waiting', finishedWith: null });
    assert.deepEqual(result, { label: 'q1', stage: 'done', finishedWith: 'enough' });
  });

  test('(h) child workflow result reaches the parent', T, async () => {
    const workflowId = uniqueName('parent');
    const { result, childResult } = await withWorker(suite, 'child', async ({ client, taskQueue }) => {
      const result = await client.workflow.execute('parentWorkflow', {
        taskQueue,
        workflowId,
        args: [21],
      });
      const childResult = await client.workflow.getHandle(`${workflowId}-child`).result();
      return { result, childResult };
    });
    assert.deepEqual(result, { parent: workflowId, childResult: 42 });
    assert.equal(childResult, 42);
  });

  test('(i) continue-as-new three times; result follows the chain', T, async () => {
    const workflowId = uniqueName('can');
    const out = await withWorker(suite, 'can', async ({ client, taskQueue }) => {
      const handle = await client.workflow.start('counterWorkflow', {
        taskQueue,
        workflowId,
        args: [0],
      });
      const result = await handle.result();
      const first = await client.workflow.getHandle(workflowId, handle.firstExecutionRunId).describe();
      const last = await client.workflow.getHandle(workflowId).describe();
      return { result, firstRunId: handle.firstExecutionRunId, first, last };
    });
    assert.equal(out.result, 3);
    assert.equal(out.first.status.name, 'CONTINUED_AS_NEW');
    assert.equal(out.last.status.name, 'COMPLETED');
    assert.notEqual(out.last.runId, out.firstRunId);
  });

  test('(j) cancel during a long sleep fails the run with CancelledFailure', T, async () => {
    const workflowId = uniqueName('cancel');
    const { err, desc } = await withWorker(suite, 'cancel', async ({ client, taskQueue }) => {
      const handle = await client.workflow.start('longSleepWorkflow', { taskQueue, workflowId });
      await waitForEvent(client, workflowId, handle.firstExecutionRunId, (e) => e.timerStartedEventAttributes != null);
      await handle.cancel();
      const err = await handle.result().then(
        () => assert.fail('result resolved after cancel'),
        (e) => e
      );
      return { err, desc: await handle.describe() };
    });
    assert.ok(err instanceof WorkflowFailedError, `got ${err && err.name}: ${err && err.message}`);
    assert.ok(err.cause instanceof CancelledFailure, `cause ${err.cause && err.cause.name}`);
    assert.equal(desc.status.name, 'CANCELLED');
  });

  test('(k) terminate fails the result with TerminatedFailure', T, async () => {
    const workflowId = uniqueName('terminate');
    const { err, desc } = await withWorker(suite, 'terminate', async ({ client, taskQueue }) => {
      const handle = await client.workflow.start('longSleepWorkflow', { taskQueue, workflowId });
      await waitForEvent(client, workflowId, handle.firstExecutionRunId, (e) => e.timerStartedEventAttributes != null);
      await handle.terminate('interop says stop');
      const err = await handle.result().then(
        () => assert.fail('result resolved after terminate'),
        (e) => e
      );
      return { err, desc: await handle.describe() };
    });
    assert.ok(err instanceof WorkflowFailedError, `got ${err && err.name}: ${err && err.message}`);
    assert.ok(err.cause instanceof TerminatedFailure, `cause ${err.cause && err.cause.name}`);
    assert.equal(err.cause.message, 'interop says stop');
    assert.equal(desc.status.name, 'TERMINATED');
  });

  test('(l) reset to the first WorkflowTaskCompleted; new run completes', T, async () => {
    const workflowId = uniqueName('reset');
    const out = await withWorker(suite, 'reset', async ({ client, taskQueue }) => {
      const handle = await client.workflow.start('signalWorkflow', { taskQueue, workflowId });
      const oldRunId = handle.firstExecutionRunId;
      const { event } = await waitForEvent(
        client,
        workflowId,
        oldRunId,
        (e) => e.workflowTaskCompletedEventAttributes != null
      );
      const res = await client.workflowService.resetWorkflowExecution({
        namespace: NAMESPACE,
        workflowExecution: { workflowId, runId: oldRunId },
        reason: 'interop reset',
        workflowTaskFinishEventId: event.eventId,
        requestId: crypto.randomUUID(),
      });
      const newRunId = res.runId;
      const newHandle = client.workflow.getHandle(workflowId, newRunId);
      await newHandle.signal('deliver', { after: 'reset' });
      const result = await newHandle.result();
      const oldDesc = await client.workflow.getHandle(workflowId, oldRunId).describe();
      const newDesc = await newHandle.describe();
      return { oldRunId, newRunId, resetEventId: Number(event.eventId), result, oldDesc, newDesc };
    });
    assert.equal(typeof out.newRunId, 'string');
    assert.ok(out.newRunId.length > 0);
    assert.notEqual(out.newRunId, out.oldRunId);
    assert.deepEqual(out.result, { after: 'reset' });
    assert.equal(out.oldDesc.status.name, 'TERMINATED');
    assert.equal(out.newDesc.status.name, 'COMPLETED');
    assert.equal(out.newDesc.runId, out.newRunId);
  });

  test('(m) starting a running workflow id again is rejected', T, async () => {
    const workflowId = uniqueName('dup');
    const { err, firstRunId, desc } = await withWorker(suite, 'dup', async ({ client, taskQueue }) => {
      const handle = await client.workflow.start('signalWorkflow', { taskQueue, workflowId });
      const err = await client.workflow.start('signalWorkflow', { taskQueue, workflowId }).then(
        () => assert.fail('second start succeeded'),
        (e) => e
      );
      await handle.signal('deliver', 'done');
      await handle.result();
      return { err, firstRunId: handle.firstExecutionRunId, desc: await handle.describe() };
    });
    assert.ok(err instanceof WorkflowExecutionAlreadyStartedError, `got ${err && err.name}: ${err && err.message}`);
    assert.equal(err.workflowId, workflowId);
    assert.equal(err.workflowType, 'signalWorkflow');
    assert.equal(desc.runId, firstRunId);
    assert.equal(desc.status.name, 'COMPLETED');
  });

  test('(n) update accepted and completed: the handler result, Accepted/Completed events', T, async () => {
    const workflowId = uniqueName('update');
    const { first, second, again, result, history } = await withWorker(suite, 'update', async ({ client, taskQueue }) => {
      const handle = await client.workflow.start('updateWorkflow', { taskQueue, workflowId });
      const first = await handle.executeUpdate('add', { args: [5], updateId: 'add-5' });
      const second = await handle.executeUpdate('add', { args: [7], updateId: 'add-7' });
      // the same update id again: the recorded outcome, not a second run of the handler
      const again = await handle.executeUpdate('add', { args: [7], updateId: 'add-7' });
      await handle.signal('finish');
      return { first, second, again, result: await handle.result(), history: await handle.fetchHistory() };
    });
    assert.equal(first, 5);
    assert.equal(second, 12);
    assert.equal(again, 12);
    assert.equal(result, 12);
    const accepted = history.events.filter((e) => e.workflowExecutionUpdateAcceptedEventAttributes != null);
    const completed = history.events.filter((e) => e.workflowExecutionUpdateCompletedEventAttributes != null);
    assert.deepEqual(
      accepted.map((e) => e.workflowExecutionUpdateAcceptedEventAttributes.protocolInstanceId),
      ['add-5', 'add-7']
    );
    assert.deepEqual(
      completed.map((e) => e.workflowExecutionUpdateCompletedEventAttributes.meta.updateId),
      ['add-5', 'add-7']
    );
    assert.equal(
      Number(completed[0].workflowExecutionUpdateCompletedEventAttributes.acceptedEventId),
      Number(accepted[0].eventId)
    );
  });

  test('(o) update rejected by its validator: the caller gets the failure, no update event', T, async () => {
    const workflowId = uniqueName('update-rejected');
    const { err, after, result, history } = await withWorker(suite, 'update-rejected', async ({ client, taskQueue }) => {
      const handle = await client.workflow.start('updateWorkflow', { taskQueue, workflowId });
      const err = await handle.executeUpdate('add', { args: [-3] }).then(
        () => null,
        (e) => e
      );
      const after = await handle.executeUpdate('add', { args: [2] });
      await handle.signal('finish');
      return { err, after, result: await handle.result(), history: await handle.fetchHistory() };
    });
    assert.ok(err instanceof WorkflowUpdateFailedError, `expected WorkflowUpdateFailedError, got ${err}`);
    assert.match(String(err.cause && err.cause.message), /amount must be positive, got -3/);
    assert.equal(after, 2);
    assert.equal(result, 2);
    const accepted = history.events.filter((e) => e.workflowExecutionUpdateAcceptedEventAttributes != null);
    assert.equal(accepted.length, 1); // only the valid update
    assert.equal(accepted[0].workflowExecutionUpdateAcceptedEventAttributes.acceptedRequest.input.name, 'add');
  });

  test('(p) update-with-start: starts the run, then updates the running one', T, async () => {
    const workflowId = uniqueName('update-with-start');
    const r = await withWorker(suite, 'update-with-start', async ({ client, taskQueue }) => {
      const op = () =>
        new WithStartWorkflowOperation('updateWorkflow', {
          workflowId,
          taskQueue,
          workflowIdConflictPolicy: 'USE_EXISTING',
        });
      const op1 = op();
      const first = await client.workflow.executeUpdateWithStart('add', { args: [4], startWorkflowOperation: op1 });
      const h1 = await op1.workflowHandle();
      const op2 = op();
      const second = await client.workflow.executeUpdateWithStart('add', { args: [6], startWorkflowOperation: op2 });
      const h2 = await op2.workflowHandle();
      await h2.signal('finish');
      return { first, second, run1: h1.firstExecutionRunId, run2: h2.firstExecutionRunId, result: await h2.result() };
    });
    assert.equal(r.first, 4);
    assert.equal(r.second, 10);
    assert.equal(r.run1, r.run2); // USE_EXISTING: the second call updated the running run
    assert.equal(r.result, 10);
  });
});
