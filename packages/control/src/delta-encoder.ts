import type { SharedText } from './filter-chunks.js';
import { SHARED_BLOCK_MIN, UNSHARED_KEY_LENGTH } from './fanout-knobs.js';
import { compressJson, frame, frameSegments, sharedFrameMinInForce, type WireMessage } from './frames.js';
import type { MapSession } from './map-session.js';
import { wholeText, type DeltaMessage, type DeltaPart } from './delta-message.js';
import type { MapField } from './map-json.js';

/** FanoutCounters count what the fan-out shared (tests, the benchmark). */
export interface FanoutCounters {
  /** blockFrames: blocks of filter sources compressed once per flush for the sessions sending them. */
  blockFrames: number;
  /** partFrames: shared PeersChanged and PeersChangedPatch parts compressed once per flush as frames of their own. */
  partFrames: number;
  /** upsertLists: non-empty lists of nodes a flush sends whole, built rather than reused. */
  upsertLists: number;
  /** segmentedMessages: messages sent to zstd sessions as several frames around shared ones. */
  segmentedMessages: number;
  /** deltas: messages sent and not yet added to the metric (see SessionHub.countDeltas). */
  deltas: number;
}

/** FILTER_HEAD begins a PacketFilters member whose value follows in pieces. */
const FILTER_HEAD = `"${'PacketFilters' satisfies MapField}":`;

/**
 * DeltaEncoder turns one flush's messages into frames, encoding each distinct text once: sessions whose messages
 * have the same key share one frame, and to zstd sessions the parts many messages share go as frames of their own,
 * compressed once (frameSegments), around frames of each session's own text.
 */
export class DeltaEncoder {
  /** frames: the frame of each message key sent so far, per encoding. */
  private readonly frames = { plain: new Map<string, WireMessage>(), zstd: new Map<string, WireMessage>() };
  private readonly partFrames = new Map<string, Uint8Array>();
  private readonly blockFrames = new Map<number, Uint8Array>();
  /** blockSent: the blocks of sources some zstd session of this flush has sent. */
  private readonly blockSent = new Set<number>();
  private readonly sharedMin = sharedFrameMinInForce();
  /**
   * blockMin: in a message cut around blocks of sources anyway, a shorter shared part goes as a frame too: as a
   * frame it costs about 12 bytes and a compressor call per flush, inline a call per session.
   */
  private readonly blockMin = Math.min(this.sharedMin, SHARED_BLOCK_MIN);

  constructor(private readonly counters: FanoutCounters) {}

  /** sendText sends a session a message given as text (the same text: the same frame). */
  sendText(s: MapSession, text: string): void {
    this.sendOne(s, text, () => text);
  }

  /**
   * send sends a session its message. A block of sources goes as a frame of its own from the second zstd session of
   * the flush that sends it on; the first sends it inline (a block only one session sends is not worth a frame).
   */
  send(s: MapSession, m: DeltaMessage): void {
    let blocks = false;
    let inline: Set<SharedText> | undefined;
    const filter = s.zstd ? m.filter : undefined;
    if (filter) {
      for (const x of filter.pieces!) {
        if (typeof x === 'string' || x.text.length < this.blockMin) continue;
        if (this.blockSent.has(x.id)) blocks = true;
        else { this.blockSent.add(x.id); (inline ??= new Set()).add(x); }
      }
    }
    const segmented = s.zstd && (blocks || m.parts.some((p) => this.framed(p, false)));
    if (segmented) this.counters.segmentedMessages++;
    this.sendOne(s, m.key(), () => m.json(), segmented ? () => this.segments(m, blocks, inline) : undefined);
  }

  /**
   * sendOne sends the frame of the message named `key`, made once per flush: by build, when given (a zstd message
   * cut around shared frames), else by compressing json() whole. A key past UNSHARED_KEY_LENGTH holds text only its
   * session sends; it is neither looked up nor kept.
   */
  private sendOne(s: MapSession, key: string | undefined, json: () => string, build?: () => WireMessage): void {
    const k = key === undefined || key.length > UNSHARED_KEY_LENGTH ? undefined : key;
    const frames = s.zstd ? this.frames.zstd : this.frames.plain;
    let buf = k === undefined ? undefined : frames.get(k);
    if (!buf) {
      buf = build ? build() : frame(json(), s.zstd);
      if (k !== undefined) frames.set(k, buf);
    }
    s.send(buf);
    this.counters.deltas++;
  }

  /** framed: a shared part long enough to go as a frame of its own (a shorter one when the message is cut around blocks). */
  private framed(p: DeltaPart, aroundBlocks: boolean): p is Extract<DeltaPart, { kind: 'shared' }> {
    return p.kind === 'shared' && p.text.length >= (aroundBlocks ? this.blockMin : this.sharedMin);
  }

  /** segments is the message's text cut around its shared frames: what lies between is the session's own. */
  private segments(m: DeltaMessage, blocks: boolean, inline: Set<SharedText> | undefined): WireMessage {
    const segments: Array<string | Uint8Array> = [];
    let own = '{';
    m.parts.forEach((p, i) => {
      if (i) own += ',';
      if (this.framed(p, blocks)) { segments.push(own, this.partFrame(p.key, p.text)); own = ''; return; }
      if (p.kind !== 'filter' || !blocks) { own += wholeText(p); return; }
      own += FILTER_HEAD;
      for (const x of p.update.pieces!) {
        if (typeof x === 'string') own += x;
        else if (x.text.length >= this.blockMin && !inline?.has(x)) { segments.push(own, this.blockFrame(x)); own = ''; }
        else own += x.text;
      }
    });
    segments.push(`${own}}`);
    return frameSegments(segments);
  }

  private partFrame(key: string, text: string): Uint8Array {
    let f = this.partFrames.get(key);
    if (!f) {
      f = compressJson(Buffer.from(text));
      this.partFrames.set(key, f);
      this.counters.partFrames++;
    }
    return f;
  }

  private blockFrame(x: SharedText): Uint8Array {
    let f = this.blockFrames.get(x.id);
    if (!f) {
      f = compressJson(Buffer.from(x.text));
      this.blockFrames.set(x.id, f);
      this.counters.blockFrames++;
    }
    return f;
  }
}
