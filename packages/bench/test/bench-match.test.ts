import t from 'tap';
import { applyMapResponse, emptyNetMap, PlanRng, type MapResponse, type Node } from '@headway/testkit';
import { MatchingPeers, peersMatch, type Wanted } from '../src/bench-match.js';

// Peers 1..40 are plan devices 0..39 (by node key); id 41 holds a key of no plan device.
const KEYS = Array.from({ length: 41 }, (_, i) => `nodekey:${i}`);
const indexOf = (p: Node): number | undefined => {
  const i = KEYS.indexOf(p.Key ?? '');
  return i >= 0 && i < 40 ? i : undefined;
};
const node = (id: number, name = 'n'): Node => ({ ID: id, Key: KEYS[id - 1], Name: name });

function wanted(rng: PlanRng): Wanted {
  const bits = new Uint32Array(2);
  let size = 0;
  for (let i = 0; i < 40; i++) if (rng.chance(0.4)) { bits[i >>> 5]! |= 1 << (i & 31); size++; }
  return { bits, size };
}

function message(rng: PlanRng, held: readonly number[]): MapResponse {
  const ids = (n: number): number[] => Array.from({ length: n }, () => 1 + rng.int(41));
  switch (rng.int(6)) {
    case 0: return { Peers: ids(rng.int(30)).map((id) => node(id)) };
    case 1: return { PeersRemoved: [...ids(rng.int(4)), ...(held.length ? [rng.pick(held)] : [])] };
    case 2: return { PeersChanged: ids(1 + rng.int(4)).map((id) => node(id, `r${rng.int(9)}`)) };
    case 3: return { PeersRemoved: ids(2), PeersChanged: ids(2).map((id) => node(id)) };
    case 4: return { PeersChangedPatch: ids(3).map((id) => ({ NodeID: id, Online: rng.chance(0.5) })), OnlineChange: { [String(1 + rng.int(41))]: true } };
    default: return { PeerSeenChange: { [String(1 + rng.int(41))]: true } };
  }
}

t.test('the counted match equals a scan of every peer after every message, for random message runs', async (t) => {
  let agreedTrue = 0;
  let checks = 0;
  for (const seed of [1, 2, 3, 7, 11, 42, 99, 2026]) {
    const rng = new PlanRng(seed);
    const peers = new MatchingPeers(indexOf);
    const nm = emptyNetMap(peers);
    t.equal(nm.peers, peers, 'the netmap edits the peer map it was given');
    let want = wanted(rng);
    peers.watch(want);
    for (let step = 0; step < 400; step++) {
      if (rng.chance(0.05)) { want = wanted(rng); peers.watch(want); }
      // Now and then the message makes the peers exactly the wanted ones, so both answers are seen.
      const msg = rng.chance(0.1)
        ? { Peers: [...Array(40).keys()].filter((i) => (want.bits[i >>> 5]! & (1 << (i & 31))) !== 0).map((i) => node(i + 1)) }
        : message(rng, [...peers.keys()]);
      applyMapResponse(nm, msg);
      const scan = peersMatch(nm.peers, want, indexOf);
      checks++;
      if (scan) agreedTrue++;
      if (peers.matches() !== scan) {
        t.fail(`seed ${seed}, step ${step}: counted ${peers.matches()}, scan ${scan}, after ${JSON.stringify(msg)}`);
        return;
      }
    }
  }
  t.ok(agreedTrue > 20, `the runs reach a match (${agreedTrue} of ${checks} checks)`);
  t.ok(checks - agreedTrue > 20, 'and a mismatch');
});

t.test('nothing watched never matches; an empty want matches an empty map', async (t) => {
  const peers = new MatchingPeers(indexOf);
  t.notOk(peers.matches());
  peers.watch({ bits: new Uint32Array(2), size: 0 });
  t.ok(peers.matches());
  peers.set(1, node(1));
  t.notOk(peers.matches(), 'an unwanted peer');
  t.ok(peers.delete(1));
  t.notOk(peers.delete(1), 'deleting an absent peer reports it');
  t.ok(peers.matches());
  peers.set(41, node(41));
  t.notOk(peers.matches(), 'a peer of no plan device is never wanted');
});
