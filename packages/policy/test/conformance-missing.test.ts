import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import t from 'tap';

// `npm test` on a clone without ../shared must not fail for want of the conformance data:
// outside CI a missing data folder is a skip with a printed reason; under CI=true it stays a failure.
const suite = fileURLToPath(new URL('./conformance.test.js', import.meta.url));

function run(ci: boolean) {
  const env: NodeJS.ProcessEnv = { ...process.env, HEADWAY_CONFORMANCE_DIR: '/nonexistent/headway-conformance' };
  delete env.TAP; delete env.TAP_CHILD_ID; delete env.TAP_BEFORE; delete env.TAP_AFTER;
  if (ci) env.CI = 'true'; else delete env.CI;
  return spawnSync(process.execPath, [suite], { env, encoding: 'utf8' });
}

t.test('conformance data missing outside CI: skipped with the reason, exit 0', async (tt) => {
  const r = run(false);
  tt.equal(r.status, 0, 'exit code 0');
  tt.match(r.stdout, /# SKIP conformance data not found/);
  tt.notMatch(r.stdout, /^not ok/m);
});

t.test('conformance data missing under CI=true: a failure', async (tt) => {
  const r = run(true);
  tt.not(r.status, 0);
  tt.match(r.stdout, /not ok \d+ - conformance data not found/);
});
