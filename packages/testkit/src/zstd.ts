import { isUtf8 } from 'node:buffer';
import { constants, zstdCompressSync, zstdDecompressSync } from 'node:zlib';
import { decompress as wasmDecompress, init as initWasmZstd } from '@bokuweb/zstd-wasm';
import { OwnText, withoutMembers, type JsonScan } from './own-text.js';

/**
 * WASM_MAX_BODY: frames up to this size are decoded with @bokuweb/zstd-wasm, larger ones with node:zlib. node:zlib
 * builds a stream and a native context per call, many times the cost of decoding a small frame in WASM, and a
 * virtual device receives mostly small frames; on a full map of tens of KB node:zlib is the faster.
 */
const WASM_MAX_BODY = 8 * 1024;

// One instantiation per process, shared with the server's frames.ts (same global name): zstd-wasm's init()
// instantiates its module anew on every call, which corrupts what the server compresses meanwhile.
const zstdReady = globalThis as unknown as Record<symbol, Promise<void> | undefined>;
await (zstdReady[Symbol.for('headway.zstd-wasm.ready')] ??= initWasmZstd());

/**
 * zstdFrameLength is the length of the zstd frame (RFC 8878 §3.1) at the start of data, or undefined when it is
 * cut short or not a frame. A map message may hold several frames (the server compresses a part many sessions
 * share once, see frameSegments), and Tailscale's client decodes them all; neither node:zlib nor zstd-wasm reports
 * where a frame ends (node:zlib stops after the first, zstd-wasm sizes its output by the first frame's header).
 */
export function zstdFrameLength(data: Uint8Array): number | undefined {
  if (data.length < 8) return undefined;
  const magic = (data[0]! | (data[1]! << 8) | (data[2]! << 16) | (data[3]! << 24)) >>> 0;
  if ((magic & 0xfffffff0) === 0x184d2a50) {
    // A skippable frame: magic, a u32 little-endian size, that many bytes.
    const size = (data[4]! | (data[5]! << 8) | (data[6]! << 16) | (data[7]! << 24)) >>> 0;
    return 8 + size <= data.length ? 8 + size : undefined;
  }
  if (magic !== 0xfd2fb528) return undefined;
  const checksum = (data[4]! >> 2) & 1;
  let at = frameHeaderEnd(data[4]!);
  for (;;) {
    if (at + 3 > data.length) return undefined;
    const header = data[at]! | (data[at + 1]! << 8) | (data[at + 2]! << 16);
    const last = header & 1, type = (header >> 1) & 3, size = header >>> 3;
    if (type === 3) return undefined; // reserved block type
    at += 3 + (type === 1 ? 1 : size); // an RLE block holds one byte, repeated size times
    if (at > data.length) return undefined;
    if (last) break;
  }
  at += checksum ? 4 : 0;
  return at <= data.length ? at : undefined;
}

/**
 * frameHeaderEnd is where a zstd frame's first block header starts, from its Frame_Header_Descriptor (RFC 8878
 * §3.1.1.1): after the magic, the descriptor, a window byte unless single-segment, the dictionary id and the
 * content size.
 */
function frameHeaderEnd(descriptor: number): number {
  const singleSegment = (descriptor >> 5) & 1;
  const fcsFlag = descriptor >> 6;
  const dictionaryIdLength = [0, 1, 2, 4][descriptor & 3]!;
  const contentSizeLength = fcsFlag === 0 ? singleSegment : [0, 2, 4, 8][fcsFlag]!;
  return 5 + (singleSegment ? 0 : 1) + dictionaryIdLength + contentSizeLength;
}

/** framesOf is a body of several zstd frames cut into its data frames (skippable ones left out), or undefined for one frame. */
function framesOf(data: Uint8Array): Uint8Array[] | undefined {
  const first = zstdFrameLength(data);
  if (first === undefined || first >= data.length) return undefined;
  const out: Uint8Array[] = [];
  for (let at = 0; at < data.length;) {
    const n = zstdFrameLength(data.subarray(at));
    if (n === undefined) throw new Error(`zstd frame at byte ${at} of ${data.length} is cut short or not a frame`);
    if (data[at + 3] !== 0x18) out.push(data.subarray(at, at + n)); // not a skippable frame
    at += n;
  }
  return out;
}

/** zstdDecompress decodes a zstd body: one frame, or several whose contents follow one another. */
export function zstdDecompress(data: Uint8Array): Buffer {
  const frames = framesOf(data);
  return frames ? Buffer.concat(frames.map(zstdDecompressOne)) : zstdDecompressOne(data);
}

/**
 * zstdDecompressText is zstdDecompress as UTF-8 text. A body of several frames is decoded frame by frame into the
 * text (a character cut between two frames joins up), without a buffer of the whole: in the benchmark's workers,
 * concatenating each message's decoded frames would double its large short-lived buffers.
 */
export function zstdDecompressText(data: Uint8Array): string {
  const frames = framesOf(data);
  if (!frames) return zstdDecompressOne(data).toString('utf8');
  const utf8 = new TextDecoder();
  let text = '';
  for (const f of frames) text += utf8.decode(zstdDecompressOne(f), { stream: true });
  return text + utf8.decode();
}

/**
 * rawContent is what a zstd frame of raw blocks only holds (no checksum, no dictionary): its bytes as they are, read
 * in place. The server puts short text in such frames (rawFrame), several per message; undefined for anything else.
 */
function rawContent(data: Uint8Array): Uint8Array | undefined {
  if (data.length < 9 || data[0] !== 0x28 || data[1] !== 0xb5 || data[2] !== 0x2f || data[3] !== 0xfd) return undefined;
  if (data[4]! & 0b111) return undefined; // a checksum or a dictionary
  const at = frameHeaderEnd(data[4]!);
  if (at + 3 > data.length) return undefined;
  const header = data[at]! | (data[at + 1]! << 8) | (data[at + 2]! << 16);
  // One block, the last, raw, exactly filling the frame: anything else goes to libzstd, which checks it all.
  if ((header & 7) !== 1 || at + 3 + (header >>> 3) !== data.length) return undefined;
  return data.subarray(at + 3);
}

/** zstdDecompressOne decodes one zstd frame (with or without a content-size header) with libzstd. */
function zstdDecompressOne(data: Uint8Array): Buffer {
  const raw = rawContent(data);
  if (raw) return Buffer.from(raw.buffer, raw.byteOffset, raw.byteLength);
  if (data.length <= WASM_MAX_BODY) {
    try {
      const out = wasmDecompress(data);
      return Buffer.from(out.buffer, out.byteOffset, out.byteLength);
    } catch {
      // No content size, or not zstd at all: node:zlib decodes the first and names what is wrong with the second.
    }
  }
  return zstdDecompressSync(data);
}

/** zstdCompress encodes data as one zstd frame at level 3 (zstd's default), as the server does. */
export function zstdCompress(data: Uint8Array): Buffer {
  return zstdCompressSync(data, { params: { [constants.ZSTD_c_compressionLevel]: 3 } });
}

/** MAX_MAP_FRAME_LENGTH bounds one framed MapResponse so a broken length prefix cannot exhaust memory. */
export const MAX_MAP_FRAME_LENGTH = 64 << 20;

/** encodeMapFrame frames a MapResponse as the server sends it: u32 little-endian length + zstd(JSON). */
export function encodeMapFrame(message: object): Buffer {
  const body = zstdCompress(Buffer.from(JSON.stringify(message), 'utf8'));
  const header = Buffer.alloc(4);
  header.writeUInt32LE(body.length, 0);
  return Buffer.concat([header, body]);
}

/**
 * DECODED_CACHE_ENTRIES bounds the process-wide cache of decoded frames. The server compresses a broadcast once
 * and sends every session the same bytes, so N virtual devices in one process would otherwise decompress and
 * parse the same body N times: node:zlib builds a fresh zstd context per call (costly even for a small delta),
 * and N parsed copies of every delta would make the load generator's garbage collector, not the server, the
 * bottleneck of a join burst. Devices that received the same bytes share one deeply frozen message (the
 * netmap code replaces what it changes, never edits a message; a write would throw).
 */
const DECODED_CACHE_ENTRIES = 512;
/** DECODED_CACHE_MAX_BODY: larger bodies (full maps, unique per device) are not worth keeping. */
const DECODED_CACHE_MAX_BODY = 16 * 1024;
/**
 * DECODED_CACHE_KEY_TAIL: a body is looked up by a hash of its length, its middle bytes and its last bytes, then
 * compared whole (hashing it all cost more). The middle matters for a body of several frames: its last frame is often a session's
 * few own bytes ('}'), the same in every message of a flush, and keys of length and tail alone would collide and
 * evict each other, costing the workers far more CPU in a policy change.
 */
const DECODED_CACHE_KEY_TAIL = 24;
const decodedCache = new Map<number, { body: Buffer; value: unknown }>();

/** remember puts an entry in one of the decoder's caches, dropping its oldest at DECODED_CACHE_ENTRIES. */
function remember<V>(cache: Map<number, V>, key: number, value: V): void {
  if (cache.size >= DECODED_CACHE_ENTRIES) cache.delete(cache.keys().next().value!);
  cache.set(key, value);
}

/** freezeShared: shared messages are deeply frozen (tests); a benchmark's load generator turns it off (setFreezeShared). */
let freezeShared = true;

/**
 * setFreezeShared turns the freezing of shared decoded messages on or off. Tests keep it on, so netmap code that
 * edits a message it shares with other devices throws; the benchmark's workers run that same code and turn it off,
 * since walking every object of every shared message costs them as much as parsing it.
 */
export function setFreezeShared(on: boolean): void {
  freezeShared = on;
}

/** skipped: top-level members of a message the decoder leaves out (see setSkippedMembers). */
let skipped: ReadonlySet<string> = new Set();

/**
 * setSkippedMembers makes the decoder leave out a message's top-level members of these names without building them
 * (none by default). The benchmark's workers skip the packet filter, which their devices never read: it is most of
 * the text a device receives in a join or a policy change.
 */
export function setSkippedMembers(names: readonly string[]): void {
  skipped = new Set(names);
}

/** skipMembers is a message's text without the skipped members (and the value marks those held, see VALUE_MARK). */
function skipMembers(text: string): { text: string; marks: number } {
  const cut = skipped.size ? withoutMembers(text, skipped) : undefined;
  if (!cut || cut.dropped.some((d) => d.includes(RUN_MARK))) return { text, marks: 0 };
  return { text: cut.text, marks: cut.dropped.reduce((n, d) => n + d.split(VALUE_MARK).length - 1, 0) };
}

function deepFreeze<T>(v: T): T {
  if (!freezeShared) return v;
  if (v && typeof v === 'object' && !Object.isFrozen(v)) {
    Object.freeze(v);
    for (const x of Object.values(v)) deepFreeze(x);
  }
  return v;
}

/** parseBody decompresses and parses one frame body. */
function parseBody(body: Buffer): unknown {
  let json: string;
  try {
    json = zstdDecompressText(body);
  } catch (err) {
    throw new Error(`map frame is not valid zstd: ${(err as Error).message}`);
  }
  try {
    return JSON.parse(skipMembers(json).text);
  } catch (err) {
    throw new Error(`map frame is not valid JSON: ${(err as Error).message}`);
  }
}

/**
 * MEMBERS_MIN_FRAME: a frame of a body of several frames this large or larger is looked up among the decoded
 * member lists (decodeFrame) before being decoded. The server gives a large part many sessions share (a
 * PeersChanged list, say) a frame of its own and sends every session the same bytes of it, around each session's
 * own parts; decoding and parsing that list once for every device holding it would be much of what the
 * benchmark's workers spend on a join burst's messages.
 */
const MEMBERS_MIN_FRAME = 256;
const membersCache = new Map<number, { frame: Buffer; members: Record<string, unknown> }>();
/** textCache: large frames that are not member lists (a block of a filter rule's sources many messages hold). */
const textCache = new Map<number, { frame: Buffer; text: string }>();

/**
 * cacheKey is a 32-bit FNV-1a hash of a body's length, middle and last bytes (see DECODED_CACHE_KEY_TAIL), made
 * without an allocation: every frame of every message is looked up. Entries are compared whole on a hit.
 */
function cacheKey(body: Uint8Array): number {
  let h = Math.imul(0x811c9dc5 ^ body.length, 0x01000193);
  const mid = body.length >> 1;
  for (let i = mid, end = Math.min(body.length, mid + DECODED_CACHE_KEY_TAIL); i < end; i++) h = Math.imul(h ^ body[i]!, 0x01000193);
  for (let i = Math.max(0, body.length - DECODED_CACHE_KEY_TAIL); i < body.length; i++) h = Math.imul(h ^ body[i]!, 0x01000193);
  return h;
}

/**
 * decodeFrame is one frame of a body of several: its text parsed as the members of an object (`"PeersChanged":[…]`),
 * shared (frozen) between every message holding that frame, or else its text (a piece of a session's own text).
 * Member lists are kept apart from texts: a session's own large frames are its own, and kept with the lists they
 * would evict them. Undefined when the frame is not whole UTF-8 (a character cut at its edge).
 */
function decodeFrame(frame: Uint8Array): { members: Record<string, unknown> } | { text: string } | undefined {
  const large = frame.length >= MEMBERS_MIN_FRAME;
  const key = large ? cacheKey(frame) : 0;
  const hit = large ? membersCache.get(key) : undefined;
  if (hit && hit.frame.equals(frame)) return { members: hit.members };
  // A large frame that is not a member list but a piece of text many messages hold (a block of a filter rule's
  // sources, which the server compresses once per flush) is decoded once too.
  const known = large ? textCache.get(key) : undefined;
  if (known && known.frame.equals(frame)) return { text: known.text };
  let text: string;
  // isUtf8 and toString are native calls without TextDecoder's per-call cost, which a device's many small frames feel.
  try {
    const bytes = zstdDecompressOne(frame);
    if (!isUtf8(bytes)) return undefined;
    text = bytes.toString('utf8');
  } catch { return undefined; }
  if (large && !text.startsWith('"')) remember(textCache, key, { frame: Buffer.from(frame), text });
  if (!large || !text.startsWith('"')) return { text };
  let members: Record<string, unknown>;
  try { members = JSON.parse(`{${text}}`) as Record<string, unknown>; } catch { return { text }; }
  deepFreeze(members);
  remember(membersCache, key, { frame: Buffer.from(frame), members });
  return { members };
}

/**
 * runsCache: large frames holding a run of array elements (`{…},{…}`: a block of a full map's peers, which the server
 * compresses once for every joiner holding it), parsed once and shared (frozen) by every message holding the frame.
 */
const runsCache = new Map<number, { frame: Buffer; elements: unknown[] }>();

/** runOf is a frame's text parsed as array elements (cached), or undefined when it is not a run of objects. */
function runOf(frame: Uint8Array, text: string): unknown[] | undefined {
  const key = cacheKey(frame);
  const hit = runsCache.get(key);
  if (hit && hit.frame.equals(frame)) return hit.elements;
  let elements: unknown;
  try { elements = JSON.parse(`[${text}]`); } catch { return undefined; }
  if (!Array.isArray(elements) || !elements.length) return undefined;
  deepFreeze(elements);
  remember(runsCache, key, { frame: Buffer.from(frame), elements });
  return elements;
}

/**
 * valuesCache: large frames holding one whole JSON array that is a member's value (a block of a filter rule's
 * sources, `"SrcIPs":[…]`, which the server compresses once per flush for every session it sends it to), parsed
 * once and shared (frozen) by every message holding the frame. Parsing those blocks again inside each device's own
 * text would be most of what the benchmark's workers spend on a join burst's filter updates.
 */
const valuesCache = new Map<number, { frame: Buffer; value: unknown[] }>();

/**
 * VALUE_MIN_TEXT: a whole array this long or longer is parsed once (valueOf); VALUE_MIN_FRAME: frames this long or
 * longer are looked up among those before being decoded. Most blocks of sources are a few hundred characters and
 * compress to less than MEMBERS_MIN_FRAME, so without this they would be parsed inside every device's own text;
 * they far outnumber the large ones.
 */
const VALUE_MIN_TEXT = 64;
const VALUE_MIN_FRAME = 24;

/** knownValue is the value a frame was parsed to before (valueOf), if it still is cached. */
function knownValue(frame: Uint8Array): unknown[] | undefined {
  const hit = valuesCache.get(cacheKey(frame));
  return hit && hit.frame.equals(frame) ? hit.value : undefined;
}

/** valueOf is a frame's text parsed as one array (cached), or undefined when it is not one. */
function valueOf(frame: Uint8Array, text: string): unknown[] | undefined {
  // A frame of VALUE_MIN_FRAME bytes or more was looked up (knownValue) before it was decoded.
  const known = frame.length < VALUE_MIN_FRAME ? knownValue(frame) : undefined;
  if (known) return known;
  let value: unknown;
  try { value = JSON.parse(text); } catch { return undefined; }
  if (!Array.isArray(value)) return undefined;
  deepFreeze(value);
  remember(valuesCache, cacheKey(frame), { frame: Buffer.from(frame), value });
  return value;
}

/**
 * VALUE_MARK stands, in the text parseSegmented parses, for a member value cut out of it (valueOf): the JSON string
 * of VALUE_MARK_VALUE and the value's number, replaced after parsing. As with run marks, a mark the message holds
 * itself makes the body be parsed whole.
 */
const VALUE_MARK = '\\u0000headway-value:';
const VALUE_MARK_VALUE = '\u0000headway-value:';

/** spliceValues replaces every value mark in the own text's parsed value by its value; false if one is unknown. */
function spliceValues(v: unknown, values: unknown[][], found: { n: number }): boolean {
  const swap = (x: unknown): unknown => {
    if (typeof x === 'string') {
      if (!x.startsWith(VALUE_MARK_VALUE)) return x;
      const value = values[Number(x.slice(VALUE_MARK_VALUE.length))];
      if (value) found.n++;
      return value;
    }
    if (x && typeof x === 'object' && !spliceValues(x, values, found)) return undefined;
    return x;
  };
  if (Array.isArray(v)) {
    for (let i = 0; i < v.length; i++) { const x = swap(v[i]); if (x === undefined) return false; v[i] = x; }
  } else if (v && typeof v === 'object') {
    const o = v as Record<string, unknown>;
    for (const k of Object.keys(o)) { const x = swap(o[k]); if (x === undefined) return false; o[k] = x; }
  }
  return true;
}

/**
 * RUN_MARK stands, in the text parseSegmented parses, for a run of elements cut out of a top-level array: the JSON
 * string of RUN_VALUE (its first character U+0000) and the run's number, replaced after parsing by the run's
 * elements. A mark the message itself holds makes the count of marks wrong, and the body is parsed whole.
 */
const RUN_MARK = '\\u0000headway-run:';
const RUN_VALUE = '\u0000headway-run:';

/** spliceRuns replaces every run mark in the top-level arrays of `out` by its run's elements; false if a mark is missing or misplaced. */
function spliceRuns(out: Record<string, unknown>, runs: unknown[][]): boolean {
  let found = 0;
  for (const [k, v] of Object.entries(out)) {
    if (!Array.isArray(v) || !v.some((x) => typeof x === 'string' && x.startsWith(RUN_VALUE))) continue;
    const next: unknown[] = [];
    for (const x of v) {
      if (typeof x !== 'string' || !x.startsWith(RUN_VALUE)) { next.push(x); continue; }
      const run = runs[Number(x.slice(RUN_VALUE.length))];
      if (!run) return false;
      found++;
      for (const e of run) next.push(e);
    }
    out[k] = next;
  }
  return found === runs.length;
}

/**
 * parseSegmented parses a body of several frames whose large frames are member lists of the top-level object
 * (decodeFrame), each parsed once however many messages hold it, and the rest, the message's own text, here.
 * The whole text must have been valid JSON: each list sits between `{` or `,` and `,` or `}` at the top level,
 * its neighbours' comma is taken out once, and the lists' keys are not among the own text's. Undefined when a
 * body is not cut that way (parseBody decodes it whole then, and names what is wrong).
 */
function parseSegmented(frames: Uint8Array[]): unknown {
  const own = new OwnText();
  const lists: Array<Record<string, unknown>> = [];
  const runs: unknown[][] = [];
  // The own text is scanned only as far as a run's or a member list's place must be checked, and each part of it
  // once: a policy change's messages are hundreds of KB of own text with no run in them, and scanning each device's
  // cost the workers seconds.
  const scanOwn = (): JsonScan => own.scan();
  let hole = false; // a list was cut out right before the next own text
  let needMember = false; // a comma after `{` was taken out: a member must come next
  let afterRun = false; // a run of elements was cut out right before the next own text
  const values: unknown[][] = [];
  let afterValue = false; // a member's value was cut out right before the next own text
  /** valueHere: own text so far ends with `"name":` in an object, where a member's whole value may be cut out. */
  const valueHere = (): boolean => {
    if (hole || needMember || afterRun || afterValue || !/:\s*$/.test(own.tail)) return false;
    const at = scanOwn();
    return !at.inString && !at.overclosed && at.open.at(-1) === 0x7b;
  };
  const takeValue = (value: unknown[]): void => {
    own.append(`"${VALUE_MARK}${values.length}"`, true);
    values.push(value);
    afterValue = true;
  };
  for (const f of frames) {
    // A frame parsed before as a member's value (a block of sources many sessions were sent): not even decoded again.
    const known = f.length >= VALUE_MIN_FRAME ? knownValue(f) : undefined;
    if (known && valueHere()) { takeValue(known); continue; }
    const piece = decodeFrame(f);
    if (!piece) return undefined;
    // A run of objects right after `[` or `,` in a top-level array (a block of a full map's peers): parsed once.
    if ('text' in piece && f.length >= MEMBERS_MIN_FRAME && !hole && !needMember && !afterRun && piece.text.startsWith('{')
      && /[[,]\s*$/.test(own.tail)) {
      const at = scanOwn();
      const elements = !at.inString && !at.overclosed && at.open.length === 2 && at.open[0] === 0x7b && at.open[1] === 0x5b ? runOf(f, piece.text) : undefined;
      if (elements) {
        own.append(`"${RUN_MARK}${runs.length}"`, true);
        runs.push(elements);
        afterRun = true;
        continue;
      }
    }
    // A whole array as a member's value, right after `"name":` in an object (a block of a filter rule's sources): parsed once.
    if ('text' in piece && piece.text.length >= VALUE_MIN_TEXT && piece.text.startsWith('[') && valueHere()) {
      const value = valueOf(f, piece.text);
      if (value) { takeValue(value); continue; }
    }
    if ('members' in piece) {
      // A list follows `{`, or a value and `,`, at depth 1: its comma is taken out (the list keeps the next one).
      if (hole || afterRun || afterValue) return undefined;
      own.trimEnd();
      if (own.endsWith(',')) {
        own.trimEnd(1);
        own.trimEnd();
        if (own.endsWith('{') || own.endsWith(',') || needMember) return undefined;
      } else if (!own.endsWith('{')) return undefined;
      const at = scanOwn();
      if (at.inString || at.overclosed || at.open.length !== 1) return undefined;
      lists.push(piece.members);
      hole = true;
      needMember = false;
      continue;
    }
    // Leading blanks go only where they are between tokens (after a list, or a comma): a frame may begin inside a string.
    let text = hole || needMember ? piece.text.trimStart() : piece.text;
    if (hole) {
      // What follows a list is `,` or `}`; right after `{` the comma goes too, and a member must follow it.
      if (!(text.startsWith(',') || text.startsWith('}'))) return undefined;
      if (own.endsWith('{') && text.startsWith(',')) { text = text.slice(1).trimStart(); needMember = true; }
      hole = false;
    }
    if (needMember && text) {
      if (!text.startsWith('"')) return undefined;
      needMember = false;
    }
    if (afterRun || afterValue) {
      // What follows a run is `,` or `]`; what follows a member's value, `,` or `}` (never both: each cut needs the other off).
      const next = text.trimStart();
      if (next && !(next.startsWith(',') || next.startsWith(afterRun ? ']' : '}'))) return undefined;
      if (next) afterRun = afterValue = false;
    }
    if (runs.length && text.includes(RUN_MARK)) return undefined;
    if (values.length && text.includes(VALUE_MARK)) return undefined;
    own.append(text);
  }
  if (hole || needMember || afterRun || afterValue) return undefined;
  let value: unknown;
  // With no member list or run among the frames, `own` is every frame's text as it came: the whole message.
  const { text, marks } = skipMembers(own.text());
  try { value = JSON.parse(text); } catch { return undefined; }
  if (values.length) {
    // Before the runs and lists go in: only the own text's values are walked, not the shared ones.
    const found = { n: 0 };
    if (!spliceValues(value, values, found) || found.n !== values.length - marks) return undefined;
  }
  if (!lists.length && !runs.length) return value;
  if (!value || typeof value !== 'object' || Array.isArray(value)) return undefined;
  const out = value as Record<string, unknown>;
  if (runs.length && !spliceRuns(out, runs)) return undefined;
  for (const members of lists) {
    for (const k of Object.keys(members)) {
      if (Object.hasOwn(out, k)) return undefined;
      if (!skipped.has(k)) out[k] = members[k];
    }
  }
  return out;
}

/** decodeBody is the message one frame body holds, shared (frozen) between devices that received the same bytes. */
function decodeBody(body: Buffer): unknown {
  let frames: Uint8Array[] | undefined;
  try { frames = framesOf(body); } catch { frames = undefined; } // parseBody names what is wrong
  if (frames) {
    const v = parseSegmented(frames);
    if (v !== undefined) return v;
  }
  if (body.length > DECODED_CACHE_MAX_BODY) return parseBody(body);
  const key = cacheKey(body);
  const hit = decodedCache.get(key);
  if (hit && hit.body.equals(body)) return hit.value;
  const value = deepFreeze(parseBody(body));
  remember(decodedCache, key, { body: Buffer.from(body), value });
  return value;
}

/**
 * MapFrameDecoder turns a byte stream of framed MapResponses into JSON values, across arbitrary chunking.
 * Chunks are kept in a list until a whole frame is there, so a large map arriving in transport-record-sized
 * pieces is joined once rather than re-copied on every piece.
 */
export class MapFrameDecoder {
  private chunks: Buffer[] = [];
  private buffered = 0;

  /** push adds bytes and returns every message completed by them. */
  push(chunk: Buffer): unknown[] {
    if (chunk.length) { this.chunks.push(chunk); this.buffered += chunk.length; }
    const out: unknown[] = [];
    while (this.buffered >= 4) {
      const head = this.contiguous(4);
      const length = head.readUInt32LE(0);
      if (length > MAX_MAP_FRAME_LENGTH) throw new Error(`map frame length ${length} exceeds ${MAX_MAP_FRAME_LENGTH}`);
      if (this.buffered < 4 + length) break;
      const whole = this.contiguous(4 + length);
      const body = whole.subarray(4, 4 + length);
      this.consume(4 + length);
      out.push(decodeBody(body));
    }
    return out;
  }

  /** contiguous returns the first n buffered bytes as one buffer, merging leading chunks only when needed. */
  private contiguous(n: number): Buffer {
    if (this.chunks[0]!.length < n) this.chunks = [Buffer.concat(this.chunks, this.buffered)];
    return this.chunks[0]!;
  }

  private consume(n: number): void {
    const first = this.chunks[0]!;
    if (first.length === n) this.chunks.shift();
    else this.chunks[0] = first.subarray(n);
    this.buffered -= n;
  }

  /** leftover is how many bytes of an incomplete frame are buffered (non-zero at stream end = truncated). */
  get leftover(): number {
    return this.buffered;
  }
}
