'use strict';
// The bench workflows of bench/matrix.sh, under the same names and inputs as
// the Go (bench/peers/go) and C (bench/peer_worker.c) workers.
const wf = require('@temporalio/workflow');

// {"n":N}: N no-op activities one after another.
async function chain(input) {
  const acts = wf.proxyActivities({ startToCloseTimeout: '30s' });
  for (let i = 0; i < input.n; i++) await acts['bench.noop'](input);
}

// {"ms":M}: one activity that sleeps M ms.
async function hold(input) {
  const acts = wf.proxyActivities({ startToCloseTimeout: `${input.ms + 120000}ms` });
  await acts['bench.sleep'](input);
}

module.exports = { 'bench.Chain': chain, 'bench.Hold': hold };
