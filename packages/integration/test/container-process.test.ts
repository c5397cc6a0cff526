import t, { type Test } from 'tap';
import { spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { TestDevice } from '@headway/testkit';
import { runHeadway } from '../src/cli.js';
import { repoRoot } from '../src/tailscale.js';

/*
 * The container contract, checked on the real `headway serve` process (what the image's
 * ENTRYPOINT runs), with no container engine needed:
 * - configuration from the environment alone (HEADWAY_<KEY>, no config file anywhere);
 * - log.format json: every line on stdout one JSON object, FATAL included, nothing on stderr;
 * - a removed headscale key: exit 1 and one FATAL line naming the key and its replacement
 *   (what a restart loop shows), and running again once the key is fixed;
 * - SIGTERM with a device's map session open: exit 0 within the 5 s stop contract,
 *   the session closed, the SQLite WAL checkpointed into the database file;
 * - nothing written outside data_dir (HOME, cwd and TMPDIR are empty directories and stay so).
 */

t.setTimeout(180_000);

const RUN = join(repoRoot(), 'packages', 'cli', 'bin', 'run.js');

interface Serve {
  child: ChildProcess;
  stdout: () => string;
  stderr: () => string;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** waitFor polls the output until `pattern` appears or the process ends. */
  waitFor(pattern: RegExp, stream?: 'stdout' | 'stderr', timeoutMs?: number): Promise<RegExpExecArray | null>;
}

/** Scratch is the set of directories a server gets besides its data: each must stay empty. */
interface Scratch { home: string; cwd: string; tmp: string; data: string; root: string }

function scratch(t: Test): Scratch {
  const root = mkdtempSync(join(tmpdir(), 'hw-container-'));
  const dirs = { root, home: join(root, 'home'), cwd: join(root, 'cwd'), tmp: join(root, 'tmp'), data: join(root, 'data') };
  // Read-only for an unprivileged runner; as root the emptiness check below is what tells.
  for (const d of [dirs.home, dirs.cwd, dirs.tmp]) mkdirReadOnly(d);
  t.teardown(() => {
    for (const d of [dirs.home, dirs.cwd, dirs.tmp]) chmodSync(d, 0o700);
    rmSync(root, { recursive: true, force: true });
  });
  return dirs;
}

function mkdirReadOnly(dir: string): void {
  mkdirSync(dir, { recursive: true });
  chmodSync(dir, 0o555);
}

/** baseEnv is a container's environment: PATH, HOME and TMPDIR only; no XDG_* and none of the caller's HEADWAY_*. */
function baseEnv(s: Scratch, extra: Record<string, string>): Record<string, string> {
  return { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: s.home, TMPDIR: s.tmp, ...extra };
}

/** loopbackEnv configures the server from the environment only, on ephemeral loopback ports. */
function loopbackEnv(s: Scratch, extra: Record<string, string> = {}): Record<string, string> {
  return baseEnv(s, {
    HEADWAY_DATA_DIR: s.data,
    HEADWAY_LISTEN_ADDR: '127.0.0.1:0',
    HEADWAY_METRICS_LISTEN_ADDR: '127.0.0.1:0',
    HEADWAY_GRPC_LISTEN_ADDR: '127.0.0.1:0',
    HEADWAY_DERP_SERVER_STUN_LISTEN_ADDR: '127.0.0.1:0',
    HEADWAY_LOG_FORMAT: 'json',
    ...extra,
  });
}

function serve(env: Record<string, string>, cwd: string, args: string[] = []): Serve {
  const child = spawn(process.execPath, [RUN, 'serve', ...args], { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout!.on('data', (c: Buffer) => (out += c.toString()));
  child.stderr!.on('data', (c: Buffer) => (err += c.toString()));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
  return {
    child,
    stdout: () => out,
    stderr: () => err,
    exited,
    async waitFor(pattern, stream = 'stdout', timeoutMs = 30_000) {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const m = pattern.exec(stream === 'stdout' ? out : err);
        if (m || child.exitCode !== null || child.signalCode !== null || Date.now() > deadline) return m;
        await new Promise((r) => setTimeout(r, 50));
      }
    },
  };
}

interface LogLine { time: string; level: string; msg: string; [field: string]: unknown }

/** jsonLines parses every line of `text` as one log object, failing the test on any other line. */
function jsonLines(t: Test, text: string): LogLine[] {
  const lines: LogLine[] = [];
  for (const line of text.split('\n').filter((l) => l.length)) {
    let parsed: unknown;
    try { parsed = JSON.parse(line); } catch { t.fail(`a stdout line that is not JSON: ${line}`); continue; }
    const o = parsed as LogLine;
    if (typeof o !== 'object' || o === null || typeof o.time !== 'string' || typeof o.level !== 'string' || typeof o.msg !== 'string') {
      t.fail(`a JSON line without time, level and msg: ${line}`);
      continue;
    }
    lines.push(o);
  }
  return lines;
}

const emptyDirs = (s: Scratch) => ({ home: readdirSync(s.home), cwd: readdirSync(s.cwd), tmp: readdirSync(s.tmp) });

t.test('environment only, JSON logs on stdout, SIGTERM with a map session open: clean exit, WAL flushed, nothing written outside data_dir', async (t) => {
  const s = scratch(t);
  // A variable carried over from a headscale container: warned about, not applied.
  const env = loopbackEnv(s, { HEADSCALE_LOG_LEVEL: 'debug' });
  const server = serve(env, s.cwd);
  t.teardown(() => { if (server.child.exitCode === null) server.child.kill('SIGKILL'); });

  const listening = await server.waitFor(/"msg":"listening".*\n/);
  t.ok(listening, `the server is up (stdout: ${server.stdout()} stderr: ${server.stderr()})`);
  if (!listening) return;
  const up = jsonLines(t, server.stdout());
  const ready = up.find((l) => l.msg === 'listening')!;
  const url = String(ready.http);
  t.match(url, /^http:\/\/127\.0\.0\.1:\d+$/);
  t.ok(up.some((l) => l.level === 'info' && /no config file found/.test(l.msg)), 'it says it runs without a config file');
  t.ok(up.some((l) => l.msg === 'data directory' && l.path === s.data), 'data_dir came from HEADWAY_DATA_DIR');
  t.ok(up.some((l) => l.level === 'warn' && /^HEADSCALE_LOG_LEVEL: ignored: Headway reads HEADWAY_LOG_LEVEL/.test(l.msg)), 'a HEADSCALE_ variable is named in a warning');
  t.notOk(up.some((l) => l.level === 'debug'), 'and not applied');

  const health = await fetch(`${url}/health`);
  t.equal(health.status, 200, '/health answers 200');
  // The image's HEALTHCHECK: the CLI reaches the server through the same environment.
  const check = await runHeadway(env, ['health']);
  t.equal(check.code, 0, `headway health exits 0: ${check.stdout}${check.stderr}`);

  const user = await runHeadway(env, ['users', 'create', 'alice']);
  t.equal(user.code, 0, user.stderr);
  const key = await runHeadway(env, ['preauthkeys', 'create', '--user', 'alice', '--reusable']);
  t.equal(key.code, 0, key.stderr);
  const device = new TestDevice({ serverUrl: url, hostname: 'container-probe' });
  t.teardown(() => device.close().catch(() => undefined));
  await device.connect();
  await device.register({ authKey: key.stdout.trim() });
  await device.startMap();
  let mapEnded = false;
  device.mapDone.then(() => (mapEnded = true), () => (mapEnded = true));
  t.ok(existsSync(join(s.data, 'db.sqlite-wal')), 'the database is in WAL mode while serving');

  const started = process.hrtime.bigint();
  server.child.kill('SIGTERM');
  const exit = await Promise.race([server.exited, new Promise<null>((r) => setTimeout(() => r(null), 5_000))]);
  const ms = Number(process.hrtime.bigint() - started) / 1e6;
  t.comment(`SIGTERM to exit with one map session open: ${ms.toFixed(0)} ms`);
  t.ok(exit, 'the process exited within the 5 s stop contract');
  t.same(exit, { code: 0, signal: null }, 'exit code 0');
  await Promise.race([device.mapDone.catch(() => undefined), new Promise((r) => setTimeout(r, 2_000))]);
  t.ok(mapEnded, 'the device\'s map session was closed by the server');

  const lines = jsonLines(t, server.stdout());
  t.ok(lines.some((l) => /received SIGTERM/.test(l.msg)), 'the shutdown is logged');
  t.equal(lines.at(-1)?.msg, 'stopped', 'the last line says it stopped');
  t.equal(server.stderr(), '', 'nothing on stderr');

  const wal = join(s.data, 'db.sqlite-wal');
  t.ok(!existsSync(wal) || statSync(wal).size === 0, 'the WAL was checkpointed into db.sqlite on close');
  const db = new DatabaseSync(join(s.data, 'db.sqlite'), { readOnly: true });
  const row = db.prepare('SELECT hostname FROM nodes').all() as Array<{ hostname: string }>;
  db.close();
  t.same(row.map((r) => r.hostname), ['container-probe'], 'the registered node is in the database file');
  t.notOk(existsSync(join(s.data, 'headway.lock')), 'the data directory lock is released');
  t.notOk(existsSync(join(s.data, 'headway.sock')), 'the socket is removed');

  t.same(emptyDirs(s), { home: [], cwd: [], tmp: [] }, 'HOME, cwd and TMPDIR stay empty: the server writes only in data_dir');
});

t.test('a removed headscale key: exit 1 with one JSON FATAL line naming it; fixed, the server comes up with /health 200', async (t) => {
  const s = scratch(t);
  const cfgDir = mkdtempSync(join(tmpdir(), 'hw-container-cfg-'));
  t.teardown(() => rmSync(cfgDir, { recursive: true, force: true }));
  const cfg = join(cfgDir, 'config.yaml');
  writeFileSync(cfg, ['log:', '  format: json', 'dns_config:', '  magic_dns: true', 'dns:', '  base_domain: example.org', ''].join('\n'));
  // The key is in the file; the rest comes from the environment, as in compose.yaml.
  const env = loopbackEnv(s, { HEADWAY_CONFIG: cfg });
  delete env.HEADWAY_LOG_FORMAT;

  for (let attempt = 1; attempt <= 2; attempt++) {
    // A restart policy starts it again and again: each time the same line, the same exit code.
    const failed = serve(env, s.cwd);
    const exit = await failed.exited;
    t.same(exit, { code: 1, signal: null }, `attempt ${attempt}: exit code 1`);
    const lines = jsonLines(t, failed.stdout());
    const fatal = lines.filter((l) => l.level === 'fatal');
    t.equal(fatal.length, 1, `one FATAL line: ${failed.stdout()}`);
    t.match(fatal[0]?.msg, /^dns_config\.magic_dns: removed: use `dns\.magic_dns`$/, 'it names the key and its replacement');
    t.equal(failed.stderr(), '', 'nothing on stderr');
    t.notOk(existsSync(join(s.data, 'db.sqlite')), 'nothing was created before the config was accepted');
  }

  writeFileSync(cfg, ['log:', '  format: json', 'dns:', '  magic_dns: true', '  base_domain: example.org', ''].join('\n'));
  const fixed = serve(env, s.cwd);
  t.teardown(() => { if (fixed.child.exitCode === null) fixed.child.kill('SIGKILL'); });
  const listening = await fixed.waitFor(/"msg":"listening".*\n/);
  t.ok(listening, `running once the key is fixed: ${fixed.stdout()}${fixed.stderr()}`);
  if (!listening) return;
  const url = String(jsonLines(t, fixed.stdout()).find((l) => l.msg === 'listening')!.http);
  t.equal((await fetch(`${url}/health`)).status, 200, '/health 200');
  fixed.child.kill('SIGTERM');
  t.same(await fixed.exited, { code: 0, signal: null }, 'SIGTERM: exit 0');
  t.same(emptyDirs(s), { home: [], cwd: [], tmp: [] }, 'HOME, cwd and TMPDIR stay empty');
});

t.test('text logs: the same FATAL line on stderr, stdout empty', async (t) => {
  const s = scratch(t);
  const env = loopbackEnv(s, { HEADWAY_CONFIG: join(s.root, 'config.yaml') });
  env.HEADWAY_LOG_FORMAT = 'text';
  writeFileSync(join(s.root, 'config.yaml'), 'acl_policy_path: /etc/headscale/acl.hujson\n');
  const failed = serve(env, s.cwd);
  t.same(await failed.exited, { code: 1, signal: null }, 'exit code 1');
  const fatal = failed.stderr().split('\n').filter((l) => / FTL /.test(l));
  t.equal(fatal.length, 1, failed.stderr());
  t.match(fatal[0], /^\S+ FTL acl_policy_path: removed: use `policy\.path`$/, 'it names the key and its replacement');
  t.equal(failed.stdout(), '', 'stdout is empty: text logs go to stderr');
});

t.test('a bad value from the environment names the variable and the key, and exits 1', async (t) => {
  const s = scratch(t);
  const env = loopbackEnv(s, { HEADWAY_LISTEN_ADDR: 'not-an-address' });
  const failed = serve(env, s.cwd);
  t.same(await failed.exited, { code: 1, signal: null }, 'exit code 1');
  const lines = jsonLines(t, failed.stdout());
  const errors = lines.filter((l) => l.level === 'error' || l.level === 'fatal');
  t.equal(errors.length, 1, failed.stdout());
  t.match(errors[0]?.msg, /^HEADWAY_LISTEN_ADDR \(listen_addr\): expected host:port/);
  t.equal(failed.stderr(), '', 'nothing on stderr');
  t.notOk(existsSync(s.data), 'the data directory was not created');
});
