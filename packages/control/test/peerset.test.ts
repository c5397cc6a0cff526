// PeerSet (the ids a map session last sent its client) must behave exactly like a Set of node ids for the
// operations SessionHub uses, while taking a few bytes per peer instead of a hash Set's ~20.
import t from 'tap';
import { ListDiffs, PeerSet } from '../src/peerset.js';
import { MapSession } from '../src/map-session.js';
import { FakeClock } from './fake-clock.js';
import { wireBytes } from '../src/frames.js';
import { Rng } from '@headway/test-support';

t.test('PeerSet equals a Set over random adds, deletes and rebuilds (fixed seeds)', async (t) => {
  for (const seed of [1, 2, 3, 42, 1234]) {
    const rng = new Rng(seed);
    const ref = new Set<number>();
    let ps = new PeerSet();
    let mismatches = 0;
    for (let step = 0; step < 3000; step++) {
      const id = rng.chance(0.02) ? 2 ** 32 + rng.int(5) : rng.int(300);
      const op = rng.int(10);
      if (op < 5) { ref.add(id); ps.add(id); }
      else if (op < 9) { if (ref.delete(id) !== ps.delete(id)) mismatches++; }
      else { ps = new PeerSet([...ref].reverse().concat([...ref])); }
      if (ref.has(id) !== ps.has(id) || ref.size !== ps.size) mismatches++;
    }
    t.same([...ps], [...ref].sort((a, b) => a - b), `seed ${seed}: same members, iterated in ascending order`);
    t.equal(mismatches, 0, `seed ${seed}: has/delete/size agreed at every step`);
  }
});

t.test('PeerSet refuses an id that is not a non-negative integer, unchanged', async (t) => {
  const ps = new PeerSet([1, 2]);
  for (const bad of [-1, 1.5, Number.NaN, 2 ** 60]) t.throws(() => ps.add(bad), /node id must be a non-negative integer/, `refuses ${bad}`);
  t.throws(() => new PeerSet([3, -4]), /got -4/);
  t.same([...ps], [1, 2]);
});

t.test('an idle session keeps its 1,000 peers in a packed set: ids take 4 bytes each, not a ~20 KiB hash Set', async (t) => {
  const session = new MapSession(1, 130, true, () => undefined, () => undefined);
  const ids = Array.from({ length: 1000 }, (_, i) => i + 2);
  session.peers = new Set(ids);
  t.ok(session.peers instanceof PeerSet, 'an assigned Set is kept as a PeerSet');
  t.equal(session.peers.size, 1000);
  t.equal(session.peers.byteLength, 4000, 'exactly 4 bytes per peer after a rebuild');
  for (let id = 1002; id < 1102; id++) session.peers.add(id);
  t.ok(session.peers.byteLength <= 1100 * 4 * 1.125 + 16, `appending 100 joins leaves at most 1/8 spare (${session.peers.byteLength} bytes)`);
  t.ok(session.peers.has(1101) && !session.peers.has(1) && session.peers.delete(500) && !session.peers.has(500));
});

t.test('PeerSet.ofList and diff agree with Set arithmetic (fixed seeds)', async (t) => {
  for (const seed of [5, 6, 7, 99]) {
    const rng = new Rng(seed);
    const pick = () => [...new Set(Array.from({ length: rng.int(60) }, () => rng.chance(0.05) ? 2 ** 32 + rng.int(3) : rng.int(80)))];
    const before = pick(), after = pick();
    const list = after.map(String);
    const next = PeerSet.ofList(list);
    t.same([...next], [...after].sort((a, b) => a - b), `seed ${seed}: ofList holds the list's ids, ascending`);
    const seen: Array<[number, boolean]> = [];
    const gone = new PeerSet(before).diff(next, (id, added) => seen.push([id, added]));
    t.same(gone, before.filter((id) => !after.includes(id)).sort((a, b) => a - b), `seed ${seed}: gone are the ids only held before`);
    t.same(seen, [...after].sort((a, b) => a - b).map((id) => [id, !before.includes(id)]), `seed ${seed}: every next id once, ascending, flagged new when not held`);
    t.same(new PeerSet(before).changes(next), { gone, added: after.filter((id) => !before.includes(id)).sort((a, b) => a - b) }, `seed ${seed}: changes gives diff's gone and its new ids`);
    next.add(1_000_000);
    t.notOk(PeerSet.ofList(list).has(1_000_000), `seed ${seed}: each ofList is a copy of its own (a session's later add does not leak)`);
    // A class member's own copy of the shared list leaves itself out, and the shared parse keeps it.
    if (after.length) {
      const self = after[rng.int(after.length)]!;
      t.same([...PeerSet.ofList(list, self)], [...after].filter((id) => id !== self).sort((a, b) => a - b), `seed ${seed}: ofList(list, self) leaves self out`);
      t.ok(PeerSet.ofList(list).has(self), `seed ${seed}: and the next copy of the list still holds it`);
    }
  }
});

t.test('sets made from one compiled list share its ids until one changes (copy on write), less their own node', async (t) => {
  for (const seed of [11, 12, 13, 14]) {
    const rng = new Rng(seed);
    const list = [...new Set(Array.from({ length: 40 + rng.int(60) }, () => rng.int(200)))].sort((a, b) => a - b).map(String);
    const members = list.map(Number);
    const sets = members.slice(0, 6).map((self) => ({ self, ps: PeerSet.ofList(list, self), ref: new Set(members.filter((id) => id !== self)) }));
    t.ok(sets.every(({ ps }) => ps.sharesList && ps.byteLength === sets[0]!.ps.byteLength), `seed ${seed}: every set reads the one parsed list`);
    for (let step = 0; step < 400; step++) {
      const x = sets[rng.int(sets.length)]!;
      const id = rng.chance(0.3) ? x.self : rng.chance(0.5) ? members[rng.int(members.length)]! : rng.int(220);
      if (rng.chance(0.5)) { x.ps.add(id); x.ref.add(id); } else t.equal(x.ps.delete(id), x.ref.delete(id), `seed ${seed}: delete ${id} answers as a Set`);
      for (const y of sets) {
        if (y.ps.size !== y.ref.size || [...y.ps].join() !== [...y.ref].sort((a, b) => a - b).join()) {
          t.fail(`seed ${seed} step ${step}: node ${y.self}'s set ${[...y.ps].join()} is not ${[...y.ref].sort((a, b) => a - b).join()}`);
          return;
        }
      }
    }
    t.same(PeerSet.ofList(list).size, members.length, `seed ${seed}: the parsed list itself is untouched by the sets' changes`);
    const a = PeerSet.ofList(list, members[0]), b = new PeerSet(members.slice(1));
    t.ok(a.sharesList && a.add(members[1]!) && a.sharesList && !a.delete(members[0]!) && a.sharesList, `seed ${seed}: adding a member or deleting its own node changes nothing, copies nothing`);
    t.same(a.changes(b), { gone: [], added: [] }, `seed ${seed}: a shared set less its node equals the same ids held apart`);
    t.same(b.changes(a), { gone: [], added: [] });
    const seen: number[] = [];
    t.same(new PeerSet([members[0]!]).diff(a, (id, added) => { if (!added) seen.push(id); }), [members[0]!], `seed ${seed}: the skipped node is gone from a set holding only it`);
    t.same(seen, []);
  }
});

t.test('changes through a flush\'s ListDiffs equals the walk for every pair of sets, each pair of lists walked once', async (t) => {
  for (const seed of [21, 22, 23, 24, 25]) {
    const rng = new Rng(seed);
    const listOf = () => [...new Set(Array.from({ length: 5 + rng.int(80) }, () => rng.int(120)))].sort((a, b) => a - b).map(String);
    const lists = [listOf(), listOf(), listOf(), listOf()];
    const diffs = new ListDiffs();
    const ref = (a: PeerSet, b: PeerSet) => ({ gone: [...a].filter((id) => !b.has(id)), added: [...b].filter((id) => !a.has(id)) });
    for (let step = 0; step < 300; step++) {
      const self = rng.int(120);
      // Sets as sessions hold them: read in place from a list (less the session's node, when it is in the list), or
      // copied by an add or delete, or made from ids.
      const make = (): PeerSet => {
        const l = lists[rng.int(lists.length)]!;
        const ps = rng.chance(0.1) ? new PeerSet(l.map(Number)) : PeerSet.ofList(l, rng.chance(0.9) ? self : undefined);
        if (rng.chance(0.15)) ps.add(rng.int(120));
        return ps;
      };
      const a = make(), b = make();
      const got = a.changes(b, diffs);
      if (JSON.stringify(got) !== JSON.stringify(ref(a, b)) || JSON.stringify(got) !== JSON.stringify(a.changes(b))) {
        t.fail(`seed ${seed} step ${step}: ${[...a].join()} -> ${[...b].join()} gave ${JSON.stringify(got)}, want ${JSON.stringify(ref(a, b))}`);
        return;
      }
      got.added.push(-1); got.gone.push(-1); // callers may change what they get: the next reader must not see it
    }
    t.ok(diffs.computed > 0 && diffs.computed <= lists.length * lists.length, `seed ${seed}: ${diffs.computed} list pairs walked for 300 sessions`);
  }
});

t.test('PeerSet.ofList reads an ascending list in one pass and anything else through the general path', async (t) => {
  t.same([...PeerSet.ofList(['1', '2', '10', '300'])], [1, 2, 10, 300], 'ascending (the compiler\'s order)');
  t.same([...PeerSet.ofList(['10', '2', '1'])], [1, 2, 10], 'descending: sorted');
  t.same([...PeerSet.ofList(['1', '2', '2', '3'])], [1, 2, 3], 'a repeated id once');
  t.same([...PeerSet.ofList(['1', String(2 ** 32 + 5)])], [1, 2 ** 32 + 5], 'ids past 32 bits');
  t.same([...PeerSet.ofList([])], []);
  t.throws(() => PeerSet.ofList(['1', 'x']), /non-negative integer/, 'a non-number is refused, not read as 0');
  t.throws(() => PeerSet.ofList(['1', '2.5']), /non-negative integer/);
});

t.test('a quiet map stream gets a keep-alive each interval, and every message restarts the wait', async (t) => {
  const sent: string[] = [];
  let keepalives = 0;
  const clock = new FakeClock();
  const session = new MapSession(1, 130, false, (msg) => sent.push(wireBytes(msg).subarray(4).toString()), () => keepalives++, 40, clock);
  t.teardown(() => session.close());
  session.armKeepAlive();
  t.equal(clock.unrefed.size, 1, 'the session\'s timer does not keep the process alive');
  clock.advance(30);
  session.send(Buffer.from('\x02\x00\x00\x00{}'));
  clock.advance(30);
  t.equal(keepalives, 0, 'a message 30 ms in pushed the first keep-alive past 60 ms');
  // A steady stream of messages, each sooner than the interval after the last: the wait starts over each time.
  for (let k = 0; k < 16; k++) {
    session.send(Buffer.from('\x02\x00\x00\x00{}'));
    clock.advance(10);
  }
  t.equal(keepalives, 0, 'no keep-alive while messages come every 10 ms (160 ms in all, four intervals)');
  clock.advance(10);
  t.equal(keepalives, 0, 'nor 20 ms after the last of them');
  clock.advance(250);
  t.ok(keepalives >= 2, `the timer re-armed after firing: ${keepalives} keep-alives in the next 250 ms`);
  t.ok(sent.filter((m) => m === '{"KeepAlive":true}').length === keepalives, 'each one sent as a KeepAlive message');
  session.close();
  const after = keepalives;
  clock.advance(100);
  t.equal(keepalives, after, 'none after the session closed');
  t.equal(clock.pending, 0, 'and no timer left');
});
