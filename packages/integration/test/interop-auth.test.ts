/**
 * Real-client interop for the headscale 0.29 `auth` commands, on every
 * installed tailscaled: `headway auth reject` ends a waiting `tailscale up` with the
 * rejection as its error and registers nothing; `headway auth register` (what the
 * register page prints) brings the device up for a user; after `headway nodes
 * expire`, the device's new login is approved with `headway auth approve` and keeps
 * its node and owner.
 */
import t from 'tap';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startTestServer, type TestServer } from '../src/server.js';
import { runHeadwayOn } from '../src/cli.js';
import { cleanupStack, requireTailscale, TailscaleDevice } from '../src/tailscale.js';

const JOIN_TIMEOUT_MS = 30_000;
const STATE_TIMEOUT_MS = 20_000;

async function headway(server: TestServer, args: string[]): Promise<string> {
  const r = await runHeadwayOn(server, args, 30_000);
  if (r.code !== 0) throw new Error(`headway ${args.join(' ')} exited ${r.code}: ${(r.stderr || r.stdout).trim().slice(-1000)}`);
  return r.stdout;
}

const authIdOf = (url: string | undefined): string => (url ?? '').split('/').pop() ?? '';

const installed = requireTailscale(t);
for (const binaries of installed) {
  t.test(binaries.version, async (t) => {
    const tag = binaries.version.replace(/\W/g, '');
    const cleanups = cleanupStack(t);
    const dataDir = mkdtempSync(join(tmpdir(), 'hw-interop-auth-'));
    cleanups.push(() => rmSync(dataDir, { recursive: true, force: true }));
    const server = await startTestServer({ derp: { server: { enabled: true, stun_listen_addr: '127.0.0.1:0' } } }, { dataDir });
    cleanups.push(() => server.stop());
    const loginServer = server.urls.http;
    const alice = await server.state.users.create({ name: 'alice' });
    const d = await TailscaleDevice.start({ name: `auth${tag}`, version: binaries.version });
    cleanups.push(() => d.stop());

    await t.test('auth reject: the waiting `tailscale up` fails with the rejection; nothing is registered', async (t) => {
      const up = await d.up({ loginServer, hostname: 'delta', timeoutMs: JOIN_TIMEOUT_MS });
      const authId = authIdOf(up.authUrl);
      t.match(authId, /^[A-Za-z0-9_-]+$/, `AuthURL ${up.authUrl}`);
      t.equal(await headway(server, ['auth', 'reject', '--auth-id', authId]), 'Auth request rejected\n');
      const ended = await up.exited!;
      t.not(ended.code, 0, '`tailscale up` exits with an error');
      t.match(`${ended.stderr}${ended.stdout}`, /login rejected by the administrator/, `it says why: ${(ended.stderr || ended.stdout).trim().slice(-300)}`);
      t.same(server.state.nodes.list(), [], 'no node');
      t.equal((await fetch(up.authUrl!)).status, 410, 'the rejected login URL is dead: it says the login was rejected');
    });

    let nodeId = 0;
    await t.test('auth register (as the register page says) brings the device up for the user', async (t) => {
      // tailscaled's login loop from the rejected attempt retries its follow-up and is told the
      // rejection again; when that answer lands just after this `tailscale up` began, the client
      // reports it to this run. A person would run `tailscale up` again; so does the test, once.
      const upAgain = () => d.up({ loginServer, hostname: 'delta', timeoutMs: JOIN_TIMEOUT_MS });
      const up = await upAgain().catch((err: Error) => {
        if (!/login rejected by the administrator/.test(err.message)) throw err;
        t.comment(`the previous login's rejection reached this run (${err.message.slice(0, 120)}); running tailscale up again`);
        return upAgain();
      });
      const authId = authIdOf(up.authUrl);
      const page = await (await fetch(up.authUrl!)).text();
      t.match(page, `headway auth register --auth-id ${authId} --user USERNAME`);
      const out = JSON.parse(await headway(server, ['auth', 'register', '--auth-id', authId, '--user', 'alice', '-o', 'json']));
      nodeId = Number(out.id);
      const st = await d.waitFor((s) => s.BackendState === 'Running', JOIN_TIMEOUT_MS);
      t.equal(st.Self?.ID, String(nodeId), 'runs as the registered node');
      t.equal(server.state.nodes.get(nodeId)?.userId, alice.id);
    });

    await t.test('after nodes expire, auth approve lets the known device back in with its owner', async (t) => {
      await headway(server, ['nodes', 'expire', '-i', String(nodeId)]);
      await d.waitFor((s) => s.BackendState === 'NeedsLogin', STATE_TIMEOUT_MS);
      const addresses = server.state.nodes.get(nodeId)!.ipv4;
      const up = await d.up({ loginServer, hostname: 'delta', timeoutMs: JOIN_TIMEOUT_MS });
      const authId = authIdOf(up.authUrl);
      t.match(authId, /^[A-Za-z0-9_-]+$/, `a new AuthURL: ${up.authUrl}`);
      t.equal(await headway(server, ['auth', 'approve', '--auth-id', authId]), 'Auth request approved\n');
      const st = await d.waitFor((s) => s.BackendState === 'Running', JOIN_TIMEOUT_MS);
      t.equal(st.Self?.ID, String(nodeId), 'the same node');
      const node = server.state.nodes.get(nodeId)!;
      t.equal(node.userId, alice.id, 'still alice\'s');
      t.equal(node.ipv4, addresses, 'same address');
      t.equal(server.state.nodes.list().length, 1);
    });
  });
}
