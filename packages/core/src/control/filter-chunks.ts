import { parseAddr, type FilterRule } from '@headway/policy';

/**
 * A node's packet filter is sent as MapResponse.PacketFilters: named lists of rules that the client concatenates in
 * name order (capability version 81; every client Headway accepts has it). Sent whole, as the singular
 * PacketFilter, a filter went out again in full whenever any source joined: a rule reaching a node from
 * `autogroup:member` lists every member's addresses, so each join batch resent O(tailnet) bytes to each of
 * O(tailnet) sessions (at 5,000 devices the flush spent most of its time serializing, compressing and sealing
 * filters). Here each rule's sources are cut by address block, and a session is sent only the chunks that changed
 * since its last message: a join touches the one block its addresses fall in.
 *
 * A chunk is named `RRRR` (rule RRRR whole) or `RRRR.K` (the sources of rule RRRR in block K): the rule's position in
 * the compiled filter, zero-padded so that names sort in rule order, and the block, 4 + the IPv4 /24 or 6 + the
 * IPv6 /120 (low 64 bits of the block number), in hex, so that blocks sort in address order. Splitting a rule's sources into several
 * rules with the same destinations matches exactly the packets, and grants exactly the capabilities, the rule does.
 */

/**
 * FilterChunking is how rules are cut. wholeUpTo: a rule with at most this many source entries is one chunk
 * (splitting short lists only adds names). blockBits: a block is the addresses that differ in their last blockBits
 * bits only. Tests cut every rule into blocks of a few addresses, so that small fleets have many.
 */
export interface FilterChunking { wholeUpTo: number; blockBits: number }

/** DEFAULT_FILTER_CHUNKING: IPv4 /24 blocks (256 addresses, sequentially allocated ones fill one after another). */
export const DEFAULT_FILTER_CHUNKING: Readonly<FilterChunking> = { wholeUpTo: 16, blockBits: 8 };

let wholeUpTo = DEFAULT_FILTER_CHUNKING.wholeUpTo;
let blockBits = BigInt(DEFAULT_FILTER_CHUNKING.blockBits);

/** Block is the JSON of a rule's source entries within one block (key '' for a rule kept whole). */
interface Block { key: string; text: string }

/** blockCache: each compiled SrcIPs list is shared by every node whose filter holds the rule, so it is cut once. */
let blockCache = new WeakMap<readonly string[], Block[]>();

/** BlockChange: a block set to new text, or dropped (block null). */
interface BlockChange { key: string; block: Block | null }

/**
 * listDiffs keeps, per old SrcIPs list, its difference from the list that replaced it: every node holding the rule
 * moves from the same old list to the same new one in a flush, so the blocks are compared once, not per session.
 */
let listDiffs = new WeakMap<readonly string[], { next: readonly string[]; changes: BlockChange[] }>();

/** setFilterChunking changes how rules are cut and returns the previous setting; cuts made under the old one are dropped. */
export function setFilterChunking(next: FilterChunking): FilterChunking {
  const was = { wholeUpTo, blockBits: Number(blockBits) };
  wholeUpTo = next.wholeUpTo;
  blockBits = BigInt(next.blockBits);
  blockCache = new WeakMap();
  listDiffs = new WeakMap();
  return was;
}

function blockKey(entry: string): string {
  if (entry === '*') return '*';
  const end = entry.search(/[-/]/);
  const a = parseAddr(end < 0 ? entry : entry.slice(0, end));
  // An entry the compiler would not write stays in a block of its own kind; grouping by key is all that matters.
  if (!a) return 'x';
  const block = a.n >> blockBits;
  return a.v6 ? `6${(block & 0xffffffffffffffffn).toString(16).padStart(16, '0')}` : `4${block.toString(16).padStart(Number((35n - blockBits) / 4n), '0')}`;
}

/** blocksOf cuts a SrcIPs list by block, sorted by key. */
function blocksOf(list: readonly string[]): Block[] {
  const known = blockCache.get(list);
  if (known) return known;
  let blocks: Block[];
  if (list.length <= wholeUpTo) {
    blocks = list.length ? [{ key: '', text: JSON.stringify(list) }] : [];
  } else {
    const byKey = new Map<string, string[]>();
    for (const e of list) {
      const k = blockKey(e);
      const at = byKey.get(k);
      if (at) at.push(e); else byKey.set(k, [e]);
    }
    blocks = [...byKey.keys()].sort().map((key) => ({ key, text: JSON.stringify(byKey.get(key)) }));
  }
  blockCache.set(list, blocks);
  return blocks;
}

/** headCache: a rule's fields other than SrcIPs, as JSON members (the compiler makes new rule objects per view). */
const headCache = new WeakMap<FilterRule, string>();

function headOf(rule: FilterRule): string {
  let h = headCache.get(rule);
  if (h === undefined) {
    const fields: string[] = [];
    for (const [k, v] of Object.entries(rule)) if (k !== 'SrcIPs' && v !== undefined) fields.push(`${JSON.stringify(k)}:${JSON.stringify(v)}`);
    h = fields.join(',');
    headCache.set(rule, h);
  }
  return h;
}

const nameOf = (rule: number, key: string): string => `${String(rule).padStart(4, '0')}${key ? `.${key}` : ''}`;

/** dropJson removes a chunk the client holds. */
const dropJson = (rule: number, key: string): string => `"${nameOf(rule, key)}":null`;

function chunkJson(rule: number, block: Block, head: string): string {
  return `"${nameOf(rule, block.key)}":[{"SrcIPs":${block.text}${head ? `,${head}` : ''}}]`;
}

/** filterChunksJson is a whole filter as the PacketFilters of a first map: everything the client held is dropped ("*"). */
export function filterChunksJson(rules: readonly FilterRule[]): string {
  const out = ['"*":null'];
  rules.forEach((r, i) => {
    const head = headOf(r);
    for (const b of blocksOf(r.SrcIPs)) out.push(chunkJson(i, b, head));
  });
  return `{${out.join(',')}}`;
}

function listDiff(prev: readonly string[], next: readonly string[]): BlockChange[] {
  const known = listDiffs.get(prev);
  if (known && known.next === next) return known.changes;
  const a = blocksOf(prev), b = blocksOf(next);
  const changes: BlockChange[] = [];
  let i = 0, j = 0;
  while (i < a.length || j < b.length) {
    const ka = i < a.length ? a[i]!.key : undefined, kb = j < b.length ? b[j]!.key : undefined;
    if (kb === undefined || (ka !== undefined && ka < kb)) { changes.push({ key: ka!, block: null }); i++; continue; }
    if (ka === undefined || kb < ka) { changes.push({ key: kb, block: b[j]! }); j++; continue; }
    if (a[i]!.text !== b[j]!.text) changes.push({ key: kb, block: b[j]! });
    i++; j++;
  }
  listDiffs.set(prev, { next, changes });
  return changes;
}

/**
 * filterUpdateJson is the PacketFilters that take a client holding `prev` (as sent by filterChunksJson and earlier
 * updates) to `next`: the chunks that changed or appeared, and null for those that are gone. Null when nothing
 * changed. Rules are matched by position; a rule whose destinations changed is sent whole again.
 */
export function filterUpdateJson(prev: readonly FilterRule[], next: readonly FilterRule[]): string | null {
  if (prev === next) return null;
  const out: string[] = [];
  const drop = (i: number, blocks: readonly Block[]): void => { for (const b of blocks) out.push(dropJson(i, b.key)); };
  const n = Math.max(prev.length, next.length);
  for (let i = 0; i < n; i++) {
    const o = prev[i], r = next[i];
    if (o === r) continue;
    if (!r) { drop(i, blocksOf(o!.SrcIPs)); continue; }
    const head = headOf(r);
    if (o && headOf(o) === head) {
      if (o.SrcIPs === r.SrcIPs) continue;
      for (const c of listDiff(o.SrcIPs, r.SrcIPs)) out.push(c.block ? chunkJson(i, c.block, head) : dropJson(i, c.key));
      continue;
    }
    // New destinations (or a new rule): every chunk of the rule again, and the old ones this one does not replace.
    const blocks = blocksOf(r.SrcIPs);
    for (const b of blocks) out.push(chunkJson(i, b, head));
    if (o) {
      const kept = new Set(blocks.map((b) => b.key));
      drop(i, blocksOf(o.SrcIPs).filter((b) => !kept.has(b.key)));
    }
  }
  return out.length ? `{${out.join(',')}}` : null;
}
