import { spawn } from 'node:child_process';
import { chmodSync, chownSync, mkdirSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { createLogger, resolveConfig } from '../src/index.js';
import { suggestKey } from '../src/config/load.js';
import {
  DataDirLockedError, databaseSwitchWarning, lockDataDir, prepareDataDir, secureDataDir, warnOpenFiles,
} from '../src/kernel/datadir.js';

const mode = (p: string) => (statSync(p).mode & 0o777).toString(8);

function scratch(t: { teardown(fn: () => void): void }): string {
  const dir = mkdtempSync(join(tmpdir(), 'headway-ops-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

t.test('unknown config keys suggest the nearest known key (metrics_listen_adr)', async (t) => {
  const { problems } = resolveConfig({ metrics_listen_adr: '127.0.0.1:9091', database: { sqlite: { pth: 'x' } }, zzzqqq: 1 });
  const msg = (k: string) => problems.find((p) => p.key === k)?.message ?? '';
  t.match(msg('metrics_listen_adr'), /unknown key \(ignored\); did you mean `metrics_listen_addr`\?/);
  t.match(msg('database.sqlite.pth'), /did you mean `database.sqlite.path`/);
  t.notMatch(msg('zzzqqq'), /did you mean/, 'nothing close: no suggestion');
  t.equal(suggestKey('listen_adr'), 'listen_addr');
  // A misspelt section is compared with sections, not with the keys inside them.
  t.match(resolveConfig({ polcy: { path: '/etc/headway/policy.hujson' } }).problems.find((p) => p.key === 'polcy')?.message ?? '', /did you mean `policy`\?/);
  t.equal(suggestKey('dsn'), 'dns');
});

t.test('HEADWAY_* variables that name no key are named in a warning, with the nearest one', async (t) => {
  const env = { HEADWAY_LISTEN_ADR: '127.0.0.1:9000', HEADWAY_ZZZQQQ: '1', HEADWAY_CONFIG: '/etc/x.yaml', HEADWAY_TEST_POSTGRES_URL: 'postgres://x', HEADWAY_LISTEN_ADDR: '127.0.0.1:8080' };
  const { problems, config } = resolveConfig({}, { env });
  const msg = (k: string) => problems.find((p) => p.key === k);
  t.match(msg('HEADWAY_LISTEN_ADR')?.message, /names no configuration key \(ignored\); did you mean HEADWAY_LISTEN_ADDR\?/);
  t.equal(msg('HEADWAY_LISTEN_ADR')?.level, 'warn');
  t.match(msg('HEADWAY_ZZZQQQ')?.message, /names no configuration key \(ignored\)$/, 'nothing close: no suggestion');
  t.notOk(msg('HEADWAY_CONFIG'), 'HEADWAY_CONFIG is read by the loader itself');
  t.notOk(msg('HEADWAY_TEST_POSTGRES_URL'), 'the test suite\'s variables are not keys and not warned about');
  t.notOk(msg('HEADWAY_LISTEN_ADDR'), 'a variable naming a key is not warned about');
  t.equal(config.listen_addr, '127.0.0.1:8080');
});

t.test('server_url on a loopback port other than listen_addr warns with the value to set', async (t) => {
  const moved = resolveConfig({ listen_addr: '127.0.0.1:9000' }).problems.filter((p) => p.key === 'server_url');
  t.equal(moved.length, 1);
  t.equal(moved[0]!.level, 'warn');
  t.match(moved[0]!.message, /listen_addr is 127\.0\.0\.1:9000.*set server_url: http:\/\/127\.0\.0\.1:9000/);
  t.equal(moved[0]!.message.split('\n').length, 1, 'one line');
  const quiet = (raw: Record<string, unknown>) => resolveConfig(raw).problems.filter((p) => p.key === 'server_url');
  t.same(quiet({}), [], 'defaults agree');
  t.same(quiet({ listen_addr: '127.0.0.1:9000', server_url: 'http://localhost:9000' }), [], 'same port by another loopback name');
  t.same(quiet({ listen_addr: '0.0.0.0:8080', server_url: 'https://hw.example.com' }), [], 'a public URL (proxy) is not checked');
  t.same(quiet({ listen_addr: '127.0.0.1:0' }), [], 'an ephemeral port is not checked');
  t.equal(quiet({ listen_addr: '0.0.0.0:9000', server_url: 'http://localhost' }).length, 1, 'default port 80 differs');
});

t.test('an existing 0755 data directory and 0644 files of Headway in it are tightened to 0700/0600', async (t) => {
  const dir = join(scratch(t), 'data');
  mkdirSync(dir, { recursive: true, mode: 0o755 });
  chmodSync(dir, 0o755);
  for (const f of ['db.sqlite', 'db.sqlite-wal', 'noise.key', 'other-program.sh']) {
    writeFileSync(join(dir, f), '', { mode: 0o644 });
    chmodSync(join(dir, f), f.endsWith('.sh') ? 0o755 : 0o644);
  }
  prepareDataDir(dir);
  t.equal(mode(dir), '700');
  t.same(secureDataDir(['db.sqlite', 'db.sqlite-wal', 'db.sqlite-shm', 'noise.key'].map((f) => join(dir, f))), [], 'everything could be fixed');
  t.equal(mode(join(dir, 'db.sqlite')), '600');
  t.equal(mode(join(dir, 'db.sqlite-wal')), '600');
  t.equal(mode(join(dir, 'noise.key')), '600');
  t.equal(mode(join(dir, 'other-program.sh')), '755', 'files Headway does not own are left alone');
  const fresh = join(scratch(t), 'new', 'data');
  prepareDataDir(fresh);
  t.equal(mode(fresh), '700', 'a new directory is 0700');
});

t.test('a readable file that cannot be fixed (another owner) is reported for the start-up warning', { skip: process.getuid?.() !== 0 ? 'needs root to give a file away' : false }, async (t) => {
  const dir = scratch(t);
  const path = join(dir, 'db.sqlite');
  writeFileSync(path, '');
  chmodSync(path, 0o644);
  chownSync(path, 65534, 65534);
  t.same(secureDataDir([path]), [`${path} (0644)`]);
  t.equal(mode(path), '644', 'not ours: left as it was');
  const lines: string[] = [];
  warnOpenFiles(createLogger({ write: (l) => lines.push(l) }), secureDataDir([path]));
  t.equal(lines.length, 1);
  t.match(lines[0], / WRN readable by other users and could not be restricted .*db\.sqlite \(0644\)/);
});

t.test('the data directory lock: one holder, stale locks taken over, a live holder named by pid', async (t) => {
  const dir = scratch(t);
  const release = lockDataDir(dir);
  t.throws(() => lockDataDir(dir), DataDirLockedError, 'a second server in the same process is refused');
  release();
  lockDataDir(dir)();

  // A lock whose pid is dead (a crashed server) is taken over.
  const dead = spawn(process.execPath, ['-e', '0']);
  await new Promise((r) => dead.on('exit', r));
  writeFileSync(join(dir, 'headway.lock'), `${dead.pid}\n`);
  const again = lockDataDir(dir);
  again();

  // A lock held by a live Node process is respected and its pid named.
  const live = spawn(process.execPath, ['-e', 'setTimeout(() => {}, 60000)']);
  t.teardown(() => live.kill('SIGKILL'));
  writeFileSync(join(dir, 'headway.lock'), `${live.pid}\n`);
  try {
    lockDataDir(dir);
    t.fail('expected the lock to be refused');
  } catch (err) {
    t.type(err, DataDirLockedError);
    t.match((err as Error).message, new RegExp(`^another Headway \\(pid ${live.pid}\\) uses the data directory `));
  }
});

t.test('databaseSwitchWarning: only when the new database is empty and the old one was not', async (t) => {
  const old = { type: 'sqlite', database: 'sqlite /d/db.sqlite', users: 2, nodes: 3, updated: '' };
  const empty = { type: 'postgres', database: 'postgres 127.0.0.1:5432/headway', users: 0, nodes: 0 };
  t.match(databaseSwitchWarning(old, empty), /database\.type postgres.*sqlite \/d\/db\.sqlite.*2 users and 3 nodes.*set database\.type back to sqlite/);
  t.equal(databaseSwitchWarning(undefined, empty), undefined, 'first start');
  t.equal(databaseSwitchWarning({ ...old, database: empty.database }, empty), undefined, 'same database');
  t.equal(databaseSwitchWarning({ ...old, users: 0, nodes: 0 }, empty), undefined, 'old one was empty');
  t.equal(databaseSwitchWarning(old, { ...empty, users: 1 }), undefined, 'new one already has data');
});
