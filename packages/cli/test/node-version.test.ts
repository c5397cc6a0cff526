// Regression: on a Node older than 24 the CLI started and the server failed later on a
// missing node:zlib export (zstd). bin/run.js now refuses such a Node in one line. The
// older Node is the system one a fresh Debian machine has (/usr/bin/node, Node 20).
import { execFile, execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
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
  t.equal(result.stderr.trim(), `headway needs Node.js 24 or newer; ${old.path} is ${old.version}`);
});
