import { parseAddr, type FilterRule } from '@headway/policy';
import { diffArrays } from 'diff';
import { generateNKeysBetween } from 'fractional-indexing';

/**
 * A node's packet filter is sent as MapResponse.PacketFilters: named lists of rules that the client concatenates in
 * name order (capability version 81; every client Headway accepts has it). Sent whole, as the singular
 * PacketFilter, a filter would go out again in full whenever any source joined: a rule reaching a node from
 * `autogroup:member` lists every member's addresses, so each join batch would resend O(tailnet) bytes to each of
 * O(tailnet) sessions. Here each rule's sources are cut by address block, and a session is sent only the chunks that changed
 * since its last message: a join touches the one block its addresses fall in.
 *
 * A chunk is named `R` (rule R whole) or `R.K` (the sources of rule R in block K): R is the rule's name, which sorts
 * in rule order, and K the block, 4 + the IPv4 /24 or 6 + the IPv6 /120 (low 64 bits of the block number), in hex,
 * so that blocks sort in address order ('.' sorts before every character of a rule name, so a rule's chunks stay
 * together even when another rule's name extends its own). Splitting a rule's sources into several rules with the
 * same destinations matches exactly the packets, and grants exactly the capabilities, the rule does.
 *
 * Rule names are fractional-indexing order keys ("a0", "a1", …). A first map names rules by position (nameAt); an
 * update aligns the old and new rules by their destinations (a Myers diff of the rules' heads), keeps the names of
 * the rules it finds in both and names an inserted rule between its neighbours. Matched by position instead, a
 * policy change inserting one rule in the middle of a node's filter would resend every rule after it whole, under
 * new names.
 * The client sorts names bytewise (Go's sort of the map's keys); these keys compare the same way in JavaScript.
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

/**
 * SharedText is a piece of an update's JSON that every session moving between the same two source lists sends the
 * same: one block of a rule's sources (the rest of its chunk, the rule's destinations, is the node's own). `id`
 * names it for as long as it lives, so that a flush compresses it once for all of them (see DeltaEncoder).
 */
export interface SharedText { readonly id: number; readonly text: string }

/** Block is the JSON of a rule's source entries within one block (key '' for a rule kept whole). */
interface Block extends SharedText { key: string }

let blockIds = 0;
const block = (key: string, entries: readonly string[]): Block => ({ key, text: JSON.stringify(entries), id: ++blockIds });

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
    blocks = list.length ? [block('', list)] : [];
  } else {
    const byKey = new Map<string, string[]>();
    for (const e of list) {
      const k = blockKey(e);
      const at = byKey.get(k);
      if (at) at.push(e); else byKey.set(k, [e]);
    }
    blocks = [...byKey.keys()].sort().map((key) => block(key, byKey.get(key)!));
  }
  blockCache.set(list, blocks);
  return blocks;
}

/** headCache: a rule's fields other than SrcIPs, as JSON members (the compiler makes new rule objects per view). */
const headCache = new WeakMap<FilterRule, string>();

/**
 * headOf is a rule's head (headCache). like: a rule whose head is probably the same (the rule at the same place in
 * the session's filter before): when it is, member for member and in the same order, its text is taken rather than
 * written again. The compiler makes new rule objects whenever a rule's sources change (every join into
 * autogroup:member), so without it each flush would write the heads of every rule of every session anew, nearly
 * all of them equal to the heads they replace.
 */
function headOf(rule: FilterRule, like?: FilterRule): string {
  const cached = headCache.get(rule);
  if (cached !== undefined) return cached;
  const known = like === undefined ? undefined : headCache.get(like);
  let h: string;
  if (known !== undefined && sameMembers(rule, like!, 'SrcIPs')) h = known;
  else {
    const fields: string[] = [];
    for (const [k, v] of Object.entries(rule)) if (k !== 'SrcIPs' && v !== undefined) fields.push(`${JSON.stringify(k)}:${JSON.stringify(v)}`);
    h = fields.join(',');
  }
  headCache.set(rule, h);
  return h;
}

/**
 * sameMembers: the objects' members (but `skip`, and those undefined, which JSON leaves out) have equal names in the
 * same order and equal JSON values, so that their JSON text (less `skip`) is equal.
 */
function sameMembers(a: object, b: object, skip?: string): boolean {
  const x = a as Record<string, unknown>, y = b as Record<string, unknown>;
  const kx = Object.keys(x), ky = Object.keys(y);
  let i = 0, j = 0;
  for (;;) {
    while (i < kx.length && (kx[i] === skip || x[kx[i]!] === undefined)) i++;
    while (j < ky.length && (ky[j] === skip || y[ky[j]!] === undefined)) j++;
    if (i === kx.length || j === ky.length) return i === kx.length && j === ky.length;
    if (kx[i] !== ky[j] || !sameJson(x[kx[i]!], y[ky[j]!])) return false;
    i++; j++;
  }
}

/** sameJson: two JSON values (plain objects, arrays, strings, numbers, booleans, null) that stringify to the same text. */
function sameJson(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false;
  if (Array.isArray(a) || Array.isArray(b)) {
    if (!Array.isArray(a) || !Array.isArray(b) || a.length !== b.length) return false;
    for (let k = 0; k < a.length; k++) if (!sameJson(a[k] ?? null, b[k] ?? null)) return false;
    return true;
  }
  return sameMembers(a, b);
}

/** positional holds the names of rules sent whole, by position ("a0" … "az", "b00" …), made as far as needed. */
const positional: string[] = [];

/** nameAt is the name of the rule at position i of a filter sent whole (a first map). */
export function nameAt(i: number): string {
  if (i >= positional.length) positional.push(...generateNKeysBetween(positional.at(-1) ?? null, null, i + 64 - positional.length));
  return positional[i]!;
}

/**
 * MAX_NAME_LENGTH: an update whose names would grow past this resends the filter whole under positional names.
 * Each insertion between the same two rules lengthens a name by about one character (30 in a row: 7 characters).
 */
const MAX_NAME_LENGTH = 12;

const chunkName = (rule: string, key: string): string => key ? `${rule}.${key}` : rule;

/** dropJson removes a chunk the client holds. */
const dropJson = (rule: string, key: string): string => `"${chunkName(rule, key)}":null`;

/** ChunkPieces is one chunk's text in three pieces, the block's sources apart. */
type ChunkPieces = readonly [string, Block, string];

/** Chunk is one chunk of an update: its pieces, or for a drop its text alone. */
type Chunk = string | ChunkPieces;

function chunk(rule: string, block: Block, head: string): ChunkPieces {
  return [`"${chunkName(rule, block.key)}":[{"SrcIPs":`, block, `${head ? `,${head}` : ''}}]`];
}

/** chunkJson is one chunk's text whole (a first map's). */
function chunkJson(rule: string, block: Block, head: string): string {
  const [before, sources, after] = chunk(rule, block, head);
  return before + sources.text + after;
}

/** filterChunksJson is a whole filter as the PacketFilters of a first map: everything the client held is dropped ("*"). */
export function filterChunksJson(rules: readonly FilterRule[]): string {
  const out = ['"*":null'];
  rules.forEach((r, i) => {
    const head = headOf(r);
    for (const b of blocksOf(r.SrcIPs)) out.push(chunkJson(nameAt(i), b, head));
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
 * FilterUpdate is the PacketFilters that take a client from one filter to the next (null: nothing changed) and the
 * names its rules then have (undefined: positional, nameAt).
 */
export interface FilterUpdate {
  /** json: the update's text whole, joined from pieces on first read. */
  readonly json: string | null;
  names: readonly string[] | undefined;
  /**
   * pieces is json cut around the blocks of sources it sends, which follow one another with nothing between
   * (null with json). A flush compresses each such block once for every session sending it, and only the pieces
   * between them (chunk names, the node's own destinations) per session.
   */
  pieces: ReadonlyArray<string | SharedText> | null;
}

/**
 * filterUpdate is the PacketFilters that take a client holding `prev` under `prevNames` (undefined: positional; as
 * sent by filterChunksJson and earlier updates) to `next`: the chunks that changed or appeared, and null for those
 * that are gone. Rules keep their names where the alignment finds them in both filters; one whose sources changed
 * sends the blocks that changed, one whose destinations changed is sent whole again.
 */
export function filterUpdate(prev: readonly FilterRule[], prevNames: readonly string[] | undefined, next: readonly FilterRule[]): FilterUpdate {
  if (prev === next) return { json: null, names: prevNames, pieces: null };
  const out: Chunk[] = [];
  const prevName = prevNames ? (i: number) => prevNames[i]! : nameAt;
  /** kept: the same destinations under the same name; only changed source blocks go out. */
  const kept = (o: FilterRule, r: FilterRule, name: string): void => {
    if (o === r || o.SrcIPs === r.SrcIPs) return;
    const head = headOf(r);
    for (const c of listDiff(o.SrcIPs, r.SrcIPs)) out.push(c.block ? chunk(name, c.block, head) : dropJson(name, c.key));
  };
  /** replaced: new destinations (or a new rule) under an old name: every chunk again, and drops for the old ones left. */
  const replaced = (o: FilterRule | undefined, r: FilterRule, name: string): void => {
    const head = headOf(r);
    const blocks = blocksOf(r.SrcIPs);
    for (const b of blocks) out.push(chunk(name, b, head));
    if (o) {
      const have = new Set(blocks.map((b) => b.key));
      for (const b of blocksOf(o.SrcIPs)) if (!have.has(b.key)) out.push(dropJson(name, b.key));
    }
  };
  const dropped = (o: FilterRule, name: string): void => { for (const b of blocksOf(o.SrcIPs)) out.push(dropJson(name, b.key)); };
  const done = (names: readonly string[] | undefined): FilterUpdate => piecesOf(out, names);

  // Most updates keep every rule in place (sources joined or left): compare by position.
  if (prev.length === next.length && next.every((r, i) => r === prev[i] || headOf(r, prev[i]) === headOf(prev[i]!))) {
    next.forEach((r, i) => kept(prev[i]!, r, prevName(i)));
    return done(prevNames);
  }
  const names: string[] = [];
  let i = 0;
  const changes = diffArrays(prev.map((r) => headOf(r)), next.map((r) => headOf(r)));
  for (let c = 0; c < changes.length; c++) {
    const ch = changes[c]!;
    if (!ch.added && !ch.removed) {
      for (let x = 0; x < ch.count; x++, i++) { const name = prevName(i); kept(prev[i]!, next[names.length]!, name); names.push(name); }
      continue;
    }
    // A run of removed rules and the run of added ones beside it: pair them up under the old names, drop the
    // removed ones left over, and name the added ones left over between their neighbours.
    let removed = ch.removed ? ch.count : 0, added = ch.added ? ch.count : 0;
    const other = changes[c + 1];
    if (other && (ch.removed ? other.added : other.removed)) {
      if (other.added) added = other.count; else removed = other.count;
      c++;
    }
    for (; removed > 0 && added > 0; removed--, added--, i++) { const name = prevName(i); replaced(prev[i], next[names.length]!, name); names.push(name); }
    for (; removed > 0; removed--, i++) dropped(prev[i]!, prevName(i));
    if (added > 0) {
      const fresh = generateNKeysBetween(names.at(-1) ?? null, i < prev.length ? prevName(i) : null, added);
      for (const name of fresh) { replaced(undefined, next[names.length]!, name); names.push(name); }
    }
  }
  if (names.some((n) => n.length > MAX_NAME_LENGTH)) { const json = filterChunksJson(next); return { json, names: undefined, pieces: [json] }; }
  return done(names.every((n, k) => n === nameAt(k)) ? undefined : names);
}

/** piecesOf is an update's chunks as one JSON object, whole and in pieces around their blocks (see FilterUpdate). */
function piecesOf(out: readonly Chunk[], names: readonly string[] | undefined): FilterUpdate {
  if (!out.length) return { json: null, pieces: null, names };
  const pieces: Array<string | SharedText> = [];
  let own = '{';
  out.forEach((c, i) => {
    if (i) own += ',';
    if (typeof c === 'string') { own += c; return; }
    pieces.push(own + c[0], c[1]);
    own = c[2];
  });
  pieces.push(`${own}}`);
  // The text whole is joined when first read: a flush sending the pieces apart (zstd) never reads it.
  let json: string | undefined;
  return { get json() { return json ??= pieces.map((p) => (typeof p === 'string' ? p : p.text)).join(''); }, pieces, names };
}
