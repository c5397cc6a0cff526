// Packet filters in chunks (filter-chunks.ts): what a client holds after the first map and each update is the
// compiled filter, regrouped; an update carries only the blocks that changed.
import t from 'tap';
import type { FilterRule } from '@headway/policy';
import { filterChunksJson, filterUpdateJson } from '../src/control/filter-chunks.js';
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

/** Client holds what a client makes of the chunks it was sent. */
class Client {
  held = new Map<string, HeldRule[]>();
  apply(json: string | null): Chunks {
    const chunks = json === null ? {} : JSON.parse(json) as Chunks;
    applyPacketFilters(this.held, { PacketFilters: chunks as Record<string, HeldRule[] | null> });
    return chunks;
  }
  get rules(): unknown[] { return concatPacketFilters(this.held); }
}

t.test('a first map and each update leave the client with the compiled filter, regrouped', async (t) => {
  const a: FilterRule = { SrcIPs: hosts([...range(0, 1, 99), ...range(1, 3, 51), ...range(2, 0, 9)]), DstPorts: ssh(22) };
  const b: FilterRule = { SrcIPs: ['100.64.0.7', 'fd7a:115c:a1e0::7'], DstPorts: ssh(80), IPProto: [6] };
  const client = new Client();
  let held: FilterRule[] = [a, b];
  const first = client.apply(filterChunksJson(held));
  t.ok(Object.hasOwn(first, '*') && first['*'] === null, 'the first map drops whatever the client held');
  t.same(expandRules(client.rules), expandRules(held), 'the client holds the filter');
  const names = Object.keys(first).filter((k) => k !== '*');
  t.same(names, [...names].sort(), 'names are written in the order the client concatenates them');
  t.equal(names.filter((n) => n.startsWith('0000.')).length, 6, 'a long rule is cut into its three /24s and their IPv6 blocks');
  t.same(names.filter((n) => n.startsWith('0001')), ['0001'], 'a short rule stays whole');
  t.same(client.rules.slice(-1), [b], 'and is sent as it was compiled');

  const step = (next: FilterRule[], what: string): Chunks => {
    const update = client.apply(filterUpdateJson(held, next));
    held = next;
    t.same(expandRules(client.rules), expandRules(next), `${what}: the client holds the filter`);
    return update;
  };

  // One more source in the second block: that block's chunks alone.
  const joined = step([{ ...a, SrcIPs: hosts([...range(0, 1, 99), ...range(1, 3, 51), [1, 200], ...range(2, 0, 9)]) }, b], 'a source joined');
  t.same(Object.keys(joined).sort(), ['0000.4644001', '0000.60000000000000001'], 'only the blocks the new source is in');

  // The same filter compiled again (new arrays and rule objects, same text): nothing.
  t.equal(filterUpdateJson(held, held.map((r) => ({ ...r, SrcIPs: [...r.SrcIPs] }))), null, 'a recompiled, unchanged filter sends nothing');

  // Every source of the third block leaves: its chunks are dropped.
  const left = step([{ ...a, SrcIPs: hosts([...range(0, 1, 99), ...range(1, 3, 51), [1, 200]]) }, b], 'a block emptied');
  t.same(left, { '0000.4644002': null, '0000.60000000000000002': null }, 'the emptied blocks are dropped, nothing else sent');

  // New destinations: the rule is sent again whole, under the same names.
  const moved = step([{ ...held[0]!, DstPorts: ssh(443) }, b], 'the destinations changed');
  t.equal(Object.keys(moved).length, 4, 'every chunk of the rule again');
  t.notOk(JSON.stringify(client.rules).includes('"First":22'), 'no chunk with the old destination is left');

  // A rule goes away, another comes: the first rule's chunks become the second's names.
  step([b], 'a rule removed');
  t.same([...client.held.keys()], ['0000'], 'only the remaining rule is held');
  step([b, a], 'a rule added');
  step([], 'everything denied');
  t.same(client.rules, [], 'an empty filter leaves the client nothing');
  t.equal(filterUpdateJson([], []), null);
});

t.test('a wildcard source is a block of its own', async (t) => {
  const client = new Client();
  const rules: FilterRule[] = [{ SrcIPs: ['*', ...hosts(range(0, 1, 60))], DstPorts: ssh(22) }];
  client.apply(filterChunksJson(rules));
  t.ok(client.held.has('0000.*'), 'the "*" entry is one chunk');
  t.same(expandRules(client.rules), expandRules(rules));
});
