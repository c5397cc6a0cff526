import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import t from 'tap';
import { RUN, headway, tempDir, writeServeConfig } from './helpers.js';

// Boots the real server, so it only runs once the workspace is built.
t.setTimeout(120_000);

function built(pkg: string): boolean {
  try {
    return existsSync(createRequire(import.meta.url).resolve(pkg));
  } catch {
    return false;
  }
}
const skip = !built('@headway/storage-sqlite') || !built('@headway/storage-postgres') ? 'the storage adapters are not built' : false;


t.test('a wrong database setting prints the one FATAL line and no knex stack trace', { skip }, async (t) => {
  const { dir, cleanup } = tempDir();
  t.teardown(cleanup);
  // Port 1 on loopback refuses at once; knex's own "Acquire connection error" and its stack must not show.
  const cfg = writeServeConfig(dir, ['database:', '  type: postgres', '  postgres:', '    host: 127.0.0.1', '    port: 1', '    pass: hunter2-canary']);
  const r = await headway(['serve', '-c', cfg], { env: { HOME: dir }, cwd: dir });
  t.equal(r.code, 1);
  const lines = r.stderr.split('\n').filter(Boolean);
  t.equal(lines.filter((l) => / FTL /.test(l)).length, 1, r.stderr);
  t.match(lines.at(-1), / FTL .*cannot connect to postgres at 127\.0\.0\.1:1 .*ECONNREFUSED/);
  t.notMatch(r.stderr, /Acquire connection error/);
  t.notMatch(r.stderr, /\n\s+at /, 'no stack trace');
  t.notMatch(r.stderr, /hunter2-canary/, 'no password');
  t.ok(lines.every((l) => /^\d{4}-\d\d-\d\dT\S+ (INF|WRN|FTL) /.test(l)), `every line is a log line: ${r.stderr}`);
});

t.test('serve -c logs which config file it loaded', { skip }, async (t) => {
  const { dir, cleanup } = tempDir();
  t.teardown(cleanup);
  const cfg = writeServeConfig(dir, ['database:', '  type: postgres', '  postgres:', '    host: 127.0.0.1', '    port: 1']);
  const r = await headway(['serve', '-c', cfg], { env: { HOME: dir }, cwd: dir });
  t.match(r.stderr, new RegExp(` INF config file loaded path=${cfg.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}\\n`));
});

t.test('a second serve on the same data directory stops with one FATAL line naming the first pid', { skip }, async (t) => {
  const { dir, cleanup } = tempDir();
  t.teardown(cleanup);
  const cfg = writeServeConfig(dir, []);
  const first = spawn(process.execPath, [RUN, 'serve', '-c', cfg], { cwd: dir, env: { ...process.env, HOME: dir }, stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  first.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
  const exited = new Promise<number | null>((resolve) => first.on('exit', (code) => resolve(code)));
  t.teardown(() => { if (first.exitCode === null) first.kill('SIGKILL'); });
  for (let i = 0; i < 150 && !/ INF listening /.test(stderr); i++) await new Promise((r) => setTimeout(r, 100));
  t.match(stderr, / INF listening /, 'the first server is up');

  const second = await headway(['serve', '-c', cfg], { env: { HOME: dir }, cwd: dir });
  t.equal(second.code, 1);
  const fatal = second.stderr.split('\n').filter((l) => / FTL /.test(l));
  t.equal(fatal.length, 1, second.stderr);
  t.match(fatal[0], new RegExp(`another Headway \\(pid ${first.pid}\\) uses the data directory ${dir}/data`));
  t.notMatch(second.stderr, /\n\s+at /, 'no stack trace');

  first.kill('SIGTERM');
  t.equal(await exited, 0);
  t.notOk(existsSync(`${dir}/data/headway.lock`), 'the lock is removed on shutdown');
});
