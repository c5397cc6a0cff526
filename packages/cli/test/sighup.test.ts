// SIGHUP (systemctl reload, `kill -HUP`) must not end `headway serve` with exit 129 when
// policy.mode is not file (whose source listens for it): Node's default for SIGHUP is to
// terminate. The server keeps running and says there was nothing to reload.
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import t from 'tap';
import { RUN, tempDir, writeServeConfig } from './helpers.js';

t.setTimeout(120_000);

for (const mode of ['database', 'file']) {
  t.test(`SIGHUP leaves the server running (policy.mode ${mode})`, async (t) => {
    const { dir, cleanup } = tempDir();
    t.teardown(cleanup);
    const policy = `${dir}/policy.hujson`;
    writeFileSync(policy, '{"acls": [{"action": "accept", "src": ["*"], "dst": ["*:*"]}]}');
    const cfg = writeServeConfig(dir, ['policy:', `  mode: ${mode}`, ...(mode === 'file' ? [`  path: ${policy}`] : [])]);
    // Without tap's NODE_OPTIONS: its signal-exit hooks would be SIGHUP listeners too.
    const env: NodeJS.ProcessEnv = { ...process.env, HOME: dir };
    delete env.NODE_OPTIONS;
    const child = spawn(process.execPath, [RUN, 'serve', '-c', cfg], { cwd: dir, env, stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    t.teardown(() => { if (child.exitCode === null) child.kill('SIGKILL'); });
    for (let i = 0; i < 300 && !/ INF listening /.test(stderr); i++) await new Promise((r) => setTimeout(r, 100));
    const url = / INF listening http=(\S+)/.exec(stderr)?.[1];
    t.ok(url, 'the server is up');

    // File mode re-reads a changed file; database mode has nothing to re-read.
    writeFileSync(policy, '{"acls": [{"action": "accept", "src": ["*"], "dst": ["*:22"]}]}');
    const expected = mode === 'file' ? / INF policy reloaded / : / INF received SIGHUP: nothing to reload /;
    child.kill('SIGHUP');
    for (let i = 0; i < 100 && !expected.test(stderr) && child.exitCode === null; i++) await new Promise((r) => setTimeout(r, 100));
    t.match(stderr, expected, `the server logs what SIGHUP did: ${stderr}`);
    t.equal(child.exitCode, null, 'still running after SIGHUP');
    const health = await fetch(`${url}/health`);
    t.equal(health.status, 200, 'and still answering');

    child.kill('SIGTERM');
    t.equal(await exited, 0, 'SIGTERM still stops it cleanly');
  });
}
