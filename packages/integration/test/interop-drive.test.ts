/**
 * Real-client Taildrive with the database drive adapter (@headway/drive-db):
 * device "srv" shares a directory; bob's device reaches it over WebDAV only
 * while a grant made with `headway drive grant` exists, and loses it again on
 * `headway drive revoke`.
 *
 * How a test reaches Taildrive: a client with drive:access serves the shares
 * it may reach as WebDAV on 100.100.100.100:8080 (/<tailnet>/<peer>/<share>/),
 * and that server fetches from the sharer's peerapi at /v0/drive/<share>/...,
 * where the sharer checks the caller's `tailscale.com/cap/drive` grant (from
 * its packet filter) and serves or refuses. With --tun=userspace-networking
 * there is no TUN to carry a local program's packets to 100.100.100.100:
 * tailscaled's own dialers (the outbound HTTP/SOCKS proxies, `tailscale nc`,
 * serve's TCP forwarder) dial that address with the host kernel, which does
 * not know it (in a sandbox a transparent proxy may even answer with 404). So
 * the test takes the second hop itself, from bob's device: bob's tailscaled
 * runs its outbound HTTP proxy (--outbound-http-proxy-listen=127.0.0.1:0, port
 * read from its log), which dials tailnet peers through bob's netstack and
 * WireGuard, and asks srv's peerapi for /v0/drive/... exactly as bob's
 * Taildrive server would. srv authorizes by bob's address alone, so what it
 * answers is what Headway's grant says; the client-side gates (drive:access on
 * bob, the drive-sharer capability from srv) are checked in bob's netmap.
 */
import t from 'tap';
import http from 'node:http';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startTestServer } from '../src/server.js';
import { runHeadwayOn } from '../src/cli.js';
import { requireTailscale, TailscaleDevice, type NetworkMapJson } from '../src/tailscale.js';

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));
const DRIVE_CAP = 'tailscale.com/cap/drive';
const DRIVE_SHARER_CAP = 'tailscale.com/cap/drive-sharer';

interface PeerJson { Name?: string; Addresses?: string[]; Hostinfo?: { Services?: Array<{ Proto: string; Port: number }> } }
type Rules = Array<{ SrcIPs?: string[]; CapGrant?: Array<{ CapMap?: Record<string, unknown> }> }>;

const rulesOf = (nm: NetworkMapJson | null): Rules => ((nm?.PacketFilterRules as Rules | null | undefined) ?? []);
const hasCap = (nm: NetworkMapJson | null, cap: string) => rulesOf(nm).some((r) => (r.CapGrant ?? []).some((g) => g.CapMap && cap in g.CapMap));

interface WebDavAnswer { status: number; body: string }

/** viaProxy sends one HTTP request for `url` through tailscaled's outbound HTTP proxy. */
function viaProxy(proxyPort: number, method: string, url: string, headers: Record<string, string> = {}, body?: string): Promise<WebDavAnswer> {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port: proxyPort, method, path: url, headers: { host: u.host, ...headers }, timeout: 15_000 }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => { text += c; });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
    });
    req.on('timeout', () => req.destroy(new Error(`${method} ${url}: no answer within 15 s`)));
    req.on('error', reject);
    req.end(body);
  });
}

/** proxyPort reads the port tailscaled chose for its outbound HTTP proxy from its log. */
async function proxyPort(d: TailscaleDevice): Promise<number> {
  for (let i = 0; i < 100; i++) {
    const m = /HTTP proxy listening on 127\.0\.0\.1:(\d+)/.exec(readFileSync(d.logPath, 'utf8'));
    if (m) return Number(m[1]);
    await sleep(100);
  }
  throw new Error(`${d.name}: tailscaled did not log its HTTP proxy port`);
}

/** waitFor polls check until it returns a value (not undefined) or the time is up; the error names what was awaited. */
async function waitFor<T>(what: string, check: () => Promise<T | undefined>, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await check();
      if (v !== undefined) return v;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}${last ? ` (last error: ${(last as Error).message})` : ''}`);
    await sleep(250);
  }
}

function selfCaps(nm: NetworkMapJson | null): Record<string, unknown> {
  return ((nm?.SelfNode as { CapMap?: Record<string, unknown> } | undefined)?.CapMap) ?? {};
}

/** stopDevice stops a device and kills what its tailscaled spawned (the Taildrive file server outlives it). */
async function stopDevice(d: TailscaleDevice): Promise<void> {
  const pid = d.pid;
  const children: number[] = [];
  if (pid !== undefined) {
    const queue = [pid];
    while (queue.length) {
      const p = queue.shift()!;
      let kids: number[] = [];
      try {
        kids = readFileSync(`/proc/${p}/task/${p}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number);
      } catch {
        // Gone already.
      }
      children.push(...kids);
      queue.push(...kids);
    }
  }
  await d.stop().catch(() => undefined);
  for (const c of children) {
    try { process.kill(c, 'SIGKILL'); } catch { /* already gone */ }
  }
}

const installed = requireTailscale(t);
for (const binaries of installed) {
  t.test(`${binaries.version}: a CLI drive grant opens a share over WebDAV, a revoke closes it`, async (t) => {
    // Only sharing comes from the policy (every device may share); who may reach
    // what is entirely up to the database drive adapter.
    const s = await startTestServer({
      policy: { mode: 'database' },
      plugins: [{ package: '@headway/drive-db', port: 'drive' }],
      derp: { server: { enabled: true, stun_listen_addr: '127.0.0.1:0' } },
    });
    const devices: TailscaleDevice[] = [];
    const dir = mkdtempSync(join(tmpdir(), 'hw-drive-'));
    t.teardown(async () => {
      for (const d of devices) await stopDevice(d);
      await s.stop();
      rmSync(dir, { recursive: true, force: true });
    });
    await s.policy.set(JSON.stringify({ nodeAttrs: [{ target: ['*'], attr: ['drive:share'] }] }));
    const alice = await s.state.users.create({ name: 'alice' });
    const bob = await s.state.users.create({ name: 'bob' });
    const aliceKey = (await s.state.keys.createPreAuthKey({ userId: alice.id, reusable: true })).secret;
    const bobKey = (await s.state.keys.createPreAuthKey({ userId: bob.id, reusable: true })).secret;

    const tag = binaries.version.replace(/\W/g, '');
    const start = async (name: string, key: string, extra: string[] = []): Promise<TailscaleDevice> => {
      const d = await TailscaleDevice.start({ name: `${name}${tag}`, version: binaries.version, extraDaemonArgs: extra });
      devices.push(d);
      await d.up({ loginServer: s.urls.http, authKey: key, hostname: name, timeoutMs: 60_000 });
      return d;
    };
    const [srv, bobDev] = await Promise.all([
      start('srv', aliceKey),
      start('bob-dev', bobKey, ['--outbound-http-proxy-listen=127.0.0.1:0']),
    ]);
    const port = await proxyPort(bobDev);
    // srv's peerapi as bob's netmap shows it: where bob's Taildrive server would send its requests.
    const peer = await waitFor('srv with its peerapi in bob\'s netmap', async () => {
      const p = ((await bobDev.netmap())?.Peers as PeerJson[] | undefined ?? []).find((x) => x.Name?.startsWith('srv.'));
      return p?.Hostinfo?.Services?.some((x) => x.Proto === 'peerapi4') ? p : undefined;
    });
    const peerIp = peer.Addresses!.find((a) => a.includes('.'))!.split('/')[0]!;
    const peerApiPort = peer.Hostinfo!.Services!.find((x) => x.Proto === 'peerapi4')!.Port;
    const driveRoot = `http://${peerIp}:${peerApiPort}/v0/drive/`;
    const shareUrl = `${driveRoot}docs/`;
    const fileUrl = `${shareUrl}hello.txt`;

    const shareDir = mkdtempSync(join(dir, 'share-'));
    writeFileSync(join(shareDir, 'hello.txt'), 'hello from srv\n');
    await waitFor('srv to receive drive:share', async () => (Object.hasOwn(selfCaps(await srv.netmap()), 'drive:share') ? true : undefined));
    const share = await srv.cli(['drive', 'share', 'docs', shareDir]);
    t.equal(share.code, 0, `tailscale drive share docs succeeds on srv (${(share.stderr || share.stdout).trim()})`);

    await t.test('without a grant bob cannot reach the share', async (t) => {
      const nm = await bobDev.netmap();
      t.notOk(Object.hasOwn(selfCaps(nm), 'drive:access'), 'bob has no drive:access');
      t.notOk(hasCap(nm, DRIVE_SHARER_CAP), 'srv offers bob no drive-sharer capability');
      const list = await viaProxy(port, 'PROPFIND', driveRoot, { depth: '1' });
      t.equal(list.status, 403, `srv refuses to list its shares to bob: ${list.body.trim()}`);
      t.notMatch(list.body, /docs/, 'no share name is revealed');
      const get = await viaProxy(port, 'GET', fileUrl);
      t.equal(get.status, 403, `srv refuses bob the file: ${get.body.trim()}`);
      t.notMatch(get.body, /hello from srv/, 'and sends none of its content');
    });

    let grantId = '';
    await t.test('headway drive grant lets bob list and read the share', async (t) => {
      const began = Date.now();
      const r = await runHeadwayOn(s, ['drive', 'grant', '--from', 'bob', '--to', 'node:srv', '--share', 'docs', '--access', 'ro', '-o', 'json'], 30_000);
      const cliDone = Date.now();
      t.equal(r.code, 0, `headway drive grant exits 0 ${r.stderr.trim()}`);
      const grant = JSON.parse(r.stdout) as { id: number; shares: string[]; access: string; src: { name: string }; dst: { name: string } };
      t.match(grant, { shares: ['docs'], access: 'ro', src: { kind: 'user', name: 'bob' }, dst: { kind: 'node', name: 'srv' } }, 'the CLI prints the stored grant');
      grantId = String(grant.id);

      const srvNm = await waitFor('the grant in srv\'s packet filter', async () => {
        const nm = await srv.netmap();
        return hasCap(nm, DRIVE_CAP) ? nm : undefined;
      });
      const cap = rulesOf(srvNm).flatMap((x) => x.CapGrant ?? []).find((g) => g.CapMap && DRIVE_CAP in g.CapMap);
      t.same(cap?.CapMap?.[DRIVE_CAP], [{ shares: ['docs'], access: 'ro' }], 'srv holds the drive capability {shares: [docs], access: ro}');
      const bobNm = await waitFor('bob to receive drive:access and the drive-sharer capability', async () => {
        const nm = await bobDev.netmap();
        return Object.hasOwn(selfCaps(nm), 'drive:access') && hasCap(nm, DRIVE_SHARER_CAP) ? nm : undefined;
      });
      t.ok(bobNm, 'bob may access Taildrive and srv is a sharer to him');
      const pushedMs = Date.now() - cliDone;
      const listed = await runHeadwayOn(s, ['drive', 'list'], 30_000);
      t.match(listed.stdout, new RegExp(`^${grantId}\\s+user:bob\\s+node:srv\\s+docs\\s+ro\\s`, 'm'), 'headway drive list shows it');

      const root = await viaProxy(port, 'PROPFIND', driveRoot, { depth: '1' });
      t.equal(root.status, 207, 'srv lists its shares to bob (207 Multi-Status)');
      t.match(root.body, /<D:href>\/docs\/<\/D:href>/, 'the listing holds the docs share');
      const list = await viaProxy(port, 'PROPFIND', shareUrl, { depth: '1' });
      t.equal(list.status, 207, 'PROPFIND of the share answers 207');
      t.match(list.body, /hello\.txt/, 'and lists hello.txt');
      const get = await viaProxy(port, 'GET', fileUrl);
      t.equal(get.status, 200, 'GET of the file answers 200');
      t.equal(get.body, 'hello from srv\n', 'with the file content');
      const put = await viaProxy(port, 'PUT', `${shareUrl}new.txt`, { 'content-type': 'text/plain' }, 'x');
      t.equal(put.status, 403, `a read-only grant refuses a write: ${put.body.trim()}`);
      t.comment(`${binaries.version}: headway drive grant took ${cliDone - began} ms (process start included); both devices' netmaps held the grant ${pushedMs} ms after it returned (polling \`tailscale debug netmap\`)`);
    });

    await t.test('headway drive revoke takes the share away again', async (t) => {
      t.ok(grantId, 'a grant was made');
      const r = await runHeadwayOn(s, ['drive', 'revoke', grantId], 30_000);
      t.equal(r.code, 0, `headway drive revoke exits 0 ${r.stderr.trim()}`);
      const listed = await runHeadwayOn(s, ['drive', 'list', '-o', 'json'], 30_000);
      t.same(JSON.parse(listed.stdout), [], 'no grants are left');
      await waitFor('bob to lose drive:access', async () => (Object.hasOwn(selfCaps(await bobDev.netmap()), 'drive:access') ? undefined : true));
      await waitFor('srv to lose the grant', async () => (hasCap(await srv.netmap(), DRIVE_CAP) ? undefined : true));
      const get = await viaProxy(port, 'GET', fileUrl);
      t.equal(get.status, 403, `srv refuses bob the file again: ${get.body.trim()}`);
      t.notMatch(get.body, /hello from srv/, 'and sends none of its content');
      const list = await viaProxy(port, 'PROPFIND', driveRoot, { depth: '1' });
      t.equal(list.status, 403, 'and no longer lists its shares to him');
    });
  });
}
