import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import t, { type Test } from 'tap';
import { getHeapStatistics } from 'node:v8';
import { SERVER_HEAP_LIMIT_MB, SERVER_SEMI_SPACE_MB } from '@headway/core/ports';
import { RUN, headway, tempDir, writeServeConfig } from './helpers.js';

// Boots the real server (sqlite), so it only runs once the workspace is built.
t.setTimeout(120_000);

function sqliteBuilt(): boolean {
  try {
    const require = createRequire(import.meta.url);
    return existsSync(require.resolve('@headway/storage-sqlite'));
  } catch {
    return false;
  }
}

const core = (await import('@headway/server')) as Record<string, unknown>;
const skip = typeof core.startServer !== 'function' || !sqliteBuilt() ? 'the server (startServer, storage-sqlite) is not built' : false;

function config(dir: string, dbPath: string): string {
  return writeServeConfig(dir, ['server_url: http://127.0.0.1:18080', 'database:', '  type: sqlite', '  sqlite:', `    path: ${dbPath}`]);
}

t.test('serve: boot failure is one FATAL line, exit 1', { skip }, async (t) => {
  const { dir, cleanup } = tempDir();
  t.teardown(cleanup);
  const r = await headway(['serve', '-c', config(dir, '/dev/null/db.sqlite')], { env: { HOME: dir }, cwd: dir });
  t.equal(r.code, 1);
  const fatal = r.stderr.split('\n').filter((l) => / FTL /.test(l));
  t.equal(fatal.length, 1, r.stderr);
  t.match(fatal[0], /\/dev\/null\/db\.sqlite/);
  t.notMatch(r.stderr, /\n\s+at /, 'no stack trace');
});

t.test('serve: answers the CLI on its socket and stops cleanly on SIGTERM', { skip }, async (t) => {
  const { dir, cleanup } = tempDir();
  t.teardown(cleanup);
  const cfg = config(dir, `${dir}/data/db.sqlite`);
  const child = spawn(process.execPath, [RUN, 'serve', '-c', cfg], { cwd: dir, env: { ...process.env, HOME: dir }, stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  t.teardown(() => {
    if (child.exitCode === null) child.kill('SIGKILL');
  });

  const socket = `${dir}/data/headway.sock`;
  for (let i = 0; i < 150 && !existsSync(socket); i++) await new Promise((r) => setTimeout(r, 100));
  t.ok(existsSync(socket), `the API socket appears (stderr: ${stderr})`);

  const created = await headway(['users', 'create', 'alice', '-c', cfg], { env: { HOME: dir }, cwd: dir });
  t.equal(created.code, 0, created.stderr);
  const listed = await headway(['users', 'list', '-o', 'json', '-c', cfg], { env: { HOME: dir }, cwd: dir });
  t.equal(listed.code, 0, listed.stderr);
  t.match(JSON.parse(listed.stdout), [{ name: 'alice' }]);
  const dup = await headway(['users', 'create', 'alice', '-c', cfg], { env: { HOME: dir }, cwd: dir });
  t.equal(dup.code, 1, 'a server-side refusal exits 1');
  t.equal(dup.stderr.trim().split('\n').length, 1, `one line: ${dup.stderr}`);

  child.kill('SIGTERM');
  t.equal(await exited, 0, 'exit 0 after SIGTERM');
  t.match(stderr, /received SIGTERM, shutting down/);
});

/** serveAndRead starts `headway serve`, waits for its socket, and returns its command line and environment as the kernel has them. */
async function serveAndRead(t: Test, extraConfig: string[], env: NodeJS.ProcessEnv = {}): Promise<{ pid: number; argv: string[]; environ: string[] }> {
  const { dir, cleanup } = tempDir();
  t.teardown(cleanup);
  const cfg = writeServeConfig(dir, ['server_url: http://127.0.0.1:18080', 'database:', '  type: sqlite', '  sqlite:', `    path: ${dir}/data/db.sqlite`, ...extraConfig]);
  const child = spawn(process.execPath, [RUN, 'serve', '-c', cfg], { cwd: dir, env: { ...process.env, HOME: dir, NODE_OPTIONS: '', ...env }, stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
  const exited = new Promise<void>((resolve) => child.on('exit', () => resolve()));
  t.teardown(async () => { if (child.exitCode === null) child.kill('SIGTERM'); await exited; });
  const socket = `${dir}/data/headway.sock`;
  for (let i = 0; i < 150 && !existsSync(socket); i++) await new Promise((r) => setTimeout(r, 100));
  t.ok(existsSync(socket), `the server listens (stderr: ${stderr})`);
  t.equal(stderr.split('config file loaded').length - 1, 1, 'the start is logged once, not again by the process started again');
  const read = (f: string) => readFileSync(`/proc/${child.pid}/${f}`, 'utf8').split('\0').filter(Boolean);
  return { pid: child.pid!, argv: read('cmdline'), environ: read('environ') };
}

const procfs = existsSync('/proc/self/cmdline') ? false : 'no /proc here';

t.test('serve: the server runs, in the process that was started, under its V8 options', { skip: skip || procfs }, async (t) => {
  const { argv, environ } = await serveAndRead(t, []);
  t.ok(argv.includes(`--max-semi-space-size=${SERVER_SEMI_SPACE_MB}`), `the young generation is set: ${argv.join(' ')}`);
  const nodeLimit = getHeapStatistics().heap_size_limit / 2 ** 20;
  const old = nodeLimit > SERVER_HEAP_LIMIT_MB ? [`--max-old-space-size=${SERVER_HEAP_LIMIT_MB}`] : [];
  t.same(argv.filter((a) => a.startsWith('--max-old-space-size')), old, `the old generation: at most ${SERVER_HEAP_LIMIT_MB} MiB (Node's here: ${nodeLimit})`);
  t.ok(argv.includes('serve') && argv.includes('-c'), 'with the command line it was given');
  t.equal(argv.filter((a) => a.startsWith('--max-semi-space-size')).length, 1, 'started again once, not a third time');
  const given = new Set(Object.entries(process.env).map(([k, v]) => `${k}=${v}`));
  const added = environ.filter((e) => e.startsWith('HEADWAY_') && !given.has(e));
  t.same(added, [], 'nothing added to the environment (HEADWAY_ variables are configuration)');
});

t.test('serve: memory.heap_limit_mb sets the old generation; options the operator gave are kept', { skip: skip || procfs }, async (t) => {
  const limited = await serveAndRead(t, ['memory:', '  heap_limit_mb: 300']);
  t.ok(limited.argv.includes('--max-old-space-size=300'), limited.argv.join(' '));
  const own = await serveAndRead(t, [], { NODE_OPTIONS: '--max-semi-space-size=8 --max-old-space-size=2000' });
  t.notOk(own.argv.some((a) => a.startsWith('--max-semi-space-size')), `NODE_OPTIONS' semi-space is not overridden: ${own.argv.join(' ')} ${own.environ.filter((e) => e.startsWith('NODE_OPTIONS')).join(' ')}`);
  t.same(own.argv.filter((a) => a.startsWith('--')), [], 'nothing to add: the process was not started again');
});
