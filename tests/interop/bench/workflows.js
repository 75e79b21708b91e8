'use strict';
// Workflow of bench/history.js: n activities one after the other, so the
// history grows to about 6 n + 5 events, one workflow task per activity.
const wf = require('@temporalio/workflow');

async function chainWorkflow(n) {
  const { step } = wf.proxyActivities({ startToCloseTimeout: '30s' });
  let sum = 0;
  for (let i = 0; i < n; i++) sum += await step(i);
  return sum;
}

module.exports = { chainWorkflow };
