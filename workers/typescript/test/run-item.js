// The test's work item process (tests/support/worker_world.py's run_ts_item): the unchanged official
// EnvironmentWorker.handleItem() of @anthropic-ai/sdk with memfsTools(), from the ANTHROPIC_*
// variables `ant beta:worker poll --on-work` sets, started by `memfs worker-launch` (the credentials
// on its pipe, node non-dumpable). Exit 0: the item ran; 1: it failed.
// Calls of different session threads run two at a time (MEMFS_TEST_MAX_CONCURRENT_CALLS overrides),
// so every scenario runs with each call's pre-call sync possibly beside another's.
const Anthropic = require('@anthropic-ai/sdk').default;
const { EnvironmentWorker } = require('@anthropic-ai/sdk/helpers/beta/environments');
const { memfsTools, LeaseWatch, takeSecrets } = require('../dist');

const secrets = takeSecrets(); // first: out of process.env and the environment block before anything starts
const lease = new LeaseWatch();
const client = new Anthropic({
  apiKey: secrets.apiKey ?? 'unused',
  baseURL: process.env.ANTHROPIC_BASE_URL,
  maxRetries: 0,
  middleware: [lease.middleware],
});
const worker = new EnvironmentWorker({
  client,
  tools: memfsTools({ root: process.env.MEMFS_TEST_ROOT, lease }),
  memorySyncIntervalMs: null,
  workdir: process.env.MEMFS_TEST_WORKDIR,
  maxIdleMs: 2000,
  maxConcurrentCalls: Number(process.env.MEMFS_TEST_MAX_CONCURRENT_CALLS || 2),
});
worker.handleItem({ workSecret: secrets.workSecret, environmentKey: secrets.environmentKey }).then(
  () => process.exit(0),
  (e) => {
    console.error(`the work item failed: ${e && e.stack ? e.stack : e}`);
    process.exit(1);
  },
);
