import { PEER_BLOCK_CACHE_BYTES, PEER_BLOCK_IDLE_MS } from './fanout-knobs.js';
import { compressJson } from './frames.js';

const COMMA = 0x2c;

interface Entry { serials: Float64Array; frame: Uint8Array }

/**
 * PeerBlockFrames keeps the compressed frames of full maps' peer blocks. A block is found by its index and the
 * serial numbers of its peers' texts: the mapper numbers each text it makes of a peer (Mapper.peerBytesOf), so a
 * block whose peers have the same serials as when it was compressed is the same text, and anything else (a peer
 * changed, joined the class or left it) compresses a new frame. A join burst thus compresses each block once, not
 * once per joiner. A full map's peers go in blocks of PEER_BLOCK_IDS node ids: ids grow with joins, so every block
 * but the last few keeps its peers from one joiner's first map to the next. Only the serial numbers are kept, not
 * the texts: a peer's text held by a frame would keep its whole 8 KiB Buffer pool slab alive.
 */
export class PeerBlockFrames {
  private readonly entries = new Map<string, Entry>();
  private bytes = 0;
  private lastUse = 0;
  private idleTimer?: NodeJS.Timeout;
  /** hits and misses count blocks found and compressed (metrics, tests). */
  hits = 0;
  misses = 0;

  constructor(private readonly maxBytes = PEER_BLOCK_CACHE_BYTES, private readonly idleMs = PEER_BLOCK_IDLE_MS) {}

  /** size is how many frames are kept. */
  get size(): number { return this.entries.size; }

  /**
   * frameOf is the zstd frame of block `block` of the peers `ids` whose texts are `bufs` (comma-separated), numbered
   * `serials`. A frame of the same peers' older texts is replaced.
   */
  frameOf(block: number, ids: readonly number[], serials: readonly number[], bufs: readonly Buffer[]): Uint8Array {
    this.touch();
    const key = blockKey(block, ids);
    const held = this.entries.get(key);
    if (held && sameSerials(held.serials, serials)) {
      this.hits++;
      // Least recently used first: a hit moves to the end.
      this.entries.delete(key);
      this.entries.set(key, held);
      return held.frame;
    }
    this.misses++;
    if (held) this.drop(key, held);
    // node:zlib hands back a view of its output chunk (128 KiB and more) when one chunk held it: kept as is, each
    // frame would keep that whole chunk alive.
    const made = compressJson(joinWithCommas(bufs));
    const frame = made.byteLength === made.buffer.byteLength ? made : new Uint8Array(made);
    const entry = { serials: Float64Array.from(serials), frame };
    this.entries.set(key, entry);
    this.bytes += frame.length;
    for (const [k, e] of this.entries) {
      if (this.bytes <= this.maxBytes || e === entry) break;
      this.drop(k, e);
    }
    return frame;
  }

  /** clear drops every frame. */
  clear(): void {
    this.entries.clear();
    this.bytes = 0;
    clearTimeout(this.idleTimer);
    this.idleTimer = undefined;
  }

  private drop(key: string, e: Entry): void {
    this.entries.delete(key);
    this.bytes -= e.frame.length;
  }

  /** touch notes a use and arms the timer that clears the frames once none was asked for in idleMs. */
  private touch(): void {
    this.lastUse = performance.now();
    if (this.idleTimer) return;
    const check = (): void => {
      const idle = performance.now() - this.lastUse;
      if (idle >= this.idleMs) { this.clear(); return; }
      this.idleTimer = setTimeout(check, this.idleMs - idle);
      this.idleTimer.unref();
    };
    this.idleTimer = setTimeout(check, this.idleMs);
    this.idleTimer.unref();
  }
}

/** blockKey names a block by its index, its length and a hash of its peers' ids (the serials are compared on a hit). */
function blockKey(block: number, ids: readonly number[]): string {
  let h = 0x811c9dc5;
  for (const id of ids) h = Math.imul(h ^ id, 0x01000193);
  return `${block}:${ids.length}:${h >>> 0}`;
}

function sameSerials(a: Float64Array, b: readonly number[]): boolean {
  if (a.length !== b.length) return false;
  for (let k = 0; k < a.length; k++) if (a[k] !== b[k]) return false;
  return true;
}

/** joinWithCommas is the peers' texts as the elements of a JSON array, without its brackets. */
export function joinWithCommas(bufs: readonly Buffer[]): Buffer {
  let length = Math.max(0, bufs.length - 1);
  for (const b of bufs) length += b.length;
  const out = Buffer.allocUnsafe(length);
  let at = 0;
  bufs.forEach((b, k) => {
    if (k) out[at++] = COMMA;
    out.set(b, at);
    at += b.length;
  });
  return out;
}
