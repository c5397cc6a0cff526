import t from 'tap';
import { applyMapResponse, emptyNetMap, PlanRng, type MapResponse, type NetMap, type Node } from '@headway/testkit';
import { CompactPeers, PeerDirectory } from '../src/bench-compact.js';
import { peersMatch, type Wanted } from '../src/bench-match.js';

// Plan devices 0..39 hold keys nodekey:0..39 and ids 1..40; id 41 is no plan device; id 42 now and then claims a
// plan device's key that another id holds.
const PLAN = 40;
const keyOf = (i: number): string => `nodekey:${i}`;
const STRANGER = 'nodekey:stranger';
const indexOfKey = (key: string): number | undefined => {
  const m = /^nodekey:(\d+)$/.exec(key);
  return m && Number(m[1]) < PLAN ? Number(m[1]) : undefined;
};
const byKey = (p: Node): number | undefined => indexOfKey(p.Key ?? '');
const node = (id: number, name = 'n', key = id <= PLAN ? keyOf(id - 1) : STRANGER): Node => ({ ID: id, Key: key, Name: name, Tags: [`tag:${name}`] });

/** directory pairs ids 1..40 with their keys first, as a worker's devices see them (id 42 is the impostor). */
function directory(): PeerDirectory {
  const dir = new PeerDirectory(PLAN);
  dir.reset(indexOfKey);
  for (let i = 0; i < PLAN; i++) dir.paired(i + 1, keyOf(i));
  return dir;
}

function wanted(rng: PlanRng): Wanted {
  const bits = new Uint32Array(2);
  let size = 0;
  for (let i = 0; i < PLAN; i++) if (rng.chance(0.4)) { bits[i >>> 5]! |= 1 << (i & 31); size++; }
  return { bits, size };
}

const exactPeers = (want: Wanted): Node[] => [...Array(PLAN).keys()].filter((i) => (want.bits[i >>> 5]! & (1 << (i & 31))) !== 0).map((i) => node(i + 1));

/** message is a random delta of every kind netmap.ts applies, with key patches and a full map now and then. */
function message(rng: PlanRng, held: readonly number[]): MapResponse {
  const ids = (n: number): number[] => Array.from({ length: n }, () => 1 + rng.int(42));
  const someKey = (): string => rng.chance(0.3) ? STRANGER : keyOf(rng.int(PLAN));
  const peer = (id: number): Node => node(id, `r${rng.int(9)}`, id === 42 ? someKey() : undefined);
  switch (rng.int(8)) {
    case 0: return { Peers: ids(rng.int(30)).map(peer) };
    case 1: return { PeersRemoved: [...ids(rng.int(4)), ...(held.length ? [rng.pick(held)] : [])] };
    case 2: return { PeersChanged: ids(1 + rng.int(4)).map(peer) };
    case 3: return { PeersRemoved: ids(2), PeersChanged: ids(2).map(peer) };
    case 4: return { PeersChangedPatch: ids(3).map((id) => ({ NodeID: id, Online: rng.chance(0.5) })), OnlineChange: { [String(1 + rng.int(42))]: true } };
    // A peer's key changes (to a stranger's or another device's), and back to its own by a later change.
    case 5: return { PeersChangedPatch: [{ NodeID: held.length ? rng.pick(held) : 1, Key: someKey() }] };
    case 6: return { Peers: [], PeersChanged: [peer(1 + rng.int(42))] };
    default: return { PeerSeenChange: { [String(1 + rng.int(42))]: true } };
  }
}

/** canonical: every peer of the full map holds its own plan device's key under its own id. */
const canonical = (nm: NetMap): boolean => [...nm.peers.values()].every((p) => p.ID <= PLAN && p.Key === keyOf(p.ID - 1));

t.test('random message runs leave the compact peer map holding what the full decoder holds, and both checks agree with a scan', async (t) => {
  let matched = 0, checks = 0, strict = 0;
  for (const seed of [1, 2, 3, 7, 11, 42, 99, 2026]) {
    const rng = new PlanRng(seed);
    const full = emptyNetMap();
    const peers = new CompactPeers(directory());
    const compact = emptyNetMap(peers);
    let want = wanted(rng);
    peers.watch(want);
    for (let step = 0; step < 500; step++) {
      if (rng.chance(0.05)) { want = wanted(rng); peers.watch(want); }
      // Now and then the message makes the peers exactly the wanted ones, so both answers are seen.
      const msg = rng.chance(0.1) ? { Peers: exactPeers(want) } : message(rng, [...full.peers.keys()]);
      applyMapResponse(full, msg);
      applyMapResponse(compact, msg);
      const ids = [...full.peers.keys()].sort((a, b) => a - b);
      const where = `seed ${seed}, step ${step}, after ${JSON.stringify(msg)}`;
      if (JSON.stringify([...peers.keys()].sort((a, b) => a - b)) !== JSON.stringify(ids) || peers.size !== ids.length) {
        t.fail(`${where}: compact ids ${[...peers.keys()]}, full ${ids}`);
        return;
      }
      for (const id of ids) {
        if (peers.get(id)?.Key !== full.peers.get(id)!.Key || !peers.has(id)) { t.fail(`${where}: peer ${id}'s key differs`); return; }
      }
      const scan = peersMatch(full.peers, want, byKey);
      checks++;
      if (scan) matched++;
      // Both compact checks are the scan's answer when every peer is under its own id, and stricter otherwise.
      const counted = peers.matches(), exact = peers.exactly(want);
      if (canonical(full) ? counted !== scan : counted) { t.fail(`${where}: counted ${counted}, scan ${scan}`); return; }
      if (canonical(full) ? exact !== scan : exact) { t.fail(`${where}: exactly ${exact}, scan ${scan}`); return; }
      if (!canonical(full)) strict++;
    }
  }
  t.ok(matched > 20, `the runs reach a match (${matched} of ${checks} checks)`);
  t.ok(checks - matched > 20, 'and a mismatch');
  t.ok(strict > 20, `and peers under another id's key (${strict} checks)`);
});

t.test('a wrong peer set fails both the counted and the full check', async (t) => {
  const rng = new PlanRng(5);
  const want = wanted(rng);
  const right = exactPeers(want);
  const unwanted = [...Array(PLAN).keys()].find((i) => (want.bits[i >>> 5]! & (1 << (i & 31))) === 0)!;
  const cases: Array<[string, Node[]]> = [
    ['missing a peer', right.slice(1)],
    ['an extra peer', [...right, node(unwanted + 1)]],
    ['a peer of no plan device', [...right, node(41)]],
    ['one peer swapped for an unwanted one (same size)', [...right.slice(1), node(unwanted + 1)]],
  ];
  for (const [what, list] of [['the expected peers', right] as [string, Node[]], ...cases]) {
    const peers = new CompactPeers(directory());
    const nm = emptyNetMap(peers);
    applyMapResponse(nm, { Peers: right });
    peers.watch(want);
    applyMapResponse(nm, { Peers: list });
    const good = list === right;
    t.equal(peers.matches(), good, `${what}: counted`);
    t.equal(peers.exactly(want), good, `${what}: full check`);
    t.equal(peersMatch(nm.peers, want, byKey), good, `${what}: scan`);
  }
  // The scan knows peers by key alone; the compact checks also want each under the id it was first seen with.
  const peers = new CompactPeers(directory());
  const nm = emptyNetMap(peers);
  applyMapResponse(nm, { Peers: right });
  peers.watch(want);
  applyMapResponse(nm, { Peers: [...right.slice(1), node(42, 'n', right[0]!.Key)] });
  t.notOk(peers.matches() || peers.exactly(want), 'a wanted key under another id: neither compact check');
  const none = new CompactPeers(directory());
  t.notOk(none.matches(), 'nothing watched never matches');
  none.watch({ bits: new Uint32Array(2), size: 0 });
  t.ok(none.matches() && none.exactly({ bits: new Uint32Array(2), size: 0 }), 'an empty want matches an empty map');
  t.notOk(none.delete(1), 'deleting an absent peer reports it');
});

t.test('a followed peer is kept whole, the others as their id and key', async (t) => {
  const dir = directory();
  const peers = new CompactPeers(dir);
  const nm = emptyNetMap(peers);
  applyMapResponse(nm, { Peers: [node(1), node(2)] });
  dir.followed.add(2);
  applyMapResponse(nm, { PeersChanged: [node(1, 'a'), node(2, 'b')] });
  t.same(peers.get(1), { ID: 1, Key: keyOf(0) }, 'not followed: its id and key');
  t.equal(peers.get(2)?.Name, 'b');
  t.same(peers.get(2)?.Tags, ['tag:b']);
  applyMapResponse(nm, { PeersRemoved: [2] });
  t.equal(peers.get(2), undefined);
  t.same([...peers.entries()], [[1, { ID: 1, Key: keyOf(0) }]]);
});
