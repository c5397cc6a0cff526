/**
 * Real-client interop: stock tailscaled (every installed version) joins a real
 * Headway server and stays in sync with changes made through the `headway`
 * admin CLI, across tailscaled and server restarts.
 *
 * Scenarios run in one chain per version (one server, a few devices) because
 * starting daemons dominates the run time on a small machine; order:
 * join with a key, interactive join, admin changes (rename, tag, routes,
 * delete), ephemeral cleanup, tailscaled restart, server restart, logout.
 */
import t, { type Test } from 'tap';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startTestServer, type TestServer } from '../src/server.js';
import { runHeadway } from '../src/cli.js';
import { cleanupStack, requireTailscale, TailscaleDevice, type TailscalePeerStatus, type TailscaleStatus } from '../src/tailscale.js';


/** CliNode is one entry of `headway nodes list -o json` (the headscale-compatible snake_case shape). */
interface CliNode {
  id: string;
  name: string;
  given_name: string;
  ip_addresses: string[];
  online: boolean;
  expiry: string | null;
  tags: string[];
  ephemeral: boolean;
  approved_routes: string[];
  available_routes: string[];
}

const BASE_DOMAIN = 'headway.net';
const JOIN_TIMEOUT_MS = 30_000;
const SYNC_TIMEOUT_MS = 15_000;

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/**
 * Admin runs the `headway` CLI against one server's unix socket through
 * runHeadway (scratch HOME and cwd, none of the caller's HEADWAY_* variables).
 */
class Admin {
  socket: string;

  constructor(socket: string) {
    this.socket = socket;
  }

  /** json runs `headway <args> -o json` and returns the parsed output; throws with stderr on failure. */
  async json<T>(args: string[]): Promise<T> {
    const full = [...args, '-o', 'json'];
    const { code, stdout, stderr } = await runHeadway({ HEADWAY_UNIX_SOCKET: this.socket }, full, 30_000);
    if (code !== 0) throw new Error(`headway ${full.join(' ')} exited ${code}: ${(stderr || stdout).trim().slice(-1000)}`);
    try {
      return JSON.parse(stdout) as T;
    } catch {
      throw new Error(`headway ${full.join(' ')} printed no JSON: ${stdout.slice(0, 500)}`);
    }
  }

  async nodes(): Promise<CliNode[]> {
    return this.json<CliNode[]>(['nodes', 'list']);
  }

  /** waitForNodes polls `nodes list` until predicate holds; on timeout throws with the last list. */
  async waitForNodes(what: string, predicate: (nodes: CliNode[]) => boolean, timeoutMs: number): Promise<CliNode[]> {
    const deadline = Date.now() + timeoutMs;
    let last: CliNode[] = [];
    for (;;) {
      last = await this.nodes();
      if (predicate(last)) return last;
      if (Date.now() >= deadline) break;
      await sleep(300);
    }
    throw new Error(`nodes list: ${what} not seen within ${timeoutMs} ms; last: ${JSON.stringify(last.map((n) => ({ id: n.id, name: n.given_name, online: n.online })))}`);
  }
}

/** peerById finds a peer in status by its StableID, which Headway sets to the node id. */
function peerById(st: TailscaleStatus, id: string): TailscalePeerStatus | undefined {
  return Object.values(st.Peer ?? {}).find((p) => p.ID === id);
}

/** socketOf is the server's CLI socket; these tests need it, so its absence is an error. */
function socketOf(s: TestServer): string {
  if (s.urls.socket === undefined) throw new Error('test server has no unix socket for the CLI');
  return s.urls.socket;
}

function byId(nodes: CliNode[], id: string): CliNode {
  const n = nodes.find((x) => x.id === id);
  if (n === undefined) throw new Error(`node ${id} missing from nodes list (have ${nodes.map((x) => x.id).join(', ')})`);
  return n;
}

function sorted(xs: readonly string[] | null | undefined): string[] {
  return [...(xs ?? [])].sort();
}

const installed = requireTailscale(t);
for (const binaries of installed) {
  t.test(binaries.version, async (t) => {
    const tag = binaries.version.replace(/\W/g, '');
    // Everything started here is stopped in reverse order, devices before the server.
    const cleanups = cleanupStack(t);
    const startDevice = async (name: string, stateDir?: string): Promise<TailscaleDevice> => {
      const d = await TailscaleDevice.start({
        name: `${name}${tag}`,
        version: binaries.version,
        // Go's flag package keeps the last value, so this overrides the harness's fresh state dir.
        ...(stateDir !== undefined ? { extraDaemonArgs: [`--statedir=${stateDir}`] } : {}),
      });
      cleanups.push(() => d.stop());
      return d;
    };

    const dataDir = mkdtempSync(join(tmpdir(), 'hw-interop-'));
    cleanups.push(() => rmSync(dataDir, { recursive: true, force: true }));
    const baseConfig = {
      node: { ephemeral: { inactivity_timeout: '3s' } },
      derp: { server: { enabled: true, stun_listen_addr: '127.0.0.1:0' } },
    };
    let server: TestServer = await startTestServer(baseConfig, { dataDir });
    // The server variable changes on restart; the cleanup stops whichever is current.
    cleanups.push(() => server.stop({ remove: false }));
    const admin = new Admin(socketOf(server));
    const loginServer = server.urls.http;

    const alice = await server.state.users.create({ name: 'alice' });
    const { secret: reusableKey } = await server.state.keys.createPreAuthKey({ userId: alice.id, reusable: true });

    // The steps share devices and node ids, so after one fails the rest are
    // skipped with its name instead of failing with confusing follow-on errors.
    let failedStep: string | undefined;
    const step = async (name: string, body: (t: Test) => Promise<void>): Promise<void> => {
      if (failedStep !== undefined) {
        t.skip(`${name} (skipped: step "${failedStep}" failed)`, () => undefined);
        return;
      }
      await t.test(name, async (t) => {
        try {
          await body(t);
        } finally {
          if (!t.passing()) failedStep = name;
        }
      });
      if (failedStep === undefined && !t.passing()) failedStep = name;
    };

    const a = await startDevice('a');
    let b = await startDevice('b');
    let idA = '';
    let idB = '';

    await step('1. two devices join with a pre-auth key and see each other', async (t) => {
      await a.up({ loginServer, authKey: reusableKey, hostname: 'alpha', timeoutMs: JOIN_TIMEOUT_MS });
      await b.up({ loginServer, authKey: reusableKey, hostname: 'bravo', timeoutMs: JOIN_TIMEOUT_MS });
      const nodes = await admin.waitForNodes('both online', (ns) => ns.length === 2 && ns.every((n) => n.online), SYNC_TIMEOUT_MS);
      const alpha = nodes.find((n) => n.given_name === 'alpha');
      const bravo = nodes.find((n) => n.given_name === 'bravo');
      if (!alpha || !bravo) throw new Error(`expected nodes alpha and bravo, got ${nodes.map((n) => n.given_name).join(', ')}`);
      idA = alpha.id;
      idB = bravo.id;
      t.equal(alpha.online && bravo.online, true, 'nodes list shows both online');

      for (const [self, peer, dev] of [[alpha, bravo, a], [bravo, alpha, b]] as const) {
        const st = await dev.waitFor((s) => peerById(s, peer.id)?.Online === true, SYNC_TIMEOUT_MS);
        t.equal(st.BackendState, 'Running', `${self.given_name} is Running`);
        t.equal(st.Self?.ID, self.id, `${self.given_name} Self.ID is its node id`);
        t.equal(st.Self?.DNSName, `${self.given_name}.${BASE_DOMAIN}.`, `${self.given_name} own DNSName`);
        t.same(sorted(st.Self?.TailscaleIPs), sorted(self.ip_addresses), `${self.given_name} own addresses`);
        const p = peerById(st, peer.id)!;
        t.equal(p.DNSName, `${peer.given_name}.${BASE_DOMAIN}.`, `${self.given_name} sees peer name ${p.DNSName}`);
        t.same(sorted(p.TailscaleIPs), sorted(peer.ip_addresses), `${self.given_name} sees peer addresses`);
        t.equal(p.Online, true, `${self.given_name} sees the peer online`);
      }
    });

    let idC = '';
    let c: TailscaleDevice | undefined;
    await step('2. interactive join: AuthURL, then `headway nodes register`', async (t) => {
      c = await startDevice('c');
      const up = await c.up({ loginServer, hostname: 'charlie', advertiseRoutes: ['10.77.0.0/24'], advertiseExitNode: true, timeoutMs: JOIN_TIMEOUT_MS });
      const authUrl = up.authUrl ?? '';
      t.match(authUrl, new RegExp(`^${loginServer.replace(/[.]/g, '\\.')}/register/[A-Za-z0-9_-]+$`), `AuthURL ${authUrl}`);
      const regKey = authUrl.split('/').pop()!;
      const before = await c.status();
      t.not(before.BackendState, 'Running', 'not running before approval');
      const node = await admin.json<CliNode>(['nodes', 'register', '--user', 'alice', '--key', regKey]);
      idC = node.id;
      t.equal(node.given_name, 'charlie');
      const st = await c.waitFor((s) => s.BackendState === 'Running', JOIN_TIMEOUT_MS);
      t.equal(st.Self?.ID, idC, 'charlie runs as the registered node');
      const seen = await a.waitFor((s) => peerById(s, idC) !== undefined, SYNC_TIMEOUT_MS);
      t.equal(peerById(seen, idC)?.DNSName, `charlie.${BASE_DOMAIN}.`, 'alpha lists charlie');
      t.same(sorted(node.available_routes), ['0.0.0.0/0', '10.77.0.0/24', '::/0'], 'advertised routes reached the server');
    });

    await step('3. admin changes reach the other device', async (t) => {
      const renamed = await admin.json<CliNode>(['nodes', 'rename', '-i', idB, 'bravo-two']);
      t.equal(renamed.given_name, 'bravo-two', 'the server renamed bravo');
      // The wait is the failure mode: a rename that never reaches alpha times out here.
      const seen = await a.waitFor((s) => peerById(s, idB)?.DNSName === `bravo-two.${BASE_DOMAIN}.`, 10_000, 100);
      // What alpha converged to: bravo renamed in place, the same node online at the same
      // addresses, and nothing left under the old name.
      const names = Object.values(seen.Peer ?? {}).map((p) => p.DNSName ?? `(no DNSName: ${p.ID})`);
      t.same(sorted(names), sorted([`bravo-two.${BASE_DOMAIN}.`, `charlie.${BASE_DOMAIN}.`]), 'alpha lists bravo once, by its new name, beside charlie');
      t.same(sorted(peerById(seen, idB)?.TailscaleIPs), sorted(renamed.ip_addresses), 'the renamed peer keeps its addresses');
      t.equal(peerById(seen, idB)?.Online, true, 'the renamed peer is still online');
      await b.waitFor((s) => s.Self?.DNSName === `bravo-two.${BASE_DOMAIN}.`, SYNC_TIMEOUT_MS);
      t.pass('rename reached the renamed device itself');

      const tagged = await admin.json<CliNode>(['nodes', 'tag', '-i', idB, '--tags', 'tag:web,tag:db']);
      t.same(tagged.tags, ['tag:db', 'tag:web']);
      const st = await a.waitFor((s) => sorted(peerById(s, idB)?.Tags).join() === 'tag:db,tag:web', SYNC_TIMEOUT_MS);
      t.same(sorted(peerById(st, idB)?.Tags), ['tag:db', 'tag:web'], 'alpha sees the tags');

      const subnet = await admin.json<CliNode>(['nodes', 'approve-routes', '-i', idC, '--routes', '10.77.0.0/24']);
      t.same(subnet.approved_routes, ['10.77.0.0/24']);
      let pst = await a.waitFor((s) => (peerById(s, idC)?.PrimaryRoutes ?? []).includes('10.77.0.0/24'), SYNC_TIMEOUT_MS);
      t.same(peerById(pst, idC)?.PrimaryRoutes, ['10.77.0.0/24'], 'subnet is a primary route of charlie');
      t.equal(peerById(pst, idC)?.ExitNodeOption ?? false, false, 'not an exit node yet');

      const exit = await admin.json<CliNode>(['nodes', 'approve-routes', '-i', idC, '--routes', '10.77.0.0/24,0.0.0.0/0,::/0']);
      t.same(sorted(exit.approved_routes), ['0.0.0.0/0', '10.77.0.0/24', '::/0']);
      pst = await a.waitFor((s) => peerById(s, idC)?.ExitNodeOption === true, SYNC_TIMEOUT_MS);
      t.equal(peerById(pst, idC)?.ExitNodeOption, true, 'alpha can use charlie as exit node');
      t.ok((peerById(pst, idC)?.AllowedIPs ?? []).includes('0.0.0.0/0'), 'exit route in AllowedIPs');

      await admin.json<unknown>(['nodes', 'delete', '-i', idC, '--force']);
      await a.waitFor((s) => peerById(s, idC) === undefined, SYNC_TIMEOUT_MS);
      t.pass('delete removed charlie from alpha');
      t.notOk((await admin.nodes()).some((n) => n.id === idC), 'charlie gone from nodes list');
      await c!.stop();
    });

    await step('4. an ephemeral node disappears after its tailscaled stops', async (t) => {
      const { secret } = await server.state.keys.createPreAuthKey({ userId: alice.id, reusable: false, ephemeral: true });
      const e = await startDevice('e');
      await e.up({ loginServer, authKey: secret, hostname: 'echo', timeoutMs: JOIN_TIMEOUT_MS });
      const nodes = await admin.waitForNodes('echo online', (ns) => ns.some((n) => n.given_name === 'echo' && n.online), SYNC_TIMEOUT_MS);
      const echo = nodes.find((n) => n.given_name === 'echo')!;
      t.equal(echo.ephemeral, true, 'echo is ephemeral');
      await a.waitFor((s) => peerById(s, echo.id) !== undefined, SYNC_TIMEOUT_MS);
      await e.stop();
      const stopped = Date.now();
      await admin.waitForNodes('echo deleted', (ns) => !ns.some((n) => n.id === echo.id), 30_000);
      const gone = Date.now() - stopped;
      t.comment(`ephemeral node deleted ${gone} ms after tailscaled stopped (inactivity_timeout 3 s)`);
      t.ok(gone >= 2500, `not deleted before the inactivity timeout (${gone} ms)`);
      await a.waitFor((s) => peerById(s, echo.id) === undefined, SYNC_TIMEOUT_MS);
      t.pass('alpha no longer lists echo');
    });

    await step('5a. restarting tailscaled with the same state keeps the node', async (t) => {
      const before = await b.status();
      const nodeCount = (await admin.nodes()).length;
      const stateDir = b.stateDir;
      const oldDir = b.dir;
      await b.stop({ keepDir: true });
      cleanups.push(() => rmSync(oldDir, { recursive: true, force: true }));
      await a.waitFor((s) => peerById(s, idB)?.Online === false, SYNC_TIMEOUT_MS);
      t.pass('alpha sees bravo offline while its tailscaled is down');
      b = await startDevice('b2', stateDir);
      const st = await b.waitFor((s) => s.BackendState === 'Running' && s.Self?.Online === true, JOIN_TIMEOUT_MS);
      t.equal(st.Self?.ID, idB, 'same node id');
      t.same(sorted(st.Self?.TailscaleIPs), sorted(before.Self?.TailscaleIPs), 'same addresses');
      const nodes = await admin.waitForNodes('bravo online again', (ns) => byId(ns, idB).online, SYNC_TIMEOUT_MS);
      t.equal(nodes.length, nodeCount, 'no new node registered');
      await a.waitFor((s) => peerById(s, idB)?.Online === true, SYNC_TIMEOUT_MS);
      t.pass('alpha sees bravo online again');
    });

    await step('6. restarting the server: devices reconnect without registering again', async (t) => {
      const nodesBefore = await admin.nodes();
      const port = new URL(loginServer).port;
      await server.stop({ remove: false });
      server = await startTestServer({ ...baseConfig, listen_addr: `127.0.0.1:${port}`, server_url: loginServer }, { dataDir });
      admin.socket = socketOf(server);
      const t0 = Date.now();
      const nodes = await admin.waitForNodes('both online after restart', (ns) => ns.length === nodesBefore.length && byId(ns, idA).online && byId(ns, idB).online, 90_000);
      t.comment(`both devices back online ${Date.now() - t0} ms after the server restarted`);
      t.same(nodes.map((n) => n.id).sort(), nodesBefore.map((n) => n.id).sort(), 'same node ids');
      for (const n of nodesBefore) t.same(byId(nodes, n.id).ip_addresses, n.ip_addresses, `${n.given_name} keeps its addresses`);
      await b.waitFor((s) => s.BackendState === 'Running' && peerById(s, idA)?.Online === true, JOIN_TIMEOUT_MS);
      await a.waitFor((s) => s.BackendState === 'Running' && peerById(s, idB)?.Online === true, JOIN_TIMEOUT_MS);
      t.pass('each device sees the other online');

      await admin.json<CliNode>(['nodes', 'rename', '-i', idA, 'alpha-two']);
      const applied = Date.now();
      await b.waitFor((s) => peerById(s, idA)?.DNSName === `alpha-two.${BASE_DOMAIN}.`, SYNC_TIMEOUT_MS, 100);
      t.comment(`rename after restart reached bravo ${Date.now() - applied} ms after the CLI returned`);
      t.pass('a rename after the restart still propagates');
    });

    await step('5b. `tailscale logout` expires the node', async (t) => {
      await b.logout();
      const nodes = await admin.waitForNodes('bravo expired', (ns) => {
        const e = byId(ns, idB).expiry;
        return e !== null && Date.parse(e) <= Date.now();
      }, SYNC_TIMEOUT_MS);
      const expiry = byId(nodes, idB).expiry!;
      t.ok(Date.parse(expiry) <= Date.now(), `expiry ${expiry} is in the past`);
      const st = await b.waitFor((s) => s.BackendState === 'NeedsLogin', SYNC_TIMEOUT_MS);
      t.equal(st.BackendState, 'NeedsLogin', 'bravo needs a new login');
      t.ok(byId(nodes, idA).expiry === null || Date.parse(byId(nodes, idA).expiry!) > Date.now(), 'alpha is not expired');
    });
  });
}
