// SessionHub property test: random joins, deletes, tag, route, owner and policy
// changes over a small fleet. After every step, what each live session's client
// holds (built only from the incremental messages it was sent) must equal the
// full map a from-scratch Mapper and NetworkView would build for it right now.
import t, { type Test } from 'tap';
import { Mapper } from '../src/index.js';
import { NetworkView, silentLogger, TAGGED_USER_ID } from '@headway/core';
import { applyPacketFilters, concatPacketFilters, type FilterRule } from '@headway/testkit';
import { ClientModel, compiled, essentials, Fleet, POLICIES } from './fleet.js';
import { machineKey, nodeKey, Rng, seedsFromEnv } from '@headway/test-support';
import { setSharedFrameMin } from '../src/frames.js';
import { DEFAULT_FILTER_CHUNKING, setFilterChunking } from '../src/filter-chunks.js';

type Json = Record<string, unknown>;
const SELF_FIELDS = ['Key', 'Name', 'User', 'Addresses', 'AllowedIPs', 'PrimaryRoutes', 'Tags', 'KeyExpiry', 'CapMap'];

function pickSelf(n: Json): Json {
  const e = essentials(n);
  return Object.fromEntries(SELF_FIELDS.filter((f) => e[f] !== undefined).map((f) => [f, e[f]]));
}

const canon = (v: unknown) => JSON.stringify(v);

/** compare lists every way a client's netmap differs from the reference full map. */
function compare(client: ClientModel, ref: Json): string[] {
  const out: string[] = [];
  const refPeers = new Map((ref.Peers as Json[]).map((p) => [p.ID as number, p]));
  const have = [...client.peers.keys()].sort((a, b) => a - b), want = [...refPeers.keys()].sort((a, b) => a - b);
  if (canon(have) !== canon(want)) out.push(`peers ${canon(have)}, expected ${canon(want)}`);
  for (const [id, p] of refPeers) {
    const mine = client.peers.get(id);
    if (mine && canon(essentials(mine)) !== canon(essentials(p))) {
      out.push(`peer ${id}: ${canon(essentials(mine))}\n   expected ${canon(essentials(p))}`);
    }
  }
  const held = new Map<string, FilterRule[]>();
  applyPacketFilters(held, { PacketFilters: ref.PacketFilters as Record<string, FilterRule[] | null> });
  const refFilter = concatPacketFilters(held);
  if (canon(client.filter) !== canon(refFilter)) out.push(`PacketFilter ${canon(client.filter)}, expected ${canon(refFilter)}`);
  if (canon(client.ssh) !== canon(ref.SSHPolicy)) out.push(`SSHPolicy ${canon(client.ssh)}, expected ${canon(ref.SSHPolicy)}`);
  if (canon(pickSelf(client.self ?? {})) !== canon(pickSelf(ref.Node as Json))) {
    out.push(`self ${canon(pickSelf(client.self ?? {}))}\n   expected ${canon(pickSelf(ref.Node as Json))}`);
  }
  const refProfiles = new Map((ref.UserProfiles as Json[]).map((u) => [u.ID as number, u]));
  for (const [id, u] of refProfiles) {
    if (canon(client.profiles.get(id)) !== canon(u)) out.push(`profile ${id}: ${canon(client.profiles.get(id))}, expected ${canon(u)}`);
  }
  out.push(...client.problems);
  return out;
}

function frameOf(json: string): Buffer {
  const buf = Buffer.alloc(4 + Buffer.byteLength(json));
  buf.writeUInt32LE(Buffer.byteLength(json), 0);
  buf.write(json, 4);
  return buf;
}

/** sessionProblems compares every connected client with a full map made from scratch (a view of its own: shadow). */
function sessionProblems(f: Fleet, shadow: NetworkView): string[] {
  shadow.setPolicy(compiled(f.policyText));
  const ref = new Mapper(f.state, f.s.config, shadow, f.dns, f.derp);
  const problems: string[] = [];
  for (const [id, c] of f.connected) {
    const node = f.state.nodes.require(id);
    const full = JSON.parse(ref.fullMap(node, 106)) as Json;
    for (const p of compare(c.client, full)) problems.push(`session of node ${id}: ${p}`);
  }
  return problems;
}

interface RunResult { steps: number; messages: number; bytes: number; failure?: string }

async function run(t: Test, seed: number, startPolicy: number, steps: number, policyChanges: boolean): Promise<RunResult> {
  const f = await Fleet.start(t, POLICIES[startPolicy]);
  const rng = new Rng(seed);
  // The reference view is never updated incrementally: it is invalidated and asked again after every step.
  const shadow = new NetworkView(f.state, silentLogger);
  const ops: string[] = [];
  // pace decides, on a stream of its own (the ops stay the seed's), whether a step is followed by a flush, by the
  // first maps alone (begin's short timer: sessions opened while the batch is still pending), or by nothing.
  const pace = new Rng((seed ^ 0x5bd1e995) >>> 0);
  // Primary routers are sticky, so who is primary depends on when elections ran. The reference elects from scratch
  // at the very moments the live view does (a flush, a first map), under the policy the live view holds then (a
  // flush sent ahead of a policy change runs under the old one), so that both start from the same history.
  const elect = f.view.updatePrimaries.bind(f.view);
  f.view.updatePrimaries = () => {
    shadow.setPolicy(f.view.compiledPolicy);
    shadow.updatePrimaries();
    return elect();
  };
  for (let i = 0; i < steps; i++) {
    let op = await f.step(rng);
    if (!policyChanges) while (op.startsWith('policy')) {
      // Runs that keep one policy undo a switch at once (the RNG stream stays the seed's).
      f.policyText = POLICIES[startPolicy];
      f.state.bus.publish({ type: 'policy-changed' });
      op = await f.step(rng);
    }
    ops.push(op);
    const roll = pace.int(4);
    if (i < steps - 1 && roll === 0) { f.hub.openDeferredNow(); ops.push('(first maps only)'); continue; }
    if (i < steps - 1 && roll === 1) { ops.push('(batch kept pending)'); continue; }
    f.hub.flushNow();
    const problems = sessionProblems(f, shadow);
    const ref = new Mapper(f.state, f.s.config, shadow, f.dns, f.derp);
    for (const node of f.state.nodes.list()) {
      // A session opened now gets the live mapper's full map (its caches included): it must be the fresh one.
      const live = new ClientModel();
      live.apply(frameOf(f.mapper.fullMap(node, 106)));
      for (const p of compare(live, JSON.parse(ref.fullMap(node, 106)) as Json)) problems.push(`full map of node ${node.id} (live caches): ${p}`);
    }
    for (const r of f.retired) if (!r.loggedOut) problems.push('a deleted node\'s session was not told it is logged out');
    if (problems.length) {
      return {
        steps: i + 1, messages: 0, bytes: 0,
        failure: `seed ${seed} (replay: HEADWAY_TEST_SEED=${seed}), start policy ${startPolicy}, step ${i + 1}\n`
          + `last ops:\n  ${ops.slice(-15).join('\n  ')}\nproblems:\n  ${problems.slice(0, 4).join('\n  ')}`,
      };
    }
  }
  let messages = 0, bytes = 0;
  for (const c of [...f.connected.values()].map((x) => x.client).concat(f.retired)) { messages += c.messages; bytes += c.bytes; }
  return { steps, messages, bytes };
}

const SEEDS = seedsFromEnv(Number(process.env.HEADWAY_TEST_RUNS ?? 6));
const STEPS = 60;

for (const [label, startPolicy, policyChanges] of [
  ['without a policy', 0, false],
  ['with a tag/route/autoApprover policy', 2, false],
  ['with a group/self/ssh policy', 3, false],
  ['with policy changes mixed in', 1, true],
] as const) {
  t.test(`incremental map messages keep every client equal to a from-scratch full map (${label})`, async (t) => {
    let messages = 0, bytes = 0;
    for (const seed of SEEDS) {
      const r = await t.test(`seed ${seed}`, async (t) => {
        // Odd seeds cut every packet filter rule into blocks of four addresses (see filter-chunks.ts), so that a
        // small fleet's filters are sent, changed and emptied chunk by chunk.
        const was = setFilterChunking(seed % 2 ? { wholeUpTo: 0, blockBits: 2 } : DEFAULT_FILTER_CHUNKING);
        t.teardown(() => { setFilterChunking(was); });
        const res = await run(t, seed, startPolicy, STEPS, policyChanges);
        if (res.failure) {
          for (const line of res.failure.split('\n')) t.comment(line);
          t.fail(res.failure.split('\n')[0]!);
        }
        else t.pass(`${res.steps} steps`);
        messages += res.messages; bytes += res.bytes;
      });
      void r;
    }
    t.comment(`${SEEDS.length} runs x ${STEPS} steps: ${messages} messages, ${bytes} bytes to clients`);
  });
}

t.test('a packet filter update past the message-key limit reaches zstd and plain sessions intact', async (t) => {
  // A policy change resending rules with hundreds of sources sends each session a filter update of several KB:
  // its text is made only where the message needs it whole (a filter part in delta-message.ts). With small shared frames
  // a zstd session sends its blocks apart; with none shared it sends the update's text whole, as a plain one does.
  const ips = (n: number): string[] => Array.from({ length: n }, (_, i) => `10.${20 + (i >> 8)}.${(i * 7) & 255}.${i & 255}`);
  const policy = (n: number): string => JSON.stringify({ acls: [
    { action: 'accept', src: ['autogroup:member', ...ips(n)], dst: ['autogroup:member:*'] },
    { action: 'accept', src: ['tag:web', ...ips(n).slice(0, n >> 1)], dst: ['tag:db:5432'] },
  ], tagOwners: { 'tag:web': [], 'tag:db': [] } });
  for (const sharedBlocks of [true, false]) {
    const f = await Fleet.start(t, policy(150));
    if (!sharedBlocks) setSharedFrameMin(1 << 30); // Fleet.start restores it at teardown
    const users = f.users();
    for (let k = 0; k < 6; k++) {
      const tagged = k >= 4;
      const n = await f.state.nodes.create({
        machineKey: machineKey(), nodeKey: nodeKey(), hostname: `n${k}`, userId: tagged ? null : users[k % users.length]!.id,
        tags: tagged ? [k === 4 ? 'tag:web' : 'tag:db'] : [], availableRoutes: [], registerMethod: 'authkey',
      });
      f.connect(n.id);
    }
    f.hub.flushNow();
    const shadow = new NetworkView(f.state, silentLogger);
    t.same(sessionProblems(f, shadow), [], `shared blocks ${sharedBlocks}: every session holds its full map`);
    const before = new Map([...f.connected].map(([id, c]) => [id, c.client.bytes] as const));
    for (const n of [400, 90]) {
      f.policyText = policy(n);
      f.state.bus.publish({ type: 'policy-changed' });
      f.hub.flushNow();
      t.same(sessionProblems(f, shadow), [], `shared blocks ${sharedBlocks}, ${n} sources: every session holds the new filter`);
    }
    const zstd = [...f.connected].filter(([, c]) => c.client.zstd), plain = [...f.connected].filter(([, c]) => !c.client.zstd);
    t.ok(zstd.length && plain.length, 'both kinds of session');
    // The plain sessions' bytes are the messages' text: the update to 400 sources ran past the key limit.
    const members = plain.filter(([id]) => f.state.nodes.require(id).tags.length === 0);
    t.ok(members.length && members.every(([id, c]) => c.client.bytes - before.get(id)! > 2 * 2048), 'the members\' updates were long');
  }
});

t.test('a shared peer entry in a message cut around shared source blocks is compressed once per flush', async (t) => {
  // A device retagged into a rule's sources: every session whose filter holds that rule gets the rule's changed
  // blocks of sources (shared frames) and the device's new entry (530 B, below SHARED_FRAME_MIN). Compressed with
  // each session's own text it cost a compressor call per session; it goes as a frame of its own instead.
  const policy = JSON.stringify({
    tagOwners: { 'tag:web': [], 'tag:db': [] },
    acls: [{ action: 'accept', src: ['tag:web'], dst: ['alice@example.com:22'] }],
  });
  const f = await Fleet.start(t, policy);
  setSharedFrameMin(2048); // the default; Fleet.start lowered it and restores it at teardown
  const alice = f.users().find((u) => u.name === 'alice')!;
  const add = async (hostname: string, userId: number | null, tags: string[]) => {
    const n = await f.state.nodes.create({ machineKey: machineKey(), nodeKey: nodeKey(), hostname, userId, tags, availableRoutes: [], registerMethod: 'authkey' });
    f.connect(n.id);
    return n;
  };
  // Every other address a web server's, so that the rule's sources are single addresses, not one range.
  const bob = f.users().find((u) => u.name === 'bob')!;
  for (let k = 0; k < 20; k++) { await add(`web${k}`, null, ['tag:web']); await add(`phone${k}`, bob.id, []); }
  for (let k = 0; k < 6; k++) await add(`laptop${k}`, alice.id, []);
  const moved = await add('db', null, ['tag:db']);
  f.hub.flushNow();
  const shadow = new NetworkView(f.state, silentLogger);
  t.same(sessionProblems(f, shadow), [], 'every session holds its full map');
  const parts = f.hub.partFrames, segmented = f.hub.segmentedMessages;
  await f.state.nodes.setTags(moved.id, ['tag:web']);
  f.hub.flushNow();
  t.same(sessionProblems(f, shadow), [], 'every session holds the retagged device and the grown rule');
  const laptops = [...f.connected].filter(([id, c]) => c.client.zstd && f.state.nodes.require(id).userId === alice.id);
  t.ok(laptops.length >= 3, `${laptops.length} zstd sessions of alice's laptops`);
  // The first of them sends the blocks inline; every later one as frames, compressed once.
  t.ok(f.hub.segmentedMessages - segmented >= laptops.length - 1, 'their messages went out cut around the shared blocks');
  t.equal(f.hub.partFrames - parts, 1, 'the retagged device\'s entry was compressed once, for all of them');
  t.ok(laptops.every(([, c]) => (c.client.peers.get(moved.id)?.Tags as string[] | undefined)?.[0] === 'tag:web'), 'each holds the new entry');
});

t.test('sessions of one peer class given the same new peers share the list built for them', async (t) => {
  // A policy change gives alice's laptops twenty web servers as peers, and the servers the laptops: every laptop moves
  // between the same two shared peer lists, and the nodes, key and owners of its PeersChanged part are built once for
  // all of them (per session they cost a lookup and an id per new peer).
  const tagOwners = { 'tag:web': [], 'tag:db': [] };
  const before = JSON.stringify({ tagOwners, acls: [{ action: 'accept', src: ['alice@example.com'], dst: ['alice@example.com:*'] }] });
  const after = JSON.stringify({ tagOwners, acls: [
    { action: 'accept', src: ['alice@example.com'], dst: ['alice@example.com:*'] },
    { action: 'accept', src: ['alice@example.com'], dst: ['tag:web:443'] },
  ] });
  const f = await Fleet.start(t, before);
  const alice = f.users().find((u) => u.name === 'alice')!, bob = f.users().find((u) => u.name === 'bob')!;
  const add = async (hostname: string, userId: number | null, tags: string[]) => {
    const n = await f.state.nodes.create({ machineKey: machineKey(), nodeKey: nodeKey(), hostname, userId, tags, availableRoutes: [], registerMethod: 'authkey' });
    f.connect(n.id);
    return n;
  };
  const laptops = [];
  for (let k = 0; k < 8; k++) laptops.push(await add(`laptop${k}`, alice.id, []));
  for (let k = 0; k < 20; k++) await add(`web${k}`, null, ['tag:web']);
  for (let k = 0; k < 3; k++) await add(`phone${k}`, bob.id, []);
  f.hub.flushNow();
  const shadow = new NetworkView(f.state, silentLogger);
  t.same(sessionProblems(f, shadow), [], 'every session holds its full map');
  const built = f.hub.upsertLists;
  f.policyText = after;
  f.state.bus.publish({ type: 'policy-changed' });
  f.hub.flushNow();
  t.same(sessionProblems(f, shadow), [], 'every session holds its new peers, their owners and the new filter');
  for (const l of laptops) t.equal(f.connected.get(l.id)!.client.peers.size, 27, `${l.hostname}: its 7 fellow laptops and 20 web servers`);
  // One list for the laptops, one for the web servers (fellow servers' lists are their own: they do not see each other).
  t.ok(f.hub.upsertLists - built < laptops.length, `${f.hub.upsertLists - built} lists built for ${laptops.length} laptops and 20 servers`);
  t.equal(f.hub.upsertLists - built, 2, 'one per pair of shared lists');
});

t.test('a block of sources one session sends in a flush goes inline; from the second session on, as one frame', async (t) => {
  const policy = JSON.stringify({
    tagOwners: { 'tag:web': [], 'tag:db': [] },
    acls: [{ action: 'accept', src: ['tag:web'], dst: ['alice@example.com:22'] }],
  });
  for (const laptops of [1, 4]) {
    const f = await Fleet.start(t, policy);
    setSharedFrameMin(2048);
    const alice = f.users().find((u) => u.name === 'alice')!;
    const bob = f.users().find((u) => u.name === 'bob')!;
    const add = async (hostname: string, userId: number | null, tags: string[], connect = true) => {
      const n = await f.state.nodes.create({ machineKey: machineKey(), nodeKey: nodeKey(), hostname, userId, tags, availableRoutes: [], registerMethod: 'authkey' });
      if (connect) f.connect(n.id);
      return n;
    };
    for (let k = 0; k < 20; k++) { await add(`web${k}`, null, ['tag:web']); await add(`phone${k}`, bob.id, []); }
    // Every laptop on an even id: a zstd session (Fleet.connect).
    for (let k = 0; k < laptops; k++) {
      if (f.state.nodes.list().length % 2 === 0) await add(`filler${k}`, bob.id, [], false);
      await add(`laptop${k}`, alice.id, []);
    }
    const moved = await add('db', null, ['tag:db']);
    f.hub.flushNow();
    const frames = f.hub.blockFrames;
    await f.state.nodes.setTags(moved.id, ['tag:web']);
    f.hub.flushNow();
    t.same(sessionProblems(f, new NetworkView(f.state, silentLogger)), [], `${laptops} laptops: every session holds the new state`);
    if (laptops === 1) t.equal(f.hub.blockFrames - frames, 0, 'one session sends the grown rule\'s blocks: inline, none compressed apart');
    else t.ok(f.hub.blockFrames - frames > 0, `${laptops} sessions send them: frames, compressed once (${f.hub.blockFrames - frames})`);
  }
});

t.test('the owner profiles of a node list: one per owner, tagged devices and a gone user\'s devices under the tagged owner', async (t) => {
  const f = await Fleet.start(t, undefined);
  const alice = f.users().find((u) => u.name === 'alice')!, bob = f.users().find((u) => u.name === 'bob')!;
  const make = (hostname: string, userId: number | null, tags: string[]) =>
    f.state.nodes.create({ machineKey: machineKey(), nodeKey: nodeKey(), hostname, userId, tags, availableRoutes: [], registerMethod: 'authkey' });
  const nodes = [
    await make('a1', alice.id, []), await make('web', null, ['tag:web']), await make('a2', alice.id, []),
    await make('b1', bob.id, []), await make('owned-tag', bob.id, ['tag:db']),
  ];
  const gone = { ...nodes[0]!, id: 999, userId: 424242 };
  const profiles = f.mapper.profiles([...nodes, gone, nodes[2]!]);
  t.same([...profiles.keys()].sort((a, b) => a - b), [alice.id, bob.id, TAGGED_USER_ID].sort((a, b) => a - b), 'alice, bob and the tagged owner, each once');
  const [, , , b1, ownedTag] = nodes;
  t.same([...f.mapper.profiles([b1!, ownedTag!]).keys()], [bob.id, TAGGED_USER_ID], 'a tagged device of bob\'s after bob\'s own: the tagged owner too');
  t.same([...f.mapper.profiles([gone]).keys()], [TAGGED_USER_ID], 'a device whose user is gone: the tagged owner');
  // Each text is the one every node of that owner would give alone.
  for (const n of [...nodes, gone]) {
    const one = f.mapper.profile(n);
    t.equal(profiles.get(one.id), one.json, `${n.hostname}${n === gone ? ' (user gone)' : ''}: its owner's text`);
  }
});
