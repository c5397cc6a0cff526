/**
 * A login completed while the device's follow-up request is not open must not leave it logged out,
 * on every installed tailscaled: `tailscale up` prints its AuthURL, then
 * tailscaled is stopped (SIGSTOP) and its connection to the server cut; the administrator
 * registers the login; tailscaled resumes, its follow-up fails with the cut connection and is
 * sent again on a new one. That follow-up must be answered with the registration (the device
 * comes up as the registered node), not with a new AuthURL.
 */
import t from 'tap';
import { startTestServer } from '../src/server.js';
import { runHeadwayOn } from '../src/cli.js';
import { TcpBalancer } from '../src/cluster.js';
import { cleanupStack, requireTailscale, TailscaleDevice } from '../src/tailscale.js';

const JOIN_TIMEOUT_MS = 60_000;

async function until(what: string, fn: () => boolean, timeoutMs = 10_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!fn()) {
    if (Date.now() > end) throw new Error(`not within ${timeoutMs} ms: ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

const installed = requireTailscale(t);
for (const binaries of installed) {
  t.test(`${binaries.version}: a login registered while tailscaled was stopped and cut off brings it up when it resumes`, async (t) => {
    const tag = binaries.version.replace(/\W/g, '');
    const cleanups = cleanupStack(t);
    const server = await startTestServer();
    cleanups.push(() => server.stop());
    // The device reaches the server through a TCP proxy the test can cut.
    const proxy = new TcpBalancer([server.urls.http]);
    const loginServer = await proxy.listen();
    cleanups.push(() => proxy.close());
    const alice = await server.state.users.create({ name: 'alice' });
    const d = await TailscaleDevice.start({ name: `resume${tag}`, version: binaries.version });
    cleanups.push(() => d.stop());
    // A failure while the daemon is stopped must not leave it stopped (stop() sends SIGTERM first).
    cleanups.push(() => { if (!d.exited && d.pid) process.kill(d.pid, 'SIGCONT'); });

    const up = await d.up({ loginServer, hostname: 'resumer', timeoutMs: 30_000 });
    const authId = (up.authUrl ?? '').split('/').pop()!;
    t.match(authId, /^[A-Za-z0-9_-]+$/, `AuthURL ${up.authUrl}`);
    await until('tailscaled holds its follow-up open', () => server.control.registrar.waiting(authId));

    process.kill(d.pid!, 'SIGSTOP');
    proxy.cut();
    await until('the server saw the follow-up end', () => !server.control.registrar.waiting(authId));

    const r = await runHeadwayOn(server, ['auth', 'register', '--auth-id', authId, '--user', 'alice', '-o', 'json'], 30_000);
    if (r.code !== 0) throw new Error(`headway auth register exited ${r.code}: ${(r.stderr || r.stdout).trim().slice(-500)}`);
    const nodeId = Number(JSON.parse(r.stdout).id);

    proxy.restore();
    process.kill(d.pid!, 'SIGCONT');
    const st = await d.waitFor((s) => s.BackendState === 'Running', JOIN_TIMEOUT_MS);
    t.equal(st.Self?.ID, String(nodeId), 'runs as the registered node');
    t.equal(server.state.nodes.get(nodeId)?.userId, alice.id);
    t.equal(server.state.nodes.list().length, 1, 'one node');
    t.notOk(st.AuthURL, 'no new login was handed out');
  });
}
