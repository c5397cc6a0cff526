// On a Node older than 24 the server would fail late, on a missing node:zlib export (zstd):
// bin/run.js refuses such a Node in one line. The older Node is the system one a fresh
// Debian machine has (/usr/bin/node, Node 20).
import { execFile, execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, rmSync, symlinkSync } from 'node:fs';
import { dirname, join } from 'node:path';
import t from 'tap';
import { RUN, tempDir } from './helpers.js';

function olderNode(): { path: string; version: string } | undefined {
  for (const path of ['/usr/bin/node', '/usr/local/bin/node', '/bin/node']) {
    if (!existsSync(path)) continue;
    try {
      const version = execFileSync(path, ['-v'], { encoding: 'utf8', timeout: 10_000 }).trim();
      if (Number(version.replace(/^v/, '').split('.')[0]) < 24) return { path, version };
    } catch { /* not runnable */ }
  }
  return undefined;
}

t.test('an older Node is refused with one line naming it and the version needed', async (t) => {
  const old = olderNode();
  if (!old) {
    t.comment('no Node older than 24 on this machine');
    t.skip('no Node older than 24 installed', () => undefined);
    return;
  }
  const { dir, cleanup } = tempDir();
  t.teardown(cleanup);
  const result = await new Promise<{ code: number; stderr: string; stdout: string }>((resolve) => {
    execFile(old.path, [RUN, 'version'], { cwd: dir, env: { PATH: process.env.PATH ?? '', HOME: dir }, timeout: 60_000 }, (err, stdout, stderr) => {
      resolve({ code: err ? Number((err as { code?: unknown }).code ?? 1) : 0, stdout: String(stdout), stderr: String(stderr) });
    });
  });
  t.equal(result.code, 1, `exit 1 on ${old.version}`);
  t.equal(result.stdout, '', 'nothing on stdout');
  t.match(result.stderr.trim(), `headway needs Node.js 24 or newer; ${old.path} is ${old.version}, and there is no Node 24 in ${dir}/.cache/headway/node-24`);
  t.match(result.stderr, /\.\/scripts\/serve\.sh installs one there/, 'it says how to get one');
  t.equal(result.stderr.trim().split('\n').length, 1, 'one line');
});

// serve.sh installs Node 24 privately, and the README's next step (an alias to bin/run.js) runs the Node 20 on
// PATH: run.js runs itself again under that Node 24.
t.test('an older Node runs the CLI under the Node 24 that serve.sh installed', async (t) => {
  const old = olderNode();
  if (!old || Number(process.versions.node.split('.')[0]) < 24) {
    t.skip('needs a Node older than 24 and this test running on 24', () => undefined);
    return;
  }
  const { dir, cleanup } = tempDir();
  t.teardown(cleanup);
  const node24Home = dirname(dirname(process.execPath));
  const run = (env: NodeJS.ProcessEnv) => new Promise<{ code: number; stderr: string; stdout: string }>((resolve) => {
    execFile(old.path, [RUN, 'version', '-o', 'json'], { cwd: dir, env: { PATH: `${dirname(old.path)}:/usr/bin:/bin`, HOME: dir, ...env }, timeout: 60_000 }, (err, stdout, stderr) => {
      resolve({ code: err ? Number((err as { code?: unknown }).code ?? 1) : 0, stdout: String(stdout), stderr: String(stderr) });
    });
  });
  // serve.sh's place: ~/.cache/headway/node-24 (a link to the Node 24 running this test).
  mkdirSync(join(dir, '.cache', 'headway'), { recursive: true });
  symlinkSync(node24Home, join(dir, '.cache', 'headway', 'node-24'));
  const viaHome = await run({});
  t.equal(viaHome.code, 0, viaHome.stderr);
  t.equal(JSON.parse(viaHome.stdout).node, process.version, `version reports ${process.version}, the Node 24 it ran under`);
  // HEADWAY_NODE_HOME names another place.
  rmSync(join(dir, '.cache'), { recursive: true });
  const viaEnv = await run({ HEADWAY_NODE_HOME: node24Home });
  t.equal(viaEnv.code, 0, viaEnv.stderr);
  t.equal(JSON.parse(viaEnv.stdout).node, process.version);
});
