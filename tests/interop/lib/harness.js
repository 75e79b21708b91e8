'use strict';
// Shared plumbing for the interop tests: one server per test process
// (started by @temporalio/testing as `DBX_BIN server start-dev ...`), one
// workflow bundle, and a fresh worker on a unique task queue per test.
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const crypto = require('node:crypto');
const { TestWorkflowEnvironment } = require('@temporalio/testing');
const { Worker, Runtime, DefaultLogger, bundleWorkflowCode } = require('@temporalio/worker');
const { activities } = require('./activities');

const NAMESPACE = 'default';

function serverBinary() {
  const bin = process.env.DBX_BIN;
  if (!bin) {
    throw new Error('DBX_BIN is not set: point it at build/cli/durabox (or a Temporal CLI binary)');
  }
  if (!fs.existsSync(bin)) throw new Error(`DBX_BIN=${bin} does not exist`);
  return path.resolve(bin);
}

// Temporal's SDK core gives a dev server it starts 5 s to answer
// (sdk-core's ephemeral_server: 50 connection tries 100 ms apart, not
// configurable). Temporal's own dev server can take longer on a loaded
// machine, so a start that fails with exactly that timeout is tried again,
// up to 3 times; any other error, and a fourth timeout, fail the suite.
async function createLocalEnv(opts) {
  for (let attempt = 0; ; attempt++) {
    try {
      return await TestWorkflowEnvironment.createLocal(opts);
    } catch (e) {
      if (!String(e && e.message).includes('did not start within') || attempt === 3) throw e;
      console.warn(`the dev server did not answer within the SDK's 5 s (attempt ${attempt + 1}); starting it again`);
    }
  }
}

async function startSuite() {
  // SDK log level: WARN unless DBX_INTEROP_LOG says otherwise (e.g. DEBUG).
  Runtime.install({ logger: new DefaultLogger(process.env.DBX_INTEROP_LOG || 'WARN') });
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'dbx-interop-'));
  const env = await createLocalEnv({
    server: {
      executable: { type: 'existing-path', path: serverBinary() },
      namespace: NAMESPACE,
      ip: '127.0.0.1',
      dbFilename: path.join(dir, 'interop.db'),
    },
  });
  const bundle = await bundleWorkflowCode({
    workflowsPath: require.resolve('./workflows'),
    logger: quietLogger(),
  });
  return {
    env,
    bundle,
    async close() {
      await env.teardown();
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

function quietLogger() {
  const noop = () => {};
  return { log: noop, trace: noop, debug: noop, info: noop, warn: console.warn, error: console.error };
}

function uniqueName(prefix) {
  return `${prefix}-${crypto.randomUUID()}`;
}

// Run fn({ client, taskQueue }) while a worker polls a task queue of its own.
async function withWorker(suite, name, fn) {
  const taskQueue = uniqueName(`tq-${name}`);
  const worker = await Worker.create({
    connection: suite.env.nativeConnection,
    namespace: NAMESPACE,
    taskQueue,
    workflowBundle: suite.bundle,
    activities,
  });
  return await worker.runUntil(fn({ client: suite.env.client, taskQueue }));
}

// Long-poll the history of one run (GetWorkflowExecutionHistory with
// wait_new_event) until an event matches; resolves with that event and all
// events seen so far. Rejects if the run closes without such an event.
async function waitForEvent(client, workflowId, runId, match) {
  const events = [];
  let nextPageToken;
  for (;;) {
    const res = await client.workflowService.getWorkflowExecutionHistory({
      namespace: NAMESPACE,
      execution: { workflowId, runId },
      waitNewEvent: true,
      nextPageToken,
    });
    for (const ev of (res.history && res.history.events) || []) {
      events.push(ev);
      if (match(ev)) return { event: ev, events };
    }
    if (!res.nextPageToken || res.nextPageToken.length === 0) {
      throw new Error(`run ${workflowId}/${runId} closed without the awaited event`);
    }
    nextPageToken = res.nextPageToken;
  }
}

module.exports = { NAMESPACE, startSuite, withWorker, waitForEvent, uniqueName };
