/**
 * Real-client interop for SSH `check` mode: stock tailscaled clients join a Headway
 * server whose SSH policy lets alice in as root on her devices only after a check
 * (`"action": "check"`, checkPeriod 1h). `tailscale ssh root@node-b id` from node-a
 * reaches node-b's Tailscale SSH server, which asks Headway over its Noise session
 * (GET /machine/ssh/action/...): Headway holds it and the SSH client prints the
 * check's link (/auth/<id>) while the connection waits.
 *
 * Without an identity provider an administrator answers with `headway auth approve`
 * or `headway auth reject` (the CLI, through the API): a rejection and an unanswered
 * check (registration.pending_expiry) end the connection with OpenSSH's 255 and no
 * output; an approval runs the command; a second connection within checkPeriod runs
 * without a prompt. With the test OIDC provider (its own process), bob signing in on
 * alice's link is refused and changes nothing; alice signing in and confirming lets
 * the connection through, and the next one within checkPeriod does not prompt.
 */
import t, { type Test } from 'tap';
import { Browser, confirm, describePage, signIn } from '@headway/oidc-test-provider';
import { runHeadwayOn } from '../src/cli.js';
import { startOidcSetup } from '../src/oidc.js';
import { freePort } from '../src/ports.js';
import { startTestServer, type TestServer } from '../src/server.js';
import { cleanupStack, requireTailscale, TailscaleDevice, type CommandResult, type TailscaleBinaries } from '../src/tailscale.js';
import { startCommand } from '../src/tailscale-process.js';

const POLICY = {
  acls: [{ action: 'accept', src: ['alice@'], dst: ['alice@:*'] }],
  ssh: [{ action: 'check', src: ['alice@'], dst: ['alice@'], users: ['root'], checkPeriod: '1h' }],
};

/** PENDING_EXPIRY is how long a check waits here (registration.pending_expiry), short so the unanswered case ends soon. */
const PENDING_EXPIRY_S = 25;
/** SSH_TIMEOUT_MS bounds one `tailscale ssh` run, the wait for an answer included. */
const SSH_TIMEOUT_MS = 120_000;
/** URL_TIMEOUT_MS bounds the wait for the SSH client to print the check's link. */
const URL_TIMEOUT_MS = 60_000;
const CHECK_LINK = /(https?:\/\/\S+\/auth\/(sshcheck-[A-Za-z0-9_-]+))/;

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

interface HeldSsh {
  /** link resolves with the check's URL and ID once the SSH client printed it, or undefined if the run ended first. */
  link: Promise<{ url: string; id: string } | undefined>;
  result: Promise<CommandResult>;
}

/** ssh starts `tailscale ssh <target> <command>` on a device and watches its output for a check's link. */
function ssh(d: TailscaleDevice, target: string, command: string[]): HeldSsh {
  const running = startCommand(d.binaries.tailscale, [`--socket=${d.socketPath}`, 'ssh', target, ...command], d.env, SSH_TIMEOUT_MS);
  let output = '';
  let ended = false;
  running.child.stdout?.on('data', (chunk: Buffer | string) => { output += String(chunk); });
  running.child.stderr?.on('data', (chunk: Buffer | string) => { output += String(chunk); });
  void running.result.finally(() => { ended = true; }).catch(() => undefined);
  const link = (async () => {
    const deadline = Date.now() + URL_TIMEOUT_MS;
    while (Date.now() < deadline) {
      const m = CHECK_LINK.exec(output);
      if (m) return { url: m[1]!, id: m[2]! };
      if (ended) return undefined;
      await sleep(100);
    }
    return undefined;
  })();
  return { link, result: running.result };
}

function describe(r: CommandResult): string {
  const how = r.timedOut ? 'timed out' : r.signal !== null ? `killed by ${r.signal}` : `exit ${r.code}`;
  return `${how}; stdout: ${JSON.stringify(r.stdout.trim().slice(-500))}; stderr: ${JSON.stringify(r.stderr.trim().slice(-1000))}`;
}

function assertRan(t: Test, r: CommandResult): void {
  t.equal(r.code, 0, `tailscale ssh exits 0 (${describe(r)})`);
  t.match(r.stdout, /^uid=0\(root\)/m, 'the command ran as root');
}

function assertRefused(t: Test, r: CommandResult, reason: RegExp): void {
  t.equal(r.timedOut, false, 'refused, not timed out');
  t.equal(r.code, 255, `tailscale ssh fails with OpenSSH's 255 (${describe(r)})`);
  t.match(r.stderr, reason, `the SSH client shows why: ${reason.source}`);
  t.notMatch(r.stdout, /uid=/, 'no command ran');
}

/** devices starts node-a (no SSH server) and node-b (--ssh) of one user, with `join` bringing each up. */
async function devices(t: Test, binaries: TailscaleBinaries, prefix: string, join: (d: TailscaleDevice, hostname: string, extra: string[]) => Promise<void>): Promise<{ nodeA: TailscaleDevice; nodeB: TailscaleDevice }> {
  const cleanups = cleanupStack(t);
  const tag = `${prefix}${binaries.version.replace(/\W/g, '')}`;
  const start = async (name: string, extra: string[]) => {
    const d = await TailscaleDevice.start({ name: `${name}${tag}`, version: binaries.version });
    cleanups.push(() => d.stop());
    cleanups.push(() => { if (!t.passing()) t.comment(`--- ${d.name} tailscaled log (end) ---\n${d.logTail(6000)}`); });
    await join(d, name, extra);
    return d;
  };
  const nodeA = await start('node-a', []);
  const nodeB = await start('node-b', ['--ssh']);
  // node-b's SSH policy must name node-a before the first connection, or the client refuses on its own.
  await nodeB.waitNetmap((nm) => JSON.stringify(nm.SSHPolicy ?? null).includes('holdAndDelegate') && (nm.Peers ?? []).length > 0, { timeoutMs: 30_000, intervalMs: 200 });
  await nodeA.waitFor((st) => Object.values(st.Peer ?? {}).some((p) => p.HostName === 'node-b' && ((p.sshHostKeys as string[] | undefined) ?? []).length > 0), 30_000);
  return { nodeA, nodeB };
}

async function cli(t: Test, server: TestServer, args: string[]): Promise<void> {
  const r = await runHeadwayOn(server, args);
  t.equal(r.code, 0, `headway ${args.join(' ')}: ${r.stderr.trim() || r.stdout.trim()}`);
}

const installed = requireTailscale(t);
for (const binaries of installed) {
  t.test(`${binaries.version}: approval with the CLI`, async (t) => {
    const port = await freePort();
    const serverUrl = `http://127.0.0.1:${port}`;
    const s = await startTestServer({
      listen_addr: `127.0.0.1:${port}`, server_url: serverUrl, policy: { mode: 'database' },
      registration: { pending_expiry: `${PENDING_EXPIRY_S}s` },
      derp: { server: { enabled: true, stun_listen_addr: '127.0.0.1:0' } },
    });
    t.teardown(() => s.stop());
    await s.policy.set(JSON.stringify(POLICY));
    const alice = await s.state.users.create({ name: 'alice' });
    const key = (await s.state.keys.createPreAuthKey({ userId: alice.id, reusable: true })).secret;
    const { nodeA } = await devices(t, binaries, 'cli', async (d, hostname, extraArgs) => {
      await d.up({ loginServer: serverUrl, authKey: key, hostname, extraArgs, timeoutMs: 60_000 });
    });

    await t.test('the connection is held with a link; auth reject refuses it', async (t) => {
      const run = ssh(nodeA, 'root@node-b', ['id']);
      const link = await run.link;
      t.ok(link, 'the SSH client printed the check link');
      t.match(link!.url, `${serverUrl}/auth/`, 'on server_url');
      const page = await fetch(link!.url);
      t.equal(page.status, 200, 'the check page answers');
      const html = await page.text();
      t.match(html, `headway auth approve --auth-id ${link!.id}`, 'and shows the approve command');
      t.match(html, /node-a.*alice.*node-b.*root/s, 'naming the source, its owner, the destination and the account');
      const gone = await fetch(`${serverUrl}/auth/sshcheck-${'x'.repeat(32)}`);
      t.equal(gone.status, 404, 'an unknown check ID is a 404');
      t.equal((await fetch(`${serverUrl}/auth/${'%3Cb%3E'}`)).status, 400, 'a malformed one a 400');
      await cli(t, s, ['auth', 'reject', '--auth-id', link!.id]);
      assertRefused(t, await run.result, /SSH check refused: an administrator rejected it/);
      const again = await runHeadwayOn(s, ['auth', 'approve', '--auth-id', link!.id]);
      t.not(again.code, 0, `an answered check cannot be approved (${again.stderr.trim()})`);
    });

    await t.test('an unanswered check ends refused at registration.pending_expiry', async (t) => {
      const run = ssh(nodeA, 'root@node-b', ['id']);
      t.ok(await run.link, 'held with a link');
      assertRefused(t, await run.result, new RegExp(`nobody approved it within ${PENDING_EXPIRY_S} seconds`));
    });

    await t.test('auth approve lets the command run; the next connection within checkPeriod is not held', async (t) => {
      const run = ssh(nodeA, 'root@node-b', ['id']);
      const link = await run.link;
      t.ok(link, 'held with a link');
      await cli(t, s, ['auth', 'approve', '--auth-id', link!.id]);
      assertRan(t, await run.result);
      const second = ssh(nodeA, 'root@node-b', ['id']);
      const r = await second.result;
      assertRan(t, r);
      t.notMatch(r.stderr, CHECK_LINK, 'no check link this time');
      t.notOk(await second.link, 'no prompt within checkPeriod');
    });
  });

  t.test(`${binaries.version}: approval by signing in again (OIDC)`, async (t) => {
    const setup = await startOidcSetup({}, {}, { policy: { mode: 'database' }, derp: { server: { enabled: true, stun_listen_addr: '127.0.0.1:0' } } });
    t.teardown(() => setup.provider.stop());
    t.teardown(() => setup.server.stop());
    const { server, serverUrl } = setup;
    await server.policy.set(JSON.stringify(POLICY));
    let key = '';
    const { nodeA } = await devices(t, binaries, 'oidc', async (d, hostname, extraArgs) => {
      if (!key) {
        // node-a joins through the provider as alice, which makes alice's user; node-b with a key of that user.
        const up = await d.up({ loginServer: serverUrl, hostname, extraArgs, timeoutMs: 60_000 });
        const signedIn = await signIn(up.authUrl!, 'alice', 'alice-pw');
        const done = await confirm(signedIn);
        if (done.status !== 200) throw new Error(`alice's login: ${describePage(done)}`);
        await d.waitFor((s) => s.BackendState === 'Running', 60_000);
        const alice = server.state.users.byName('alice')!;
        key = (await server.state.keys.createPreAuthKey({ userId: alice.id, reusable: true })).secret;
        return;
      }
      await d.up({ loginServer: serverUrl, authKey: key, hostname, extraArgs, timeoutMs: 60_000 });
    });
    // bob is a user of the network too (linked to his identity at the provider), but owns neither device.
    await cli(t, server, ['users', 'create', 'bob']);
    await cli(t, server, ['users', 'link', '-n', 'bob', '--subject', 'bob-sub']);

    await t.test("bob signing in on alice's link is refused; alice's sign-in lets the command run", async (t) => {
      const run = ssh(nodeA, 'root@node-b', ['id']);
      const link = await run.link;
      t.ok(link, 'the SSH client printed the check link');
      t.match(link!.url, `${serverUrl}/auth/`);
      const asBob = await signIn(link!.url, 'bob', 'bob-pw', { browser: new Browser() });
      t.equal(asBob.page.status, 403, `bob is refused: ${describePage(asBob.page)}`);
      t.match(asBob.page.body, /only alice, the owner of node-a, can approve this SSH connection/);
      const asAlice = await signIn(link!.url, 'alice', 'alice-pw', { browser: new Browser() });
      t.equal(asAlice.page.status, 200, `alice is asked to confirm: ${describePage(asAlice.page)}`);
      t.match(asAlice.page.body, /Allow SSH to node-b/);
      const done = await confirm(asAlice);
      t.equal(done.status, 200, describePage(done));
      t.match(done.body, /SSH connection allowed/);
      assertRan(t, await run.result);
    });

    await t.test('the next connection within checkPeriod does not prompt', async (t) => {
      const run = ssh(nodeA, 'root@node-b', ['id']);
      const r = await run.result;
      assertRan(t, r);
      t.notOk(await run.link, 'no check link');
    });
    t.notOk(server.logs.join('\n').includes('oidc-test-client-secret'), 'the client secret is not logged');
  });
}
