/**
 * Real-client interop for policy: stock tailscaled clients (every installed
 * version) join a Headway server and the test checks what the policy compiles
 * to inside each client's own network map (`tailscale debug netmap`): the
 * packet filter, the peer list, live policy changes made with the admin CLI,
 * and the Taildrive node attributes and capability grant.
 */
import t from 'tap';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startTestServer, type TestServer } from '../src/server.js';
import { runHeadwayOn } from '../src/cli.js';
import { requireTailscale, TailscaleDevice, type NetworkMapJson } from '../src/tailscale.js';
import { expandIps } from '../src/addresses.js';

const CLI = fileURLToPath(new URL('../../../cli/bin/run.js', import.meta.url));
const DRIVE_CAP = 'tailscale.com/cap/drive';
const DRIVE_SHARER_CAP = 'tailscale.com/cap/drive-sharer';

/** FilterRule is tailcfg.FilterRule as the client prints it in PacketFilterRules. */
interface FilterRule {
  SrcIPs?: string[];
  DstPorts?: Array<{ IP: string; Ports: { First: number; Last: number } }>;
  CapGrant?: Array<{ Dsts?: string[]; CapMap?: Record<string, unknown[] | null> }>;
}

interface NodeJson {
  Name?: string;
  Addresses?: string[];
  CapMap?: Record<string, unknown> | null;
}

/** basePolicy lets only group:admins (alice) reach tag:server on port 22 and sets up Taildrive alice -> server. */
function basePolicy(extraAdminSources: string[] = []): Record<string, unknown> {
  return {
    groups: { 'group:admins': ['alice@'] },
    tagOwners: { 'tag:server': ['group:admins'] },
    acls: [{ action: 'accept', src: ['group:admins', ...extraAdminSources], dst: ['tag:server:22'] }],
    nodeAttrs: [
      { target: ['tag:server'], attr: ['drive:share'] },
      { target: ['alice@'], attr: ['drive:access'] },
    ],
    grants: [{ src: ['alice@'], dst: ['tag:server'], app: { [DRIVE_CAP]: [{ shares: ['*'], access: 'rw' }] } }],
  };
}

/** runCli runs the admin CLI against the test server's socket (see runHeadwayOn). */
const runCli = (s: TestServer, args: string[]) => runHeadwayOn(s, args, 30_000);

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** waitNetmap polls `tailscale debug netmap` until check holds; the timeout error shows the last map's relevant parts. */
function waitNetmap(d: TailscaleDevice, check: (nm: NetworkMapJson) => boolean, timeoutMs: number, intervalMs = 100): Promise<NetworkMapJson> {
  return d.waitNetmap(check, { timeoutMs, intervalMs, brief: (nm) => ({ Peers: peerNames(nm), PacketFilterRules: rules(nm), SelfCapMap: self(nm).CapMap }) });
}

function self(nm: NetworkMapJson): NodeJson {
  return (nm.SelfNode ?? {}) as NodeJson;
}

/** rules are the filter rules the client received (PacketFilterRules; null when empty). */
function rules(nm: NetworkMapJson): FilterRule[] {
  return ((nm.PacketFilterRules as FilterRule[] | null | undefined) ?? []);
}

/** portRules are the rules without capability grants: the ones that admit packets. */
function portRules(nm: NetworkMapJson): FilterRule[] {
  return rules(nm).filter((r) => (r.CapGrant ?? []).length === 0);
}

function peerNames(nm: NetworkMapJson): string[] {
  return (nm.Peers ?? []).map((p) => String((p as NodeJson).Name ?? '').split('.')[0]!).sort();
}

/** bareIps turns netmap addresses ("100.64.0.1/32") into the bare form SrcIPs uses. */
function bareIps(n: NodeJson): string[] {
  return (n.Addresses ?? []).map((a) => a.replace(/\/(32|128)$/, '')).sort();
}

/** childPids lists the direct children of a process (all its threads' /proc children lists). */
function childPids(pid: number): number[] {
  const out: number[] = [];
  let tids: string[];
  try {
    tids = readdirSync(`/proc/${pid}/task`);
  } catch {
    return out;
  }
  for (const tid of tids) {
    try {
      out.push(...readFileSync(`/proc/${pid}/task/${tid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number));
    } catch {
      // The thread ended while scanning.
    }
  }
  return out;
}

/** descendantPids lists every process below pid, children first found first. */
function descendantPids(pid: number): number[] {
  const out: number[] = [];
  const queue = [pid];
  while (queue.length > 0) {
    for (const child of childPids(queue.shift()!)) {
      out.push(child);
      queue.push(child);
    }
  }
  return out;
}

/**
 * stopDevice stops a device and then kills what its tailscaled had spawned:
 * the Taildrive file server (`su root -c tailscaled serve-taildrive ...`
 * when running as root) outlives a SIGTERMed daemon, and no process may
 * survive the test.
 */
async function stopDevice(d: TailscaleDevice): Promise<void> {
  const children = d.pid !== undefined ? descendantPids(d.pid) : [];
  await d.stop().catch(() => undefined);
  for (const pid of children) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // Already gone.
    }
  }
}

const installed = requireTailscale(t);
for (const binaries of installed) {
  t.test(binaries.version, async (t) => {
    // The embedded relay is needed even on one machine: a client reports Running only once it
    // has a live DERP connection or a live peer, and bob has no peers under the first policy.
    const s = await startTestServer({ policy: { mode: 'database' }, derp: { server: { enabled: true, stun_listen_addr: '127.0.0.1:0' } } });
    const devices: TailscaleDevice[] = [];
    const dir = mkdtempSync(join(tmpdir(), 'hw-policy-'));
    t.teardown(async () => {
      for (const d of devices) await stopDevice(d);
      await s.stop();
      rmSync(dir, { recursive: true, force: true });
    });
    await s.policy.set(JSON.stringify(basePolicy()));
    const alice = await s.state.users.create({ name: 'alice' });
    const bob = await s.state.users.create({ name: 'bob' });
    const aliceKey = (await s.state.keys.createPreAuthKey({ userId: alice.id, reusable: true })).secret;
    const bobKey = (await s.state.keys.createPreAuthKey({ userId: bob.id, reusable: true })).secret;
    const serverKey = (await s.state.keys.createPreAuthKey({ userId: alice.id, reusable: true, tags: ['tag:server'] })).secret;

    const tag = binaries.version.replace(/\W/g, '');
    const start = async (name: string, key: string): Promise<TailscaleDevice> => {
      const d = await TailscaleDevice.start({ name: `${name}${tag}`, version: binaries.version });
      devices.push(d);
      await d.up({ loginServer: s.urls.http, authKey: key, hostname: name, timeoutMs: 60_000 });
      return d;
    };
    const [aliceDev, bobDev, srvDev] = await Promise.all([start('alice-dev', aliceKey), start('bob-dev', bobKey), start('srv', serverKey)]);

    // The clients' own view of themselves gives the addresses the filter must use.
    const aliceNm0 = await waitNetmap(aliceDev, (nm) => peerNames(nm).includes('srv'), 20_000);
    const srvNm0 = await waitNetmap(srvDev, (nm) => peerNames(nm).includes('alice-dev'), 20_000);
    const bobNm0 = await waitNetmap(bobDev, () => true, 20_000);
    const aliceIps = bareIps(self(aliceNm0));
    const bobIps = bareIps(self(bobNm0));
    const srvIps = bareIps(self(srvNm0));
    t.equal(aliceIps.length, 2, 'alice has an IPv4 and an IPv6 address');
    const srvNode = s.state.nodes.list().find((n) => n.hostname === 'srv');
    t.same(srvNode?.tags, ['tag:server'], 'the server device carries tag:server from its key');

    await t.test('only group:admins reaches tag:server:22; peers follow the policy', async (t) => {
      const srvNm = await srvDev.netmap();
      t.ok(srvNm, 'server has a netmap');
      const filter = portRules(srvNm!);
      t.equal(filter.length, 1, 'one port rule on the server');
      t.same(expandIps(filter[0]?.SrcIPs ?? []), aliceIps, "SrcIPs are exactly alice's device addresses");
      t.same(
        (filter[0]?.DstPorts ?? []).map((p) => `${p.IP}:${p.Ports.First}-${p.Ports.Last}`).sort(),
        srvIps.map((ip) => `${ip}:22-22`).sort(),
        'DstPorts are port 22 on the server addresses only',
      );
      // The client-side compiled matcher (filter.Match) agrees when the client prints it.
      const matches = (srvNm!.PacketFilter as Array<{ Srcs?: string[]; Dsts?: Array<{ Ports: { First: number; Last: number } }> }> | null) ?? [];
      if (matches.length > 0) {
        const portMatches = matches.filter((m) => (m.Dsts ?? []).length > 0);
        t.ok(portMatches.every((m) => (m.Dsts ?? []).every((d) => d.Ports.First === 22 && d.Ports.Last === 22)), 'client matcher only admits port 22');
      }

      t.same(peerNames(srvNm!), ['alice-dev'], 'server sees only alice (bob may not reach it)');
      const aliceNm = (await aliceDev.netmap())!;
      t.same(peerNames(aliceNm), ['srv'], 'alice sees only the server');
      t.same(portRules(aliceNm), [], 'nothing may open connections to alice');
      const bobNm = (await bobDev.netmap())!;
      t.same(peerNames(bobNm), [], 'bob has no peers: he reaches nobody and nobody reaches him');
      t.same(rules(bobNm), [], 'bob has an empty filter');
      const bobStatus = await bobDev.status();
      t.same(Object.keys(bobStatus.Peer ?? {}), [], 'tailscale status on bob lists no peers');
      // bob's device has no route to the server at all.
      const ping = await bobDev.cli(['ping', '--c=1', '--timeout=2s', srvIps.find((ip) => ip.includes('.'))!]);
      t.not(ping.code, 0, 'bob cannot ping the server');
    });

    await t.test('Taildrive: node attributes, capability grant and a share', async (t) => {
      const srvNm = (await srvDev.netmap())!;
      const aliceNm = (await aliceDev.netmap())!;
      t.ok(Object.hasOwn(self(aliceNm).CapMap ?? {}, 'drive:access'), "alice's self CapMap has drive:access");
      t.notOk(Object.hasOwn(self(aliceNm).CapMap ?? {}, 'drive:share'), 'alice may not share');
      t.ok(Object.hasOwn(self(srvNm).CapMap ?? {}, 'drive:share'), "the server's self CapMap has drive:share");
      t.ok(((srvNm.AllCaps as string[] | undefined) ?? []).includes('drive:share'), 'AllCaps lists drive:share');

      const grants = rules(srvNm).filter((r) => (r.CapGrant ?? []).length > 0);
      t.equal(grants.length, 1, 'one capability grant on the sharer');
      t.same(expandIps(grants[0]?.SrcIPs ?? []), aliceIps, 'granted to alice');
      const grant = grants[0]?.CapGrant?.[0];
      t.same([...(grant?.Dsts ?? [])].sort(), srvIps.map((ip) => (ip.includes(':') ? `${ip}/128` : `${ip}/32`)).sort(), 'on the server addresses');
      t.same(grant?.CapMap?.[DRIVE_CAP], [{ shares: ['*'], access: 'rw' }], 'drive capability with shares * and rw access');

      // The companion capability lets the sharer's file server talk back to the accessor.
      const back = rules(aliceNm).filter((r) => (r.CapGrant ?? []).some((g) => g.CapMap && DRIVE_SHARER_CAP in g.CapMap));
      t.equal(back.length, 1, 'alice has the drive-sharer grant from the server');
      t.same(expandIps(back[0]?.SrcIPs ?? []), srvIps, 'drive-sharer comes from the server');

      const shareDir = mkdtempSync(join(dir, 'share-'));
      writeFileSync(join(shareDir, 'hello.txt'), 'hi\n');
      const share = await srvDev.cli(['drive', 'share', 'docs', shareDir]);
      t.equal(share.code, 0, `tailscale drive share succeeds on the sharer (${(share.stderr || share.stdout).trim()})`);
      const list = await srvDev.cli(['drive', 'list']);
      t.match(list.stdout, new RegExp(`^docs\\s+${shareDir.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}\\s`, 'm'), 'tailscale drive list shows the share');
      // Without drive:share the client itself refuses to share.
      const refused = await aliceDev.cli(['drive', 'share', 'docs', shareDir]);
      t.not(refused.code, 0, `alice (no drive:share) cannot share: ${(refused.stderr || refused.stdout).trim()}`);
    });

    await t.test('headway policy set --file changes the netmaps live', async (t) => {
      const file = join(dir, 'policy.hujson');
      writeFileSync(file, `// bob joins the admins' access to the server\n${JSON.stringify(basePolicy(['bob@']), null, 2)}\n`);
      const began = Date.now();
      const set = await runCli(s, ['policy', 'set', '--file', file, '-o', 'json']);
      const cliDone = Date.now();
      t.equal(set.code, 0, `headway policy set exits 0 ${set.stderr.trim()}`);
      t.match(JSON.parse(set.stdout) as unknown, { policy: /bob@/ }, 'the CLI echoes the stored policy');

      const wanted = [...aliceIps, ...bobIps].sort();
      const srvNm = await waitNetmap(srvDev, (nm) => JSON.stringify(expandIps(portRules(nm)[0]?.SrcIPs ?? [])) === JSON.stringify(wanted), 10_000, 50);
      const srvMs = Date.now() - cliDone;
      const bobNm = await waitNetmap(bobDev, (nm) => peerNames(nm).includes('srv'), 10_000, 50);
      const bobMs = Date.now() - cliDone;
      t.comment(`${binaries.version}: policy set CLI took ${cliDone - began} ms; server filter updated ${srvMs} ms and bob's peer list ${bobMs} ms after the CLI returned (polling \`tailscale debug netmap\`)`);
      t.ok(srvMs <= 10_000 && bobMs <= 10_000, 'propagated within 10 s');
      t.same(peerNames(srvNm), ['alice-dev', 'bob-dev'], 'server now sees bob too');
      t.same(peerNames(bobNm), ['srv'], 'bob now sees the server');
      t.same(portRules(srvNm)[0]?.DstPorts?.map((p) => p.Ports.First), srvIps.map(() => 22), 'still port 22 only');

      // A broken file is refused and the live policy stays as it was.
      writeFileSync(file, '{ "acls": [ { "action": "accept", "src": ["nobody@"], } ');
      const bad = await runCli(s, ['policy', 'set', '--file', file, '-o', 'json']);
      t.not(bad.code, 0, 'an invalid policy is refused');
      await sleep(500);
      t.same(peerNames((await bobDev.netmap())!), ['srv'], "bob's view is unchanged after the refused policy");
    });
  });
}
