#!/usr/bin/env node
// cli-startup: measures how long `headway nodes list` (against a running server, over its
// unix socket) and `headway --help` take, median of N runs each (default 10), and how many
// modules each loads. A measurement for reports, not a test: it asserts nothing.
// Usage (after the build): node scripts/cli-startup.mjs [runs]
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const RUN = join(root, 'packages/cli/bin/run.js');
const RECORDER = join(root, 'packages/core/test/fixtures/load-recorder/index.mjs');
const runs = Number(process.argv[2] ?? 10);

const dir = mkdtempSync(join(tmpdir(), 'headway-cli-startup-'));
const cfg = join(dir, 'config.yaml');
writeFileSync(cfg, [
  'server_url: http://127.0.0.1:18080',
  'listen_addr: 127.0.0.1:0',
  'metrics_listen_addr: ""',
  'grpc_listen_addr: ""',
  'derp:',
  '  server:',
  '    stun_listen_addr: 127.0.0.1:0',
  `data_dir: ${dir}/data`,
  'database:',
  '  type: sqlite',
  '  sqlite:',
  `    path: ${dir}/data/db.sqlite`,
  '',
].join('\n'));
const env = { ...process.env, HOME: dir };
for (const k of Object.keys(env)) if (k.startsWith('HEADWAY_')) delete env[k];

const server = spawn(process.execPath, [RUN, 'serve', '-c', cfg], { cwd: dir, env, stdio: ['ignore', 'ignore', 'inherit'] });
try {
  const socket = join(dir, 'data/headway.sock');
  for (let i = 0; i < 300 && !existsSync(socket); i++) await new Promise((r) => setTimeout(r, 100));
  if (!existsSync(socket)) throw new Error('the server did not open its socket');

  // CPU time (user + system, read from GNU time when installed) is the work a start does;
  // it varies far less than wall time on a shared, loaded machine.
  const gnuTime = existsSync('/usr/bin/time');
  const headway = (args, extraEnv = {}) => {
    const argv = [process.execPath, RUN, ...args];
    const t0 = process.hrtime.bigint();
    const r = gnuTime
      ? spawnSync('/usr/bin/time', ['-f', 'cpu-time %U %S', ...argv], { cwd: dir, env: { ...env, ...extraEnv }, encoding: 'utf8' })
      : spawnSync(argv[0], argv.slice(1), { cwd: dir, env: { ...env, ...extraEnv }, encoding: 'utf8' });
    const ms = Number(process.hrtime.bigint() - t0) / 1e6;
    if (r.status !== 0) throw new Error(`headway ${args.join(' ')} exited ${r.status}: ${r.stderr}`);
    const m = /cpu-time ([\d.]+) ([\d.]+)/.exec(r.stderr);
    return { ms, cpu: m ? (Number(m[1]) + Number(m[2])) * 1000 : NaN };
  };
  const median = (xs) => {
    const s = [...xs].sort((a, b) => a - b);
    return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
  };
  headway(['users', 'create', 'alice', '-c', cfg]);

  const cases = [
    ['nodes list', ['nodes', 'list', '-c', cfg]],
    ['--help', ['--help']],
  ];
  for (const [name, args] of cases) {
    headway(args); // warm the file cache
    const results = [];
    for (let i = 0; i < runs; i++) results.push(headway(args));
    const times = results.map((r) => r.ms).sort((a, b) => a - b);
    const cpu = median(results.map((r) => r.cpu));
    const record = join(dir, 'record.txt');
    rmSync(record, { force: true });
    headway(args, { HEADWAY_LOAD_RECORD: record, NODE_OPTIONS: `--import=${RECORDER}` });
    const loaded = readFileSync(record, 'utf8').split('\n').filter((l) => l && !l.includes('load-recorder'));
    const of = (re) => loaded.filter((l) => re.test(l)).length;
    console.log(`headway ${name}: median ${median(times).toFixed(0)} ms over ${runs} runs (min ${times[0].toFixed(0)}, max ${times[runs - 1].toFixed(0)}; median CPU ${Number.isNaN(cpu) ? 'n/a' : `${cpu.toFixed(0)} ms`}); ` +
      `${loaded.length} modules loaded (${of(/packages\/core\//)} from @headway/core, ${of(/node_modules\/@oclif\//)} from @oclif, ${of(/\/koa\/|@koa/)} koa)`);
  }
} finally {
  server.kill('SIGTERM');
  await new Promise((r) => server.once('exit', r));
  rmSync(dir, { recursive: true, force: true });
}
