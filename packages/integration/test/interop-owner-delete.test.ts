/**
 * Real-client interop for owner profiles and deleted nodes, on every installed tailscaled:
 * after `headway nodes tag` the other device shows the tagged-devices owner
 * without reconnecting, and after `headway nodes delete` the deleted device goes
 * to NeedsLogin (no stale peers) and can join again with a new key.
 */
import t from 'tap';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startTestServer, type TestServer } from '../src/server.js';
import { runHeadwayOn } from '../src/cli.js';
import { cleanupStack, requireTailscale, TailscaleDevice, type TailscalePeerStatus, type TailscaleStatus } from '../src/tailscale.js';

const TAGGED_USER_ID = 2147455555;
const JOIN_TIMEOUT_MS = 30_000;
const SYNC_TIMEOUT_MS = 15_000;
/** NEEDS_LOGIN_TIMEOUT_MS bounds how long a deleted device may take to notice (the change is pushed at once). */
const NEEDS_LOGIN_TIMEOUT_MS = 20_000;

function peerById(st: TailscaleStatus, id: number): TailscalePeerStatus | undefined {
  return Object.values(st.Peer ?? {}).find((p) => p.ID === String(id));
}

/** ownerLogin is the login name `tailscale status` shows for a peer's owner (undefined = it has no profile). */
function ownerLogin(st: TailscaleStatus, p: TailscalePeerStatus | undefined): string | undefined {
  const u = p?.UserID !== undefined ? (st.User ?? {})[String(p.UserID)] as { LoginName?: string } | undefined : undefined;
  return u?.LoginName;
}

async function headway(server: TestServer, args: string[]): Promise<void> {
  const r = await runHeadwayOn(server, args, 30_000);
  if (r.code !== 0) throw new Error(`headway ${args.join(' ')} exited ${r.code}: ${(r.stderr || r.stdout).trim().slice(-1000)}`);
}

const installed = requireTailscale(t);
for (const binaries of installed) {
  t.test(binaries.version, async (t) => {
    let a: TailscaleDevice;
    const tag = binaries.version.replace(/\W/g, '');
    const cleanups = cleanupStack(t);
    const dataDir = mkdtempSync(join(tmpdir(), 'hw-interop-od-'));
    cleanups.push(() => rmSync(dataDir, { recursive: true, force: true }));
    const server = await startTestServer({ derp: { server: { enabled: true, stun_listen_addr: '127.0.0.1:0' } } }, { dataDir });
    cleanups.push(() => server.stop());
    const loginServer = server.urls.http;
    const alice = await server.state.users.create({ name: 'alice' });
    const { secret: key } = await server.state.keys.createPreAuthKey({ userId: alice.id, reusable: true });

    const startDevice = async (name: string): Promise<TailscaleDevice> => {
      const d = await TailscaleDevice.start({ name: `${name}${tag}`, version: binaries.version });
      cleanups.push(() => d.stop());
      return d;
    };
    a = await startDevice('oda');
    const b = await startDevice('odb');
    await a.up({ loginServer, authKey: key, hostname: 'alpha', timeoutMs: JOIN_TIMEOUT_MS });
    await b.up({ loginServer, authKey: key, hostname: 'bravo', timeoutMs: JOIN_TIMEOUT_MS });
    const idA = server.state.nodes.list().find((n) => n.givenName === 'alpha')!.id;
    const idB = server.state.nodes.list().find((n) => n.givenName === 'bravo')!.id;
    await a.waitFor((s) => peerById(s, idB)?.Online === true, SYNC_TIMEOUT_MS);
    await b.waitFor((s) => peerById(s, idA)?.Online === true, SYNC_TIMEOUT_MS);

    await t.test('tagged nodes show a raw owner userid until they reconnect', async (t) => {
      const st0 = await a.status();
      t.equal(ownerLogin(st0, peerById(st0, idB)), 'alice', 'before: bravo is owned by alice');
      await headway(server, ['nodes', 'tag', '-i', String(idB), '--tags', 'tag:web']);
      const tagged = Date.now();
      const st = await a.waitFor((s) => (peerById(s, idB)?.Tags ?? []).includes('tag:web'), SYNC_TIMEOUT_MS, 100);
      const p = peerById(st, idB);
      t.comment(`tags reached alpha ${Date.now() - tagged} ms after the CLI returned`);
      t.equal(p?.UserID, TAGGED_USER_ID, 'bravo is owned by the tagged-devices user');
      t.equal(ownerLogin(st, p), 'tagged-devices', 'alpha has the tagged-devices profile for it (status --json User)');
      const text = await a.cliOk(['status']);
      const line = text.stdout.split('\n').find((l) => l.includes('bravo')) ?? '';
      t.match(line, /tagged-devices/, `tailscale status shows the owner: ${line.trim()}`);
      t.notMatch(text.stdout, /userid:/, 'no raw userid owner anywhere in tailscale status');

      // A renamed user: the other device shows the new name without reconnecting.
      await headway(server, ['users', 'rename', '-i', String(alice.id), '-r', 'alicia']);
      const renamed = Date.now();
      const st2 = await b.waitFor((s) => ownerLogin(s, peerById(s, idA)) === 'alicia', SYNC_TIMEOUT_MS, 100);
      t.comment(`user rename reached bravo ${Date.now() - renamed} ms after the CLI returned`);
      t.equal(ownerLogin(st2, peerById(st2, idA)), 'alicia', 'bravo shows alpha owned by the renamed user');
    });

    await t.test('a deleted node never learns it was deleted', async (t) => {
      await headway(server, ['nodes', 'delete', '-i', String(idA), '--force']);
      const deleted = Date.now();
      const st = await a.waitFor((s) => s.BackendState === 'NeedsLogin', NEEDS_LOGIN_TIMEOUT_MS, 100);
      t.comment(`deleted device reached NeedsLogin ${Date.now() - deleted} ms after the CLI returned`);
      t.equal(st.BackendState, 'NeedsLogin', 'the deleted device needs a new login');
      t.equal(peerById(st, idB), undefined, 'and lists no stale peer');
      await b.waitFor((s) => peerById(s, idA) === undefined, SYNC_TIMEOUT_MS);
      t.pass('the other device dropped it');
      // It stays logged out (its map requests keep being answered that way).
      await new Promise((r) => setTimeout(r, 3000));
      t.equal((await a.status()).BackendState, 'NeedsLogin', 'still NeedsLogin a few seconds later');

      // Restarted with its state, the device registers its old node key again: still logged out.
      const { stateDir, dir } = a;
      await a.stop({ keepDir: true });
      cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
      // Go's flag package keeps the last value, so this overrides the harness's fresh state dir.
      a = await TailscaleDevice.start({ name: `oda2${tag}`, version: binaries.version, extraDaemonArgs: [`--statedir=${stateDir}`] });
      const restarted = a;
      cleanups.push(() => restarted.stop());
      const st3 = await a.waitFor((s) => s.BackendState === 'NeedsLogin', NEEDS_LOGIN_TIMEOUT_MS, 100);
      t.equal(st3.BackendState, 'NeedsLogin', 'after a tailscaled restart the deleted device still needs a login');

      const { secret: fresh } = await server.state.keys.createPreAuthKey({ userId: alice.id, reusable: false });
      try {
        await a.up({ loginServer, authKey: fresh, hostname: 'alpha', timeoutMs: JOIN_TIMEOUT_MS });
      } catch (err) {
        t.comment(a.logTail(12000));
        throw err;
      }
      const back = await a.waitFor((s) => s.BackendState === 'Running' && peerById(s, idB)?.Online === true, JOIN_TIMEOUT_MS);
      const newId = Number(back.Self?.ID);
      t.not(newId, idA, `joined again as a new node (${newId})`);
      t.ok(server.state.nodes.get(newId), 'the server has the new node');
      await b.waitFor((s) => peerById(s, newId)?.Online === true, SYNC_TIMEOUT_MS);
      t.pass('the other device sees it again');
    });
  });
}
