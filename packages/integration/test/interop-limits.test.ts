/**
 * Real-client interop for the /ts2021 limits: with deadlines far shorter than the
 * defaults, a stock tailscaled that is logged in keeps its session (the map long-poll is an open
 * request, not idle), an interactive login waiting for approval keeps its session, and a client over
 * the unauthenticated-session cap is refused. Runs the newest installed client only.
 */
import t from 'tap';
import { startTestServer } from '../src/server.js';
import { requireTailscale, TailscaleDevice } from '../src/tailscale.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const installed = requireTailscale(t);
const newest = installed[0];
if (newest) {
  t.test(`${newest.version}: short deadlines and a session cap of 1 per address`, async (t) => {
    const server = await startTestServer({
      noise: { first_request_timeout: '1s', idle_timeout: '2s', max_unauthenticated_sessions_per_address: 1 },
      derp: { server: { enabled: true, stun_listen_addr: '127.0.0.1:0' } },
    });
    const devices: TailscaleDevice[] = [];
    t.teardown(async () => {
      for (const d of devices.reverse()) await d.stop().catch(() => undefined);
      await server.stop();
    });
    const start = async (name: string) => {
      const d = await TailscaleDevice.start({ name, version: newest.version });
      devices.push(d);
      return d;
    };
    const loginServer = server.urls.http;
    const alice = await server.state.users.create({ name: 'alice' });
    const { secret } = await server.state.keys.createPreAuthKey({ userId: alice.id, reusable: true });

    const a = await start('limits-a');
    await a.up({ loginServer, authKey: secret, hostname: 'alpha', timeoutMs: 30_000 });
    const nodeA = server.state.nodes.list().find((n) => n.givenName === 'alpha')!;
    t.ok(nodeA, 'alpha joined');
    const connsOf = (machineKey: string) => [...((server.control as unknown as { conns: Map<string, Set<{ destroyed: boolean }>> }).conns.get(machineKey) ?? [])];
    const [before] = connsOf(nodeA.machineKey);
    t.ok(before, 'alpha holds a Noise connection');
    await sleep(6000);
    t.same(connsOf(nodeA.machineKey), [before], 'the same connection, never closed and redialed');
    t.ok(server.state.presence.isOnline(nodeA.id), 'after 3x idle_timeout the logged-in client is still online (its map poll is not idle)');
    t.equal((await a.status()).BackendState, 'Running');

    const b = await start('limits-b');
    const up = await b.up({ loginServer, hostname: 'bravo', timeoutMs: 30_000 });
    t.match(up.authUrl ?? '', /\/register\/[A-Za-z0-9_-]+$/, 'interactive login got an AuthURL');
    t.equal(server.control.limits.sessions.unauthenticated('127.0.0.1'), 1, 'its session is the one unauthenticated slot');

    const c = await start('limits-c');
    const refused = await c.up({ loginServer, hostname: 'charlie', timeoutMs: 8000 }).then(() => undefined, (err: Error) => err);
    t.ok(refused, 'a second unregistered machine from the address gets no AuthURL');
    t.ok(server.control.limits.refused['too-many-sessions'] >= 1, `the server refused its session (${JSON.stringify(server.control.limits.refused)})`);
    t.equal(server.state.pending.quota.size(), 1, 'only the admitted machine has a waiting login');
    // tailscaled does not log the error frame's text: after a failed dial it retries, forcing port 443.

    await sleep(3000);
    t.equal(server.control.limits.sessions.unauthenticated('127.0.0.1'), 1, 'the waiting login keeps its session past idle_timeout (its follow-up is held open)');
    const regKey = (up.authUrl ?? '').split('/').pop()!;
    await server.control.registrar.approve(regKey, alice.id);
    const st = await b.waitFor((s) => s.BackendState === 'Running', 20_000);
    t.equal(st.BackendState, 'Running', 'approval completes the waiting login over the same kind of session');
  });
}
