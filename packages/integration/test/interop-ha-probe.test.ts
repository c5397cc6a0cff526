/**
 * Real-client interop for HA subnet router probing, on every installed tailscaled: two real routers advertise one
 * route and a third real device watches. Both routers answer the server's PingRequests (HEAD
 * /machine/ping-response over their plain HTTP client) and the route stays; then the primary's tailscaled is
 * stopped with SIGSTOP, which keeps its TCP connection (and so its map session) open while it answers nothing, and
 * the route moves to the other router in the watcher's netmap. After SIGCONT the old primary answers again and is
 * healthy, and the route stays where it moved.
 *
 * The prober runs on its own timers here (the shortest headscale allows: 2 s rounds, 1 s timeout); the test waits
 * for states, never for a time.
 */
import t from 'tap';
import { startTestServer, type TestServer } from '../src/server.js';
import { cleanupStack, requireTailscale, TailscaleDevice, type TailscalePeerStatus, type TailscaleStatus } from '../src/tailscale.js';
import { until } from '../src/until.js';

const ROUTE = '10.88.0.0/24';
const JOIN_TIMEOUT_MS = 30_000;
const SYNC_TIMEOUT_MS = 30_000;

function peerById(st: TailscaleStatus, id: number): TailscalePeerStatus | undefined {
  return Object.values(st.Peer ?? {}).find((p) => p.ID === String(id));
}
const isPrimary = (st: TailscaleStatus, id: number) => (peerById(st, id)?.PrimaryRoutes ?? []).includes(ROUTE);

/** probes reads headway_ha_probes_total{result} from the metrics listener. */
async function probes(s: TestServer, result: 'sent' | 'answered' | 'missed'): Promise<number> {
  const text = await (await fetch(`${s.urls.metrics}/metrics`)).text();
  const m = new RegExp(`^headway_ha_probes_total\\{result="${result}"\\} (\\d+)`, 'm').exec(text);
  return m ? Number(m[1]) : 0;
}

const installed = requireTailscale(t);
for (const binaries of installed) {
  t.test(binaries.version, async (t) => {
    const tag = binaries.version.replace(/\W/g, '');
    const cleanups = cleanupStack(t);
    const server = await startTestServer({ node: { routes: { ha: { probe_interval: '2s', probe_timeout: '1s' } } } });
    cleanups.push(() => server.stop());
    const loginServer = server.urls.http;
    const alice = await server.state.users.create({ name: 'alice' });
    const { secret: key } = await server.state.keys.createPreAuthKey({ userId: alice.id, reusable: true });
    const start = async (name: string): Promise<TailscaleDevice> => {
      const d = await TailscaleDevice.start({ name: `${name}${tag}`, version: binaries.version });
      cleanups.push(() => d.stop());
      return d;
    };
    const r1 = await start('har1');
    const r2 = await start('har2');
    const watcher = await start('haw');
    await r1.up({ loginServer, authKey: key, hostname: 'router-1', advertiseRoutes: [ROUTE], timeoutMs: JOIN_TIMEOUT_MS });
    const id1 = server.state.nodes.list().find((n) => n.givenName === 'router-1')!.id;
    await server.routes.approve(id1, [ROUTE]);
    await r2.up({ loginServer, authKey: key, hostname: 'router-2', advertiseRoutes: [ROUTE], timeoutMs: JOIN_TIMEOUT_MS });
    const id2 = server.state.nodes.list().find((n) => n.givenName === 'router-2')!.id;
    await server.routes.approve(id2, [ROUTE]);
    await watcher.up({ loginServer, authKey: key, hostname: 'watcher', acceptRoutes: true, timeoutMs: JOIN_TIMEOUT_MS });
    await watcher.waitFor((st) => isPrimary(st, id1) && peerById(st, id2)?.Online === true, SYNC_TIMEOUT_MS);
    t.pass('router-1 is the primary in the watcher\'s view');

    await t.test('real routers answer the probes and the route stays', async (t) => {
      const before = await probes(server, 'answered');
      // Three rounds' answers from both routers (the counter is the server's own count of HEAD answers it accepted).
      await until('six more probe answers', async () => (await probes(server, 'answered')) >= before + 6, SYNC_TIMEOUT_MS);
      t.equal(await probes(server, 'missed'), 0, 'no probe went unanswered');
      t.same(server.routes.primaryRoutes(id1), [ROUTE], 'router-1 keeps the route');
      t.ok(isPrimary(await watcher.status(), id1), 'and the watcher still routes through it');
    });

    await t.test('a stopped primary stays connected, misses its probes, and the route moves to router-2', async (t) => {
      const pid = r1.pid!;
      process.kill(pid, 'SIGSTOP');
      const stoppedAt = Date.now();
      let stopped = true;
      cleanups.push(() => { if (stopped) process.kill(pid, 'SIGCONT'); });
      const st = await watcher.waitFor((s) => isPrimary(s, id2) && !isPrimary(s, id1), SYNC_TIMEOUT_MS);
      t.comment(`the watcher saw router-2 as the primary ${Date.now() - stoppedAt} ms after router-1 stopped (2 s rounds, 1 s timeout)`);
      t.ok(isPrimary(st, id2), 'the watcher\'s netmap has router-2 as the primary');
      t.ok(server.state.presence.isOnline(id1), 'router-1 never disconnected: its map session is still open');
      t.ok((await probes(server, 'missed')) >= 1, 'the server counted missed probes');
      const nm = await watcher.waitNetmap((m) => (m.Peers ?? []).some((p) => p.ID === id2 && ((p.AllowedIPs as string[] | undefined) ?? []).includes(ROUTE)), { timeoutMs: SYNC_TIMEOUT_MS });
      const peer1 = (nm.Peers ?? []).find((p) => p.ID === id1);
      t.notOk(((peer1?.AllowedIPs as string[] | undefined) ?? []).includes(ROUTE), 'router-1 no longer carries the subnet in the watcher\'s netmap');

      process.kill(pid, 'SIGCONT');
      stopped = false;
      await until('router-1 answers again and is healthy', () => server.control.mapper.view.isHealthy(id1), SYNC_TIMEOUT_MS);
      const answered = await probes(server, 'answered');
      await until('two more rounds answered', async () => (await probes(server, 'answered')) >= answered + 4, SYNC_TIMEOUT_MS);
      t.ok(server.control.mapper.view.isHealthy(id1), 'router-1 is healthy again');
      t.same(server.routes.primaryRoutes(id2), [ROUTE], 'router-2 keeps the route (no flapping back)');
      t.ok(isPrimary(await watcher.status(), id2), 'the watcher still routes through router-2');
    });
  });
}
