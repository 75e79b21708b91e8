'use strict';
// How long Temporal's TypeScript SDK worker takes to build a 10,000-event
// history on the server in DBX_BIN (durabox, or Temporal's CLI): one
// workflow of 1666 sequential activities (6 events each). With sticky
// queues every workflow task carries only its new events; without them
// every task carries the whole history, so the run costs O(n^2).
// Usage: DBX_BIN=build/cli/durabox node tests/interop/bench/history.js [activities]
// (tests/interop/bench/history.sh sets up node). Prints one JSON line.
const path = require('node:path');
const { Worker, bundleWorkflowCode } = require('@temporalio/worker');
const { startSuite, uniqueName } = require('../lib/harness');

async function main() {
  const n = Number(process.argv[2] || 1666);
  const suite = await startSuite();
  try {
    const bundle = await bundleWorkflowCode({
      workflowsPath: path.join(__dirname, 'workflows.js'),
      logger: { log() {}, trace() {}, debug() {}, info() {}, warn: console.warn, error: console.error },
    });
    const taskQueue = uniqueName('bench');
    const worker = await Worker.create({
      connection: suite.env.nativeConnection,
      namespace: 'default',
      taskQueue,
      workflowBundle: bundle,
      activities: { step: async (i) => i },
    });
    const client = suite.env.client;
    const t0 = process.hrtime.bigint();
    const sum = await worker.runUntil(
      client.workflow.execute('chainWorkflow', { args: [n], taskQueue, workflowId: taskQueue }),
    );
    const ms = Number(process.hrtime.bigint() - t0) / 1e6;
    if (sum !== (n * (n - 1)) / 2) throw new Error(`wrong result ${sum}`);
    const h = client.workflow.getHandle(taskQueue);
    const d = await h.describe();
    let sticky = 0;
    const hist = await h.fetchHistory();
    for (const e of hist.events) {
      const tq = e.workflowTaskScheduledEventAttributes?.taskQueue;
      if (tq && tq.kind === 2) sticky++;
    }
    console.log(JSON.stringify({ server: path.basename(process.env.DBX_BIN), activities: n,
      events: Number(d.historyLength), seconds: +(ms / 1000).toFixed(1),
      ms_per_activity: +(ms / n).toFixed(2), sticky_tasks: sticky }));
  } finally {
    await suite.close();
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
