import t from 'tap';
import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync, copyFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { configSearchPath, KEYS, loadConfig } from '@headway/core';
import { repoRoot } from '../src/tailscale.js';
import { exitCodeOf } from '../src/cli.js';

/*
 * packages/cli/contrib/systemd: the unit, its sysusers and tmpfiles snippets and the config it
 * starts with must agree with each other and with Headway's own defaults (where the
 * CLI looks for its config, which paths the server writes). systemd-analyze,
 * systemd-sysusers and systemd-tmpfiles check them too when installed.
 */

const root = repoRoot();
/** dir ships in @headway/cli, so an npm install has it at $(npm root -g)/@headway/cli/contrib/systemd. */
const dir = join(root, 'packages', 'cli', 'contrib', 'systemd');
const unitPath = join(dir, 'headway.service');

/** parseUnit reads a systemd unit file: section → key → every value given (keys may repeat). */
function parseUnit(text: string): Record<string, Record<string, string[]>> {
  const out: Record<string, Record<string, string[]>> = {};
  let section = '';
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (!line || line.startsWith('#') || line.startsWith(';')) continue;
    const head = /^\[(.+)\]$/.exec(line);
    if (head) { section = head[1]!; out[section] ??= {}; continue; }
    const eq = line.indexOf('=');
    if (eq < 0) throw new Error(`unit line without "=": ${line}`);
    ((out[section] ??= {})[line.slice(0, eq)] ??= []).push(line.slice(eq + 1));
  }
  return out;
}

function run(cmd: string, args: string[]): Promise<{ code: number; out: string }> {
  return new Promise((resolve) => {
    execFile(cmd, args, { timeout: 60_000 }, (err, stdout, stderr) => {
      const code = exitCodeOf(err);
      resolve({ code, out: `${stdout}${stderr}` });
    });
  });
}

/** which finds a program on PATH, or undefined. */
function which(name: string): string | undefined {
  for (const d of (process.env.PATH ?? '').split(':')) if (d && existsSync(join(d, name))) return join(d, name);
  for (const d of ['/usr/bin', '/bin', '/usr/sbin']) if (existsSync(join(d, name))) return join(d, name);
  return undefined;
}

const unit = parseUnit(readFileSync(unitPath, 'utf8'));
const service = unit.Service!;
const one = (key: string): string | undefined => service[key]?.at(-1);
const sysusers = readFileSync(join(dir, 'headway.sysusers'), 'utf8').split('\n').filter((l) => l.trim() && !l.startsWith('#'));
const tmpfiles = readFileSync(join(dir, 'headway.tmpfiles'), 'utf8').split('\n').filter((l) => l.trim() && !l.startsWith('#'));
const execStart = one('ExecStart')!.split(/\s+/);
const configArg = execStart[execStart.indexOf('--config') + 1]!;
const stateDir = `/var/lib/${one('StateDirectory')}`;
const runtimeDir = `/run/${one('RuntimeDirectory')}`;
/** writable is every path the sandbox (ProtectSystem=strict) lets the service write. */
const writable = [stateDir, runtimeDir, ...(service.ReadWritePaths ?? []).flatMap((v) => v.split(/\s+/))];
const inside = (p: string, d: string) => p === d || p.startsWith(`${d}/`);

t.test('the unit: its own user, a strict sandbox that lets V8 compile', async (t) => {
  t.equal(one('User'), 'headway');
  t.equal(one('Group'), 'headway');
  t.notOk('MemoryDenyWriteExecute' in service, 'no MemoryDenyWriteExecute: V8 needs writable executable memory');
  t.equal(one('ProtectSystem'), 'strict');
  t.equal(one('ProtectHome'), 'yes');
  t.equal(one('NoNewPrivileges'), 'yes');
  t.equal(one('PrivateTmp'), 'yes');
  t.equal(one('StateDirectory'), 'headway');
  t.equal(one('CapabilityBoundingSet'), 'CAP_NET_BIND_SERVICE', 'no capability beyond binding low ports');
  t.match(one('SystemCallFilter'), /@/, 'a system call filter');
  t.equal(one('UMask'), '0077');
  t.same(unit.Install?.WantedBy, ['multi-user.target']);
});

t.test('ExecStart runs the CLI bin `headway serve` with the config file the CLI reads by default', async (t) => {
  const cli = JSON.parse(readFileSync(join(root, 'packages', 'cli', 'package.json'), 'utf8')) as { bin: Record<string, string> };
  t.equal(basename(execStart[0]!), Object.keys(cli.bin)[0], 'the binary is the published bin name');
  t.equal(execStart[0], '/usr/local/bin/headway', 'npm install -g with the default /usr/local prefix');
  t.equal(execStart[1], 'serve');
  t.ok(existsSync(join(root, 'packages', 'cli', 'dist', 'src', 'commands', 'serve.js')), 'serve is a CLI command');
  t.equal(configArg, configSearchPath({ env: {}, home: '/nonexistent', cwd: '/' })[0], 'the file an administrator\'s `headway` finds first');
  t.equal(one('WorkingDirectory'), stateDir);
  t.equal(one('ExecReload'), '/bin/kill -HUP $MAINPID', 'reload is SIGHUP, which `headway serve` survives in every policy mode');
});

t.test('the shipped config puts every file the server writes where the sandbox allows writing', async (t) => {
  const { config, problems } = loadConfig({ path: join(dir, 'config.yaml'), env: {}, home: '/var/lib/headway', cwd: '/' });
  t.same(problems.filter((p) => p.level !== 'warn'), [], 'the unit\'s config.yaml is valid');
  t.equal(config.data_dir, stateDir, 'data_dir is the StateDirectory');
  t.equal(config.unix_socket, join(runtimeDir, 'headway.sock'), 'the socket is in the RuntimeDirectory, reachable by the headway group');
  const flat = config as unknown as Record<string, unknown>;
  const get = (key: string): unknown => key.split('.').reduce<unknown>((o, k) => (o as Record<string, unknown> | undefined)?.[k], flat);
  // Every path key with a default is a file the server creates (database, keys, socket).
  const written = Object.entries(KEYS).filter(([, spec]) => spec.kind === 'path' && spec.default !== '').map(([k]) => k);
  t.ok(written.length >= 4, `path keys with defaults: ${written.join(', ')}`);
  for (const key of written) {
    const value = String(get(key));
    t.ok(writable.some((d) => inside(value, d)), `${key} = ${value} is inside ${writable.join(' or ')}`);
  }
});

t.test('without data_dir in the config the defaults still land in the StateDirectory (the user\'s home)', async (t) => {
  const user = sysusers.map((l) => l.match(/"[^"]*"|\S+/g) ?? []).find((f) => f[0] === 'u' && f[1] === one('User'));
  t.ok(user, 'sysusers creates the unit\'s user');
  const home = user![4]!;
  t.equal(home, stateDir, 'the user\'s home is the StateDirectory');
  const work = mkdtempSync(join(tmpdir(), 'hw-unit-'));
  t.teardown(() => rmSync(work, { recursive: true, force: true }));
  const bare = join(work, 'config.yaml');
  writeFileSync(bare, 'server_url: https://headway.example.com\n');
  const { config, problems } = loadConfig({ path: bare, env: {}, home, cwd: '/' });
  t.same(problems.filter((p) => p.level !== 'warn'), []);
  t.ok(inside(config.data_dir, stateDir), `default data_dir ${config.data_dir} is inside ${stateDir}`);
});

t.test('tmpfiles creates the config directory, readable by the service and writable by root only', async (t) => {
  const entry = tmpfiles.map((l) => l.split(/\s+/)).find((f) => f[1] === dirname(configArg));
  t.ok(entry, `tmpfiles creates ${dirname(configArg)}`);
  t.equal(entry![0], 'd');
  t.equal(entry![2], '0750');
  t.equal(entry![3], 'root');
  t.equal(entry![4], one('Group'));
});

t.test('systemd-sysusers and systemd-tmpfiles apply the snippets to an empty root', async (t) => {
  const sysusersBin = which('systemd-sysusers');
  const tmpfilesBin = which('systemd-tmpfiles');
  if (!sysusersBin || !tmpfilesBin) {
    t.comment('systemd-sysusers or systemd-tmpfiles is not installed');
    t.skip('systemd-sysusers/systemd-tmpfiles not installed', () => undefined);
    return;
  }
  const fakeRoot = mkdtempSync(join(tmpdir(), 'hw-root-'));
  t.teardown(() => rmSync(fakeRoot, { recursive: true, force: true }));
  for (const sub of ['etc', 'usr/lib/sysusers.d', 'usr/lib/tmpfiles.d']) mkdirSync(join(fakeRoot, sub), { recursive: true });
  copyFileSync(join(dir, 'headway.sysusers'), join(fakeRoot, 'usr/lib/sysusers.d/headway.conf'));
  copyFileSync(join(dir, 'headway.tmpfiles'), join(fakeRoot, 'usr/lib/tmpfiles.d/headway.conf'));
  const users = await run(sysusersBin, [`--root=${fakeRoot}`]);
  t.equal(users.code, 0, users.out);
  const passwd = readFileSync(join(fakeRoot, 'etc/passwd'), 'utf8').split('\n').find((l) => l.startsWith('headway:'));
  t.ok(passwd, 'the headway user exists');
  const fields = passwd!.split(':');
  t.equal(fields[5], stateDir, 'home is the StateDirectory');
  t.match(fields[6], /nologin/, 'no login shell');
  const group = readFileSync(join(fakeRoot, 'etc/group'), 'utf8').split('\n').find((l) => l.startsWith('headway:'));
  t.ok(group, 'the headway group exists');
  const files = await run(tmpfilesBin, [`--root=${fakeRoot}`, '--create']);
  t.equal(files.code, 0, files.out);
  const st = statSync(join(fakeRoot, dirname(configArg)));
  t.equal(st.mode & 0o777, 0o750);
  t.equal(st.gid, Number(group!.split(':')[2]), 'owned by the headway group');
});

t.test('systemd-analyze verify accepts the unit', async (t) => {
  const analyze = which('systemd-analyze');
  if (!analyze) {
    t.comment('systemd-analyze is not installed: the unit was checked by the tests above only');
    t.skip('systemd-analyze not installed', () => undefined);
    return;
  }
  // verify insists the ExecStart binary exists: point it at the CLI's bin in this tree.
  const work = mkdtempSync(join(tmpdir(), 'hw-unit-'));
  t.teardown(() => rmSync(work, { recursive: true, force: true }));
  const copy = join(work, 'headway.service');
  const bin = join(root, 'packages', 'cli', 'bin', 'run.js');
  writeFileSync(copy, readFileSync(unitPath, 'utf8').replace(/^ExecStart=\S+/m, `ExecStart=${bin}`));
  const verify = await run(analyze, ['verify', copy]);
  t.equal(verify.code, 0, `systemd-analyze verify: ${verify.out || 'clean'}`);
  t.notMatch(verify.out, /headway\.service/, 'no warning about the unit');
  const security = await run(analyze, ['security', '--offline=true', copy]);
  const score = /Overall exposure level for headway\.service: ([\d.]+) (\w+)/.exec(security.out);
  if (score) t.comment(`systemd-analyze security: exposure ${score[1]} ${score[2]} (0 = fully sandboxed, 10 = none)`);
  else t.comment(`systemd-analyze security --offline unavailable: ${security.out.split('\n')[0]}`);
});
