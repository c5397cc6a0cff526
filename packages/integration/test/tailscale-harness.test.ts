import t from 'tap';
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import {
  findTailscaleBinaries,
  requireTailscale,
  tailscaledEnvironment,
  TailscaleDevice,
  type TapLike,
} from '../src/tailscale.js';

// pidAlive reports whether a process with this pid still exists (signal 0 probes without killing).
function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

t.test('findTailscaleBinaries only lists complete installs, newest first', async (t) => {
  const home = mkdtempSync(join(tmpdir(), 'hw-ts-home-'));
  t.teardown(() => rmSync(home, { recursive: true, force: true }));
  const install = (version: string, files: string[]): void => {
    mkdirSync(join(home, version));
    for (const f of files) writeFileSync(join(home, version, f), '#!/bin/sh\n', { mode: 0o755 });
  };
  install('v1.80.3', ['tailscale', 'tailscaled']);
  install('v1.102.5', ['tailscale', 'tailscaled']);
  install('v1.9.0', ['tailscale', 'tailscaled']);
  install('v1.100.0', ['tailscale']); // half-built: no daemon
  install('v1.98.0.partial.123', ['tailscale', 'tailscaled']); // interrupted build dir
  const found = findTailscaleBinaries(home);
  t.same(
    found.map((b) => b.version),
    ['v1.102.5', 'v1.80.3', 'v1.9.0'],
  );
  t.equal(found[0]!.tailscaled, join(home, 'v1.102.5', 'tailscaled'));
  t.same(findTailscaleBinaries(join(home, 'missing')), []);
});

t.test('requireTailscale skips outside CI and fails in CI when nothing is installed', async (t) => {
  const savedHome = process.env.TAILSCALE_HOME;
  const savedCi = process.env.CI;
  const empty = mkdtempSync(join(tmpdir(), 'hw-ts-empty-'));
  t.teardown(() => {
    if (savedHome === undefined) delete process.env.TAILSCALE_HOME;
    else process.env.TAILSCALE_HOME = savedHome;
    if (savedCi === undefined) delete process.env.CI;
    else process.env.CI = savedCi;
    rmSync(empty, { recursive: true, force: true });
  });
  process.env.TAILSCALE_HOME = empty;
  const calls: string[] = [];
  const fake: TapLike = {
    skip: (name) => calls.push(`skip:${name}`),
    fail: (m) => calls.push(`fail:${m}`),
    comment: () => undefined,
  };
  delete process.env.CI;
  t.same(requireTailscale(fake), []);
  t.match(calls, [/^skip:no Tailscale client installed under .*hw-ts-empty-/]);
  calls.length = 0;
  process.env.CI = 'true';
  t.same(requireTailscale(fake), []);
  t.match(calls, [/^fail:no Tailscale client installed/]);
});

t.test('tailscaledEnvironment drops inherited TS_* and proxy settings and adds the isolation knobs', async (t) => {
  const saved = { ...process.env };
  t.teardown(() => {
    for (const k of Object.keys(process.env)) if (!(k in saved)) delete process.env[k];
    Object.assign(process.env, saved);
  });
  process.env.TS_AUTHKEY = 'tskey-leak';
  process.env.HTTPS_PROXY = 'http://proxy.invalid:3128';
  process.env.no_proxy = 'x';
  const env = tailscaledEnvironment('/tmp/dev', { TS_DEBUG_NETCHECK: '1' });
  t.equal(env.TS_AUTHKEY, undefined);
  t.equal(env.HTTPS_PROXY, undefined);
  t.equal(env.no_proxy, undefined);
  t.equal(env.TS_NO_LOGS_NO_SUPPORT, 'true');
  t.equal(env.TS_PANIC_IF_HIT_MAIN_CONTROL, '1');
  t.equal(env.TS_DISABLE_PORTMAPPER, '1');
  t.equal(env.TS_DEBUG_USE_DERP_HTTP, '1');
  t.equal(env.TS_LOGS_DIR, '/tmp/dev/logs');
  t.equal(env.HOME, '/tmp/dev');
  t.equal(env.TS_DEBUG_NETCHECK, '1');
  t.equal(env.PATH, process.env.PATH);
});

t.test('TailscaleDevice.start rejects unsafe names and unknown versions', async (t) => {
  await t.rejects(TailscaleDevice.start({ name: '../evil' }), /name "\.\.\/evil" must be/);
  if (findTailscaleBinaries().length > 0) {
    await t.rejects(TailscaleDevice.start({ name: 'nover', version: 'v0.0.1' }), /version v0\.0\.1 is not installed \(have v/);
  }
});

const installed = requireTailscale(t);
for (const binaries of installed) {
  t.test(`tailscaled ${binaries.version} starts logged out and stops cleanly`, async (t) => {
    const device = await TailscaleDevice.start({ name: `h${binaries.version.replace(/\W/g, '')}`, version: binaries.version });
    t.teardown(() => device.stop());
    t.ok(device.pid !== undefined && pidAlive(device.pid), 'tailscaled is running');
    t.ok(existsSync(device.socketPath), 'LocalAPI socket exists');

    t.equal(await device.version(), binaries.version.replace(/^v/, ''), 'tailscale version matches the install directory');

    const status = await device.status();
    t.ok(['NeedsLogin', 'NoState'].includes(status.BackendState), `BackendState ${status.BackendState} is logged out`);
    t.equal(status.Self?.Online ?? false, false, 'not online before login');
    t.equal(await device.netmap(), null, 'no network map before login');

    const waited = await device.waitFor((s) => s.BackendState === status.BackendState, 5000);
    t.equal(waited.BackendState, status.BackendState);
    await t.rejects(device.waitFor(() => false, 600, 200), /waitFor \(h.*\) timed out after 600 ms, last BackendState/);

    // Nothing listens on the discard port: both login paths must fail with the
    // daemon's login error, proving the flags were accepted and that the
    // client dialed the loopback login server (plain HTTP, no HTTPS fallback).
    const loginServer = 'http://127.0.0.1:9';
    await t.rejects(
      device.up({ loginServer, hostname: 'harness-a', timeoutMs: 3000 }),
      /printed no AuthURL within 3000 ms; BackendState NeedsLogin, health: .*127\.0\.0\.1:9.*connection refused/,
    );
    await t.rejects(
      device.up({
        loginServer,
        hostname: 'harness-b',
        authKey: 'tskey-auth-unused',
        advertiseRoutes: ['10.9.0.0/24'],
        advertiseExitNode: true,
        acceptRoutes: true,
        reset: true,
        timeoutMs: 3000,
      }),
      /tailscale up \(h.*\) exited 1: timeout waiting for Tailscale service to enter a Running state/,
    );
    const prefs = await device.prefs();
    t.equal(prefs.ControlURL, loginServer);
    t.equal(prefs.Hostname, 'harness-b');
    t.equal(prefs.RouteAll, true, '--accept-routes recorded');
    t.same([...(prefs.AdvertiseRoutes as string[])].sort(), ['0.0.0.0/0', '10.9.0.0/24', '::/0'], 'subnet plus exit-node routes recorded');
    t.equal(prefs.CorpDNS, false, '--accept-dns=false recorded');

    const pid = device.pid!;
    await device.stop();
    t.ok(device.exited, 'child process reports exit');
    t.notOk(pidAlive(pid), 'tailscaled pid is gone');
    t.notOk(existsSync(device.dir), 'temp dir removed');
    await t.rejects(device.status(), /device h.* is stopped/);
  });
}

if (installed.length > 0) {
  t.test('a test process that exits without stop() takes its tailscaled with it', async (t) => {
    const harness = new URL('../src/tailscale.js', import.meta.url).href;
    const script = `
      const { TailscaleDevice } = await import(${JSON.stringify(harness)});
      const d = await TailscaleDevice.start({ name: 'orphan' });
      console.log(JSON.stringify({ pid: d.pid, dir: d.dir }));
      process.exit(0);
    `;
    const out = await new Promise<string>((resolve, reject) => {
      execFile(process.execPath, ['--input-type=module', '-e', script], { timeout: 30_000 }, (err, stdout, stderr) => {
        if (err) reject(new Error(`${err.message}\n${stderr}`));
        else resolve(stdout);
      });
    });
    const { pid, dir } = JSON.parse(out.trim()) as { pid: number; dir: string };
    t.ok(pid > 0);
    const deadline = Date.now() + 5000;
    while (pidAlive(pid) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
    t.notOk(pidAlive(pid), 'orphaned tailscaled was killed at exit');
    t.notOk(existsSync(dir), 'orphaned temp dir was removed at exit');
  });
}
