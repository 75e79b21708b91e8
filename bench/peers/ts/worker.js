'use strict';
// dbx-peer-ts: the TypeScript SDK worker of bench/matrix.sh.
// Usage: node worker.js --address HOST:PORT --task-queue Q --bundle BUNDLE.js
// Registers bench.Chain / bench.Hold (workflows.js, bundled by bundle.js) and
// the activities bench.noop / bench.sleep; runs until SIGTERM or SIGINT.
const { Worker, NativeConnection, Runtime, DefaultLogger } = require('@temporalio/worker');

function arg(name, dflt) {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 && i + 1 < process.argv.length ? process.argv[i + 1] : dflt;
}

const activities = {
  'bench.noop': async () => null,
  'bench.sleep': (input) => new Promise((resolve) => setTimeout(() => resolve(null), input.ms)),
};

(async () => {
  Runtime.install({ logger: new DefaultLogger('WARN') });
  const connection = await NativeConnection.connect({ address: arg('address', '127.0.0.1:7233') });
  const worker = await Worker.create({
    connection,
    namespace: 'default',
    taskQueue: arg('task-queue', 'bench'),
    workflowBundle: { codePath: arg('bundle') },
    activities,
    maxConcurrentActivityTaskExecutions: 20000,
    maxConcurrentWorkflowTaskExecutions: 1000,
    maxCachedWorkflows: 2000,
  });
  await worker.run(); // the SDK's own SIGTERM/SIGINT handling shuts it down
  await connection.close();
})().catch((e) => {
  console.error('dbx-peer-ts:', e);
  process.exit(1);
});
