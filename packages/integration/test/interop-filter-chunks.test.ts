/**
 * Real-client interop for packet filters sent in chunks (MapResponse.PacketFilters, see core's filter-chunks.ts):
 * a stock tailscaled holding tag:server is sent its filter cut into one chunk per source address, then only the
 * chunks that change as members join and leave, then whole rules again when the policy changes their destinations
 * and nulls when it drops them; a rule the policy inserts before the others goes out alone, under a name that sorts
 * before theirs. What the client concatenated (`tailscale debug netmap`, PacketFilterRules) must admit exactly the
 * members' addresses on exactly the policy's port at every step. Every shared part of a message (the new peers) goes
 * out as a zstd frame of its own (setSharedFrameMin(1)): the client must decode messages of several frames.
 */
import t from 'tap';
import { setFilterChunking, setSharedFrameMin } from '@headway/control';
import { TestDevice } from '@headway/testkit';
import { startTestServer } from '../src/server.js';
import { requireTailscale, TailscaleDevice, type NetworkMapJson } from '../src/tailscale.js';
import { expandIps } from '../src/addresses.js';

interface FilterRule {
  SrcIPs?: string[];
  DstPorts?: Array<{ IP: string; Ports: { First: number; Last: number } }>;
}

const policy = (port: number | null, othersPort?: number): string => JSON.stringify({
  tagOwners: { 'tag:server': ['alice@'], 'tag:other': ['alice@'] },
  acls: port === null
    ? [{ action: 'accept', src: ['tag:server'], dst: ['autogroup:member:22'] }]
    : [
      // othersPort: a rule for the tagged devices, before the members' one.
      ...(othersPort === undefined ? [] : [{ action: 'accept', src: ['tag:other'], dst: [`tag:server:${othersPort}`] }]),
      { action: 'accept', src: ['autogroup:member'], dst: [`tag:server:${port}`] },
    ],
});

const rulesOf = (nm: NetworkMapJson | null): FilterRule[] => ((nm?.PacketFilterRules as FilterRule[] | null | undefined) ?? []);

/** admitted is what a filter admits as "source-address port-range" pairs, whatever the ranges and chunks. */
function admitted(rules: FilterRule[]): string[] {
  const out = new Set<string>();
  for (const r of rules) for (const src of expandIps(r.SrcIPs ?? [])) for (const d of r.DstPorts ?? []) out.add(`${src} ${d.Ports.First}-${d.Ports.Last}`);
  return [...out].sort();
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

const installed = requireTailscale(t);
for (const binaries of installed) {
  t.test(binaries.version, async (t) => {
    // One chunk per source address: every join and leave changes chunks of its own, and no rule stays whole.
    const was = setFilterChunking({ wholeUpTo: 0, blockBits: 0 });
    const wasFrameMin = setSharedFrameMin(1);
    const s = await startTestServer({ policy: { mode: 'database' }, derp: { server: { enabled: true, stun_listen_addr: '127.0.0.1:0' } } });
    const virtual: TestDevice[] = [];
    let srv: TailscaleDevice | undefined;
    let late: TailscaleDevice | undefined;
    t.teardown(async () => {
      for (const d of virtual) await d.close().catch(() => undefined);
      await srv?.stop().catch(() => undefined);
      await late?.stop().catch(() => undefined);
      await s.stop();
      setFilterChunking(was);
      setSharedFrameMin(wasFrameMin);
    });
    await s.policy.set(policy(22));
    const alice = await s.state.users.create({ name: 'alice' });
    const memberKey = (await s.state.keys.createPreAuthKey({ userId: alice.id, reusable: true })).secret;
    const otherKey = (await s.state.keys.createPreAuthKey({ userId: alice.id, reusable: true, tags: ['tag:other'] })).secret;
    const serverKey = (await s.state.keys.createPreAuthKey({ userId: alice.id, reusable: true, tags: ['tag:server'] })).secret;

    srv = await TailscaleDevice.start({ name: `chunks${binaries.version.replace(/\W/g, '')}`, version: binaries.version });
    await srv.up({ loginServer: s.urls.http, authKey: serverKey, hostname: 'srv', timeoutMs: 60_000 });
    // A client that cannot decode a message drops its map stream and opens another, whose full map (one frame) would
    // hide the failure: count the streams the server opens for srv from here on.
    const srvId = s.state.nodes.list().find((n) => n.hostname === 'srv')!.id;
    let reopened = 0;
    const opened = s.state.presence.sessionOpened.bind(s.state.presence);
    s.state.presence.sessionOpened = (id: number): void => { if (id === srvId) reopened++; opened(id); };
    // Members alternate with tagged devices, so that their addresses are not one range: each is a chunk of its own.
    const join = async (n: number): Promise<void> => {
      for (let i = 0; i < 2 * n; i++) {
        const d = new TestDevice({ serverUrl: s.urls.http, hostname: `dev-${virtual.length}` });
        await d.connect();
        const r = await d.register({ authKey: i % 2 ? otherKey : memberKey });
        if (r.Error) throw new Error(`register: ${r.Error}`);
        await d.startMap({ stream: true });
        virtual.push(d);
      }
    };
    /** expected is every member device's addresses on `port` (and the tag:other devices' on othersPort), as the server holds them. */
    const expected = (port: number | null, othersPort?: number): string[] => port === null ? [] : s.state.nodes.list()
      .flatMap((n) => {
        const p = n.tags.includes('tag:other') ? othersPort : n.tags.length ? undefined : port;
        return p === undefined ? [] : [n.ipv4, n.ipv6].filter((a): a is string => !!a).map((a) => `${a} ${p}-${p}`);
      })
      .sort();
    const settle = async (port: number | null, what: string, othersPort?: number): Promise<FilterRule[]> => {
      const want = expected(port, othersPort);
      const deadline = Date.now() + 20_000;
      let rules: FilterRule[] = [];
      for (;;) {
        rules = rulesOf(await srv!.netmap().catch(() => null));
        if (JSON.stringify(admitted(rules)) === JSON.stringify(want)) break;
        if (Date.now() > deadline) break;
        await sleep(100);
      }
      t.same(admitted(rules), want, `${what}: the client's filter admits exactly the members on ${port === null ? 'nothing' : `port ${port}`}`);
      return rules;
    };

    await join(6);
    const first = await settle(22, 'six members joined');
    const members = s.state.nodes.list().filter((n) => !n.tags.length).map((n) => n.nodeKey).sort();
    const peerKeys = async (): Promise<string[]> => (((await srv!.netmap())?.Peers as Array<{ Key?: string }> | null | undefined) ?? [])
      .map((p) => p.Key ?? '').sort();
    let held: string[] = [];
    for (const deadline = Date.now() + 20_000; Date.now() < deadline; await sleep(100)) {
      held = await peerKeys().catch(() => []);
      if (members.every((k) => held.includes(k))) break;
    }
    t.ok(members.every((k) => held.includes(k)), `the client holds every member as a peer (new peers came as frames of their own; ${held.length} peers)`);
    t.ok(first.length >= 12, `the filter arrived in chunks the client concatenated (${first.length} rules)`);
    const matches = (await srv.netmap())?.PacketFilter as unknown[] | null | undefined;
    t.ok((matches ?? []).length >= first.length, 'and parsed into as many matches');

    // Two members (even positions: see join).
    for (const d of [virtual[2]!, virtual[6]!]) {
      virtual.splice(virtual.indexOf(d), 1);
      const node = s.state.nodes.byNodeKey(d.nodeKeyText)!;
      await d.close();
      await s.state.nodes.delete(node.id);
    }
    await settle(22, 'two members deleted');
    await join(3);
    await settle(22, 'three more joined');

    await s.policy.set(policy(443));
    const moved = await settle(443, 'the policy moved the rule to port 443');
    t.notOk(moved.some((r) => (r.DstPorts ?? []).some((d) => d.Ports.First === 22)), 'no chunk for port 22 is left behind');
    await s.policy.set(policy(443, 80));
    const inserted = await settle(443, 'a rule for tag:other inserted before the members\' one', 80);
    t.same(inserted.map((r) => r.DstPorts?.[0]?.Ports.First).filter((p, i, all) => p !== all[i - 1]), [80, 443], 'the client sorted the new rule\'s chunks before the others');
    await s.policy.set(policy(443));
    await settle(443, 'the inserted rule removed');
    await s.policy.set(policy(null));
    await settle(null, 'the policy no longer lets members reach the server');
    t.equal(reopened, 0, 'srv kept its first map stream throughout: it decoded every message of several frames');

    // A device joining now gets a full map whose peers are a block frame of their own (setSharedFrameMin(1)), between
    // frames of its own text (see Mapper.fullMapMessage).
    late = await TailscaleDevice.start({ name: `chunkslate${binaries.version.replace(/\W/g, '')}`, version: binaries.version });
    await late.up({ loginServer: s.urls.http, authKey: serverKey, hostname: 'late', timeoutMs: 60_000 });
    const lateId = s.state.nodes.list().find((n) => n.hostname === 'late')!.id;
    let lateStreams = 0;
    const counted = s.state.presence.sessionOpened;
    s.state.presence.sessionOpened = (id: number): void => { if (id === lateId) lateStreams++; counted(id); };
    const nowMembers = s.state.nodes.list().filter((n) => !n.tags.length).map((n) => n.nodeKey).sort();
    let lateHeld: string[] = [];
    for (const deadline = Date.now() + 20_000; Date.now() < deadline; await sleep(100)) {
      lateHeld = (((await late.netmap().catch(() => null))?.Peers as Array<{ Key?: string }> | null | undefined) ?? []).map((p) => p.Key ?? '').sort();
      if (nowMembers.every((k) => lateHeld.includes(k))) break;
    }
    t.ok(nowMembers.length >= 6 && nowMembers.every((k) => lateHeld.includes(k)), `a device joining last holds every member from its first map, sent in block frames (${lateHeld.length} peers)`);
    await sleep(1000);
    t.equal(lateStreams, 0, 'and kept that map stream: it decoded the full map of several frames');
  });
}
