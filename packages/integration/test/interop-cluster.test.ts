/**
 * Real-client interop for cluster mode: two stock tailscaled daemons join
 * through a TCP balancer in front of two Headway instances on one PostgreSQL
 * database, both landing on instance B (a child process). B is killed with SIGKILL;
 * the daemons reconnect through the balancer to A on their own, and a rename made
 * on A while they were away shows in `tailscale status`. Needs the real client and
 * HEADWAY_TEST_POSTGRES_URL (mandatory under CI=true).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { serverDatabases, startTestServer } from '../src/server.js';
import { startChildInstance, TcpBalancer } from '../src/cluster.js';
import { cleanupStack, requireTailscale, TailscaleDevice, type TailscaleStatus } from '../src/tailscale.js';

const JOIN_TIMEOUT_MS = 30_000;
const SYNC_TIMEOUT_MS = 60_000;

async function until(what: string, fn: () => Promise<boolean>, timeoutMs: number): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!(await fn().catch(() => false))) {
    if (Date.now() > end) throw new Error(`not within ${timeoutMs} ms: ${what}`);
    await new Promise((r) => setTimeout(r, 500));
  }
}

const peerNamed = (s: TailscaleStatus, prefix: string) => Object.values(s.Peer ?? {}).find((p) => p.DNSName?.startsWith(`${prefix}.`));

const installed = requireTailscale(t);
const [pg] = serverDatabases(t, 'the cluster interop test', ['postgres']);
if (pg && installed.length) {
  const binaries = installed[installed.length - 1]!;
  t.test(`${binaries.version}: two tailscaled behind a balancer survive kill -9 of their instance and see a rename made meanwhile`, (t) => pg.run(async (database) => {
    const cleanups = cleanupStack(t);
    const shared = mkdtempSync(join(tmpdir(), 'hw-interop-cluster-'));
    cleanups.push(() => rmSync(shared, { recursive: true, force: true }));
    const common = {
      database,
      cluster: { enabled: true, heartbeat_interval: '500ms', instance_timeout: '3s' },
      noise: { private_key_path: join(shared, 'noise.key') },
    };
    const a = await startTestServer(common);
    cleanups.push(() => a.stop());
    const b = await startChildInstance({ ...common, data_dir: join(shared, 'b') });
    cleanups.push(() => b.stop());
    // Both daemons join through the balancer while it only knows B, then A is added behind it.
    const balancer = new TcpBalancer([b.url]);
    const front = await balancer.listen();
    cleanups.push(() => balancer.close());

    const alice = await a.state.users.create({ name: 'alice' });
    const { secret } = await a.state.keys.createPreAuthKey({ userId: alice.id, reusable: true });
    const tag = binaries.version.replace(/\W/g, '');
    const one = await TailscaleDevice.start({ name: `cl1${tag}`, version: binaries.version });
    cleanups.push(() => one.stop());
    const two = await TailscaleDevice.start({ name: `cl2${tag}`, version: binaries.version });
    cleanups.push(() => two.stop());
    await one.up({ loginServer: front, authKey: secret, hostname: 'one', timeoutMs: JOIN_TIMEOUT_MS });
    await two.up({ loginServer: front, authKey: secret, hostname: 'two', timeoutMs: JOIN_TIMEOUT_MS });
    await until('one sees two online', async () => peerNamed(await one.status(), 'two')?.Online === true, SYNC_TIMEOUT_MS);
    t.pass('both daemons joined through instance B');

    balancer.backends = [b.url, a.urls.http];
    const killedAt = performance.now();
    await b.kill();
    const twoId = a.state.nodes.list().find((n) => n.givenName === 'two')!.id;
    await a.state.nodes.rename(twoId, 'renamed-after-kill');
    await until('one shows the rename made on A', async () => Boolean(peerNamed(await one.status(), 'renamed-after-kill')), SYNC_TIMEOUT_MS);
    t.comment(`one saw the rename ${(performance.now() - killedAt).toFixed(0)} ms after B was killed`);
    await until('two shows its new name', async () => (await two.status()).Self?.DNSName?.startsWith('renamed-after-kill.') === true, SYNC_TIMEOUT_MS);
    await until('one sees two online again (reconnected to A)', async () => peerNamed(await one.status(), 'renamed-after-kill')?.Online === true, SYNC_TIMEOUT_MS);
    t.comment(`two back online ${(performance.now() - killedAt).toFixed(0)} ms after B was killed`);
    t.equal((await one.status()).BackendState, 'Running', 'one keeps running');
    t.ok(a.state.presence.isOnline(twoId), 'A counts two online');
  }));
}
