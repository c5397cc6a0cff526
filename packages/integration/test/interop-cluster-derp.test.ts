/**
 * Real-client interop for the cluster DERP mesh: two stock tailscaled on two
 * Headway instances sharing one PostgreSQL database, one joined straight to instance A
 * and one to instance B (no balancer), so each holds its relay connection on a different
 * instance. With TS_DEBUG_ALWAYS_USE_DERP=1 they can only talk through the relay, and
 * `tailscale ping` must succeed both ways: A's relay forwards to B's over the mesh and
 * back. Needs the real client and HEADWAY_TEST_POSTGRES_URL (mandatory under CI=true).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { serverDatabases, startTestServer } from '../src/server.js';
import { cleanupStack, requireTailscale, TailscaleDevice, type TailscaleStatus } from '../src/tailscale.js';

const JOIN_TIMEOUT_MS = 60_000;
const SYNC_TIMEOUT_MS = 30_000;

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

function ipv4Of(st: TailscaleStatus): string {
  const ip = (st.TailscaleIPs ?? []).find((a) => a.includes('.'));
  if (!ip) throw new Error(`no IPv4 in status: ${JSON.stringify(st.TailscaleIPs)}`);
  return ip;
}

const peerOnline = (st: TailscaleStatus, host: string) => Object.values(st.Peer ?? {}).some((p) => p.HostName === host && p.Online === true);

const installed = requireTailscale(t);
const [pg] = serverDatabases(t, 'the cluster relay interop test', ['postgres']);
if (pg) {
  for (const binaries of installed) {
    t.test(`${binaries.version}: two tailscaled on different instances ping each other through the meshed relays`, (t) => pg.run(async (database) => {
      const cleanups = cleanupStack(t);
      const shared = mkdtempSync(join(tmpdir(), 'hw-interop-mesh-'));
      cleanups.push(() => rmSync(shared, { recursive: true, force: true }));
      const common = {
        database,
        cluster: { enabled: true, heartbeat_interval: '500ms', instance_timeout: '3s' },
        noise: { private_key_path: join(shared, 'noise.key') },
      };
      const a = await startTestServer(common);
      cleanups.push(() => a.stop());
      const b = await startTestServer(common);
      cleanups.push(() => b.stop());
      const alice = await a.state.users.create({ name: 'alice' });
      const { secret } = await a.state.keys.createPreAuthKey({ userId: alice.id, reusable: true });
      const tag = binaries.version.replace(/\W/g, '');
      const start = async (name: string, loginServer: string): Promise<TailscaleDevice> => {
        const d = await TailscaleDevice.start({ name: `${name}${tag}`, version: binaries.version, env: { TS_DEBUG_ALWAYS_USE_DERP: '1' } });
        cleanups.push(() => d.stop());
        await d.up({ loginServer, authKey: secret, hostname: name, timeoutMs: JOIN_TIMEOUT_MS });
        return d;
      };
      const [one, two] = await Promise.all([start('mesh-one', a.urls.http), start('mesh-two', b.urls.http)]);
      const stOne = await one.waitFor((st) => peerOnline(st, 'mesh-two'), SYNC_TIMEOUT_MS);
      const stTwo = await two.waitFor((st) => peerOnline(st, 'mesh-one'), SYNC_TIMEOUT_MS);
      const keyOne = a.state.nodes.list().find((n) => n.hostname === 'mesh-one')!.nodeKey;
      const keyTwo = a.state.nodes.list().find((n) => n.hostname === 'mesh-two')!.nodeKey;
      const derpA = a.relay.derp!;
      const derpB = b.relay.derp!;
      const deadline = Date.now() + SYNC_TIMEOUT_MS;
      while (!(derpA.isConnected(keyOne) && derpB.isConnected(keyTwo) && derpA.hasMeshRoute(keyTwo) && derpB.hasMeshRoute(keyOne)) && Date.now() < deadline) await sleep(100);
      t.ok(derpA.isConnected(keyOne) && derpB.isConnected(keyTwo), 'one holds its relay connection on A, two on B');
      t.ok(!derpA.isConnected(keyTwo) && !derpB.isConnected(keyOne), 'neither is connected to the other instance\'s relay');
      t.ok(derpA.hasMeshRoute(keyTwo) && derpB.hasMeshRoute(keyOne), 'each relay learned the other\'s client over the mesh');

      const ping = await one.ping(ipv4Of(stTwo), { count: 5, timeoutMs: 5000 });
      t.match(ping.via, /^DERP\(/, `one pings two through the relay: ${ping.output.trim().split('\n').at(-1)}`);
      const back = await two.ping(ipv4Of(stOne), { count: 5, timeoutMs: 5000 });
      t.match(back.via, /^DERP\(/, `two pings one through the relay: ${back.output.trim().split('\n').at(-1)}`);
      const tsmp = await one.ping(ipv4Of(stTwo), { tsmp: true, count: 3, timeoutMs: 5000 });
      t.match(tsmp.output, /via TSMP/, 'a TSMP ping crosses WireGuard over the meshed relays');
      t.ok(derpA.stats.packetsMeshForwarded > 0 && derpB.stats.packetsMeshForwarded > 0, 'both relays forwarded over the mesh');
      t.comment(`mesh forwarded: A ${derpA.stats.packetsMeshForwarded}, B ${derpB.stats.packetsMeshForwarded}; dropped: A ${derpA.stats.packetsMeshDropped}, B ${derpB.stats.packetsMeshDropped}`);
    }));
  }
}
