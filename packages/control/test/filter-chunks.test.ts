// Packet filters in chunks (filter-chunks.ts): what a client holds after the first map and each update is the
// compiled filter, regrouped and in order; an update carries only the blocks that changed, and a rule inserted or
// removed elsewhere in the filter does not resend the rules around it.
import t from 'tap';
import type { FilterRule } from '@headway/policy';
import { filterChunksJson, filterUpdate, nameAt } from '../src/filter-chunks.js';
import { applyPacketFilters, concatPacketFilters, type FilterRule as HeldRule } from '@headway/testkit';
import { expandRules } from './fleet.js';

type Chunks = Record<string, FilterRule[] | null>;

/** hosts lists addresses 100.64.B.H (and their IPv6 twins) for the given B.H pairs, as the compiler writes them. */
function hosts(pairs: Array<[number, number]>): string[] {
  return [
    ...pairs.map(([b, h]) => `100.64.${b}.${h}`),
    ...pairs.map(([b, h]) => `fd7a:115c:a1e0::${((b << 8) | h).toString(16)}`),
  ];
}

const range = (b: number, from: number, to: number, step = 2): Array<[number, number]> => {
  const out: Array<[number, number]> = [];
  for (let h = from; h <= to; h += step) out.push([b, h]);
  return out;
};

const ssh = (port: number) => [{ IP: '100.64.9.1', Ports: { First: port, Last: port } }];

const RULE_FIELDS = new Set(['SrcIPs', 'DstPorts', 'IP', 'Ports', 'First', 'Last', 'IPProto', 'Bits', 'CapGrant', 'Dsts', 'CapMap']);

/** Client holds what a client makes of the chunks it was sent; the server's side is held (rules) and names. */
class Client {
  held = new Map<string, HeldRule[]>();
  rules_: readonly FilterRule[] = [];
  names: readonly string[] | undefined = undefined;
  apply(json: string | null): Chunks {
    const chunks = json === null ? {} : JSON.parse(json) as Chunks;
    applyPacketFilters(this.held, { PacketFilters: chunks as Record<string, HeldRule[] | null> });
    return chunks;
  }
  first(rules: readonly FilterRule[]): Chunks {
    this.rules_ = rules;
    this.names = undefined;
    return this.apply(filterChunksJson(rules));
  }
  /** update sends the update to next and returns its chunks, or null when the server sent nothing. */
  update(next: readonly FilterRule[]): Chunks | null {
    const u = filterUpdate(this.rules_, this.names, next);
    this.rules_ = next;
    this.names = u.names;
    if (u.json === null) {
      if (u.pieces !== null) throw new Error('pieces without json');
      return null;
    }
    // The pieces a flush compresses apart are the text, in order: strings and shared blocks, nothing between.
    const joined = u.pieces!.map((p) => (typeof p === 'string' ? p : p.text)).join('');
    if (joined !== u.json) throw new Error(`the pieces are not the update's text: ${joined} vs ${u.json}`);
    // JSON.parse keeps the last of two equal keys, so count the names in the text (less the rules' own fields).
    const named = [...u.json.matchAll(/"([^"]+)":/g)].map((m) => m[1]!).filter((k) => !RULE_FIELDS.has(k));
    if (new Set(named).size !== named.length) throw new Error(`a chunk is named twice in one update: ${u.json}`);
    return this.apply(u.json);
  }
  get rules(): unknown[] { return concatPacketFilters(this.held); }
}

/** headsInOrder is a filter's destinations in order, each run of equal ones once (chunks of one rule, or of rules alike). */
function headsInOrder(rules: readonly unknown[]): string[] {
  const out: string[] = [];
  for (const r of rules as Array<Record<string, unknown>>) {
    const { SrcIPs: _, ...rest } = r;
    const head = JSON.stringify(Object.fromEntries(Object.entries(rest).sort(([a], [b]) => (a < b ? -1 : 1))));
    if (out.at(-1) !== head) out.push(head);
  }
  return out;
}

t.test('a first map and each update leave the client with the compiled filter, regrouped', async (t) => {
  const a: FilterRule = { SrcIPs: hosts([...range(0, 1, 99), ...range(1, 3, 51), ...range(2, 0, 9)]), DstPorts: ssh(22) };
  const b: FilterRule = { SrcIPs: ['100.64.0.7', 'fd7a:115c:a1e0::7'], DstPorts: ssh(80), IPProto: [6] };
  const client = new Client();
  let held: FilterRule[] = [a, b];
  const first = client.first(held);
  t.ok(Object.hasOwn(first, '*') && first['*'] === null, 'the first map drops whatever the client held');
  t.same(expandRules(client.rules), expandRules(held), 'the client holds the filter');
  const names = Object.keys(first).filter((k) => k !== '*');
  t.same(names, [...names].sort(), 'names are written in the order the client concatenates them');
  t.equal(names.filter((n) => n.startsWith(`${nameAt(0)}.`)).length, 6, 'a long rule is cut into its three /24s and their IPv6 blocks');
  t.same(names.filter((n) => n.startsWith(nameAt(1))), [nameAt(1)], 'a short rule stays whole');
  t.same(client.rules.slice(-1), [b], 'and is sent as it was compiled');

  const step = (next: FilterRule[], what: string): Chunks => {
    const update = client.update(next) ?? {};
    held = next;
    t.same(expandRules(client.rules), expandRules(next), `${what}: the client holds the filter`);
    t.same(headsInOrder(client.rules), headsInOrder(next), `${what}: in the compiled order`);
    return update;
  };

  // One more source in the second block: that block's chunks alone.
  const joined = step([{ ...a, SrcIPs: hosts([...range(0, 1, 99), ...range(1, 3, 51), [1, 200], ...range(2, 0, 9)]) }, b], 'a source joined');
  t.same(Object.keys(joined).sort(), [`${nameAt(0)}.4644001`, `${nameAt(0)}.60000000000000001`], 'only the blocks the new source is in');

  // The same filter compiled again (new arrays and rule objects, same text): nothing.
  t.equal(filterUpdate(held, undefined, held.map((r) => ({ ...r, SrcIPs: [...r.SrcIPs] }))).json, null, 'a recompiled, unchanged filter sends nothing');

  // Every source of the third block leaves: its chunks are dropped.
  const left = step([{ ...a, SrcIPs: hosts([...range(0, 1, 99), ...range(1, 3, 51), [1, 200]]) }, b], 'a block emptied');
  t.same(left, { [`${nameAt(0)}.4644002`]: null, [`${nameAt(0)}.60000000000000002`]: null }, 'the emptied blocks are dropped, nothing else sent');

  // New destinations: the rule is sent again whole, under the same names.
  const moved = step([{ ...held[0]!, DstPorts: ssh(443) }, b], 'the destinations changed');
  t.equal(Object.keys(moved).length, 4, 'every chunk of the rule again');
  t.notOk(JSON.stringify(client.rules).includes('"First":22'), 'no chunk with the old destination is left');

  // The first rule goes away: its chunks are dropped, the other keeps its name and is not sent again.
  const removed = step([b], 'a rule removed');
  t.ok(Object.values(removed).every((v) => v === null), 'only drops');
  t.same([...client.held.keys()], [nameAt(1)], 'only the remaining rule is held, under its name');
  const added = step([b, a], 'a rule added');
  t.notOk(Object.keys(added).some((k) => k === nameAt(1)), 'the rule already held is not sent again');
  step([], 'everything denied');
  t.same(client.rules, [], 'an empty filter leaves the client nothing');
  t.equal(filterUpdate([], undefined, []).json, null);
});

t.test('a rule inserted or removed in the middle sends that rule alone', async (t) => {
  const rule = (port: number, b: number): FilterRule => ({ SrcIPs: hosts(range(b, 1, 60)), DstPorts: ssh(port) });
  const rules = [rule(22, 0), rule(80, 1), rule(443, 2), rule(5432, 3), rule(8080, 4)];
  const client = new Client();
  client.first(rules);
  const inserted = rule(3000, 5);
  const next = [...rules.slice(0, 2), inserted, ...rules.slice(2)];
  const u = client.update(next)!;
  t.same(expandRules(client.rules), expandRules(next), 'the client holds the filter');
  t.same(headsInOrder(client.rules), headsInOrder(next), 'in the compiled order');
  const names = Object.keys(u);
  t.ok(names.length > 0 && names.every((n) => u[n] !== null && n > nameAt(1) && n < nameAt(2)), `only the new rule's chunks, named between its neighbours (${names.join(' ')})`);
  t.same(client.names, [nameAt(0), nameAt(1), names[0]!.split('.')[0], nameAt(2), nameAt(3), nameAt(4)], 'the others keep their names');

  const back = client.update(rules)!;
  t.ok(Object.values(back).every((v) => v === null) && Object.keys(back).every((n) => n.startsWith(names[0]!.split('.')[0]!)), 'removing it drops its chunks alone');
  t.same(expandRules(client.rules), expandRules(rules));
  t.equal(client.names, undefined, 'back to positional names');
  const sizeBefore = filterUpdate(rules, undefined, next).json!.length;
  t.ok(sizeBefore < filterChunksJson([inserted]).length + 64, `an insertion costs about the inserted rule (${sizeBefore} bytes)`);
});

t.test('names stay short: insertions at one place past the limit resend the filter whole', async (t) => {
  const rule = (port: number): FilterRule => ({ SrcIPs: ['100.64.0.1', 'fd7a:115c:a1e0::1'], DstPorts: ssh(port) });
  let rules = [rule(1), rule(2)];
  const client = new Client();
  client.first(rules);
  let whole = 0;
  for (let k = 0; k < 100; k++) {
    rules = [rules[0]!, rule(100 + k), ...rules.slice(1)];
    const u = client.update(rules)!;
    if (Object.hasOwn(u, '*')) whole++;
    t.ok((client.names ?? []).every((n) => n.length <= 12), 'every name within the limit');
    t.same(headsInOrder(client.rules), headsInOrder(rules), `insertion ${k}: in order`);
  }
  t.ok(whole >= 1 && whole <= 3, `the filter went out whole ${whole} times in 100 insertions at one place`);
});

t.test('random edits: the client always holds the compiled filter, in order', async (t) => {
  const seeds = Number(process.env.HEADWAY_TEST_RUNS ?? 60);
  let inserts = 0, cheapInserts = 0;
  for (let seed = 1; seed <= seeds; seed++) {
    let x = seed * 2654435761 % 4294967296;
    const rnd = (n: number): number => { x = (x * 1103515245 + 12345) % 2147483648; return x % n; };
    const head = (): Pick<FilterRule, 'DstPorts' | 'IPProto'> => rnd(4) === 0 ? { DstPorts: ssh(rnd(6)), IPProto: [6] } : { DstPorts: ssh(rnd(6)) };
    const sources = (): string[] => hosts(Array.from({ length: 1 + rnd(40) }, () => [rnd(4), rnd(250)] as [number, number]))
      .filter((v, i, all) => all.indexOf(v) === i);
    let rules: FilterRule[] = Array.from({ length: rnd(8) }, () => ({ SrcIPs: sources(), ...head() }));
    const client = new Client();
    client.first(rules);
    for (let step = 0; step < 25; step++) {
      const next = [...rules];
      const kind = rnd(5);
      const at = rnd(next.length + 1);
      let fresh: FilterRule | undefined;
      if (kind === 0 || next.length === 0) next.splice(at, 0, fresh = { SrcIPs: sources(), ...head() });
      else if (kind === 1) next.splice(at % next.length, 1);
      else if (kind === 2) { const r = next[at % next.length]!; next[at % next.length] = { ...r, SrcIPs: sources() }; }
      else if (kind === 3) { const r = next[at % next.length]!; next[at % next.length] = { ...r, ...head() }; }
      else { const [r] = next.splice(at % next.length, 1); next.splice(rnd(next.length + 1), 0, r!); }
      const heldBefore = new Set(client.held.keys());
      const u = client.update(next);
      // An inserted rule with destinations of its own: where its destinations are another rule's too, the
      // alignment may as well keep that rule's name for it and name the other anew (as correct, not as cheap).
      const own = (r: FilterRule): string => JSON.stringify([r.DstPorts, r.IPProto]);
      if (fresh && rules.length > 0 && next.filter((r) => own(r) === own(fresh)).length === 1) {
        inserts++;
        if (u && Object.keys(u).every((n) => !heldBefore.has(n) && u[n] !== null)) cheapInserts++;
      }
      rules = next;
      const ok = JSON.stringify(expandRules(client.rules)) === JSON.stringify(expandRules(next))
        && JSON.stringify(headsInOrder(client.rules)) === JSON.stringify(headsInOrder(next));
      if (!ok) { t.fail(`seed ${seed} step ${step} (edit ${kind}): the client's filter differs from the compiled one`); break; }
    }
  }
  t.pass(`${seeds} seeds × 25 edits: the client held the compiled filter after each`);
  t.ok(inserts > 0 && cheapInserts === inserts, `every insertion of new destinations sent only new chunks (${cheapInserts} of ${inserts})`);
});

t.test('a wildcard source is a block of its own', async (t) => {
  const client = new Client();
  const rules: FilterRule[] = [{ SrcIPs: ['*', ...hosts(range(0, 1, 60))], DstPorts: ssh(22) }];
  client.first(rules);
  t.ok(client.held.has(`${nameAt(0)}.*`), 'the "*" entry is one chunk');
  t.same(expandRules(client.rules), expandRules(rules));
});

t.test('an update sends each block of sources as one piece, the same object for every node moving between two lists', async (t) => {
  const dst = (h: number) => [{ IP: `100.64.9.${h}`, Ports: { First: 22, Last: 22 } }];
  const before = hosts(range(0, 1, 80));
  const after = hosts([...range(0, 1, 80), [0, 81], [1, 5]]);
  // Two nodes hold the same sources towards their own address; the compiler shares one SrcIPs list between them.
  const a = filterUpdate([{ SrcIPs: before, DstPorts: dst(1) }], undefined, [{ SrcIPs: after, DstPorts: dst(1) }]);
  const b = filterUpdate([{ SrcIPs: before, DstPorts: dst(2) }], undefined, [{ SrcIPs: after, DstPorts: dst(2) }]);
  const shared = (u: typeof a) => u.pieces!.filter((p) => typeof p !== 'string');
  t.equal(shared(a).length, 4, 'in each family the block that changed and the one that is new');
  t.ok(shared(a).every((p, i) => p === shared(b)[i]), 'both nodes send the very same blocks (one id, one text)');
  t.equal(new Set(shared(a).map((p) => typeof p === 'string' ? '' : p.id)).size, 4, 'each block has its own id');
  t.ok(a.pieces!.every((p) => typeof p !== 'string' || p.length < 200), 'what is left per node is names and destinations');
  t.not(a.json, b.json, 'their texts differ by the destinations');
  const whole = filterUpdate([], undefined, [{ SrcIPs: after, DstPorts: dst(1) }]);
  t.equal(whole.pieces!.map((p) => (typeof p === 'string' ? p : p.text)).join(''), whole.json, 'a rule sent whole too');
});

t.test('rules sharing one destination list keep their own protocols and fields', async (t) => {
  // Rules may share one DstPorts list whatever their sources and protocols (the compiler's narrowed rules do, and a
  // cache of heads by destination list would mix them): the head each update sends around changed sources must
  // still be each rule's own.
  const ports = ssh(22);
  const src = (n: number) => hosts(range(0, 1, n));
  const tcp = [6], udp = [17];
  const rules = (n: number): FilterRule[] => [
    { SrcIPs: src(n), DstPorts: ports, IPProto: tcp },
    { SrcIPs: src(n + 2), DstPorts: ports, IPProto: udp },
    { SrcIPs: src(n + 4), DstPorts: ports },
  ];
  const client = new Client();
  client.first(rules(30));
  for (const n of [40, 50, 60]) {
    const update = client.update(rules(n));
    t.ok(update && Object.keys(update).length > 0, `sources grow to ${n}: an update`);
    t.same(expandRules(client.rules), expandRules(rules(n)), `sources grow to ${n}: each rule keeps its protocol`);
  }
  const held = JSON.stringify(client.rules);
  t.ok(held.includes('"IPProto":[6]') && held.includes('"IPProto":[17]'), 'both protocols are held');
});

t.test('a recompiled rule takes the head it replaced only when every member is the same, in the same order', async (t) => {
  // The compiler makes new rule objects (and new destination entries) whenever a rule's sources change; the update
  // then takes the old rule's head text for the new one, which must never hide a change in the head.
  const dst = (last: number, bits?: number) => [{ IP: '100.64.9.1', ...(bits === undefined ? {} : { Bits: bits }), Ports: { First: 22, Last: last } }];
  const src = (n: number) => hosts(range(0, 1, n));
  const client = new Client();
  client.first([{ SrcIPs: src(40), DstPorts: dst(22), IPProto: [6] }]);
  const grown = client.update([{ SrcIPs: src(42), DstPorts: dst(22), IPProto: [6] }])!;
  t.ok(Object.keys(grown).every((k) => k.startsWith(`${nameAt(0)}.`)), 'equal heads in new objects: only the changed blocks');
  t.ok(JSON.stringify(grown).includes('"DstPorts":[{"IP":"100.64.9.1","Ports":{"First":22,"Last":22}}],"IPProto":[6]'), 'around the head as compiled');
  const cases: Array<[string, FilterRule, string]> = [
    ['a port', { SrcIPs: src(44), DstPorts: dst(23), IPProto: [6] }, '"Last":23'],
    ['a protocol', { SrcIPs: src(44), DstPorts: dst(23), IPProto: [17] }, '"IPProto":[17]'],
    ['a member of an entry', { SrcIPs: src(44), DstPorts: dst(23, 32), IPProto: [17] }, '"Bits":32'],
    ['the order of the members', { SrcIPs: src(44), IPProto: [17], DstPorts: dst(23, 32) }, '"IPProto":[17],"DstPorts"'],
    ['a member gone', { SrcIPs: src(44), DstPorts: dst(23, 32) }, '"Bits":32,"Ports":{"First":22,"Last":23}}]}'],
  ];
  for (const [what, rule, text] of cases) {
    const u = client.update([rule]);
    t.ok(u !== null && JSON.stringify(u).includes(text), `${what} changed: sent with the new head`);
    t.same(expandRules(client.rules), expandRules([rule]), `${what} changed: the client holds the rule`);
    t.same(headsInOrder(client.rules), headsInOrder([rule]), `${what} changed: with its head`);
  }
});
