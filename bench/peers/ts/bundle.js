'use strict';
// Bundle workflows.js once (bench/peers/setup.sh), so a worker's start and its
// measured CPU and RSS do not include webpack. Usage: node bundle.js OUT.js
const fs = require('node:fs');
const { bundleWorkflowCode } = require('@temporalio/worker');

(async () => {
  const noop = () => {};
  const logger = { log: noop, trace: noop, debug: noop, info: noop, warn: console.warn, error: console.error };
  const { code } = await bundleWorkflowCode({ workflowsPath: require.resolve('./workflows'), logger });
  fs.writeFileSync(process.argv[2], code);
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
