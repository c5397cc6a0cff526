import { H2Error, HpackDecoder } from './hpack.js';
import { FrameBudget, IDLE_FRAMES, MAX_DECODED_HEADER_LIST, MAX_HEADER_BLOCK, MAX_HEADER_FRAMES, MAX_HEADER_LIST_SIZE, MAX_QUEUED_REPLIES, RESETS } from './h2-limits.js';
import { DEFAULT_WINDOW, H2_ERROR, H2Stream, payloadLength, pushPieces, RequestHeaders } from './h2-stream.js';

export { H2_ERROR, H2Stream } from './h2-stream.js';

/**
 * The control protocol's HTTP/2 server (RFC 9113), run over each device's Noise connection.
 *
 * Why not node:http2 (nghttp2) over the Noise stream: side by side (docs/performance.md), a node:http2 session
 * costs several times the memory per session (most of it nghttp2's C memory, plus Node's adapter for a JavaScript
 * stream) and about twice the CPU per small write and several times per MB of a stream. With thousands of idle
 * map polls memory per session is what matters most, and a control connection needs a small part of HTTP/2:
 * requests from one client with small bodies, and responses whose bodies are written as the server has them. This
 * server does that part completely (flow control both ways, HPACK decoding, CONTINUATION, padding, PING, SETTINGS,
 * GOAWAY, RST_STREAM) and answers anything else with the error RFC 9113 names, within the limits a production
 * stack puts on a peer (h2-limits.ts); CI runs the h2spec conformance suite against it (test/h2spec.test.ts).
 */

const DATA = 0x0;
const HEADERS = 0x1;
const PRIORITY = 0x2;
const RST_STREAM = 0x3;
const SETTINGS = 0x4;
const PUSH_PROMISE = 0x5;
const PING = 0x6;
const GOAWAY = 0x7;
const WINDOW_UPDATE = 0x8;
const CONTINUATION = 0x9;

const FLAG_END_STREAM = 0x1;
const FLAG_ACK = 0x1;
const FLAG_END_HEADERS = 0x4;
const FLAG_PADDED = 0x8;
const FLAG_PRIORITY = 0x20;

const SETTINGS_ENABLE_PUSH = 0x2;
const SETTINGS_MAX_CONCURRENT_STREAMS = 0x3;
const SETTINGS_INITIAL_WINDOW_SIZE = 0x4;
const SETTINGS_MAX_FRAME_SIZE = 0x5;
const SETTINGS_MAX_HEADER_LIST_SIZE = 0x6;

const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1');
const FRAME_HEADER_LENGTH = 9;
const MAX_WINDOW = 2 ** 31 - 1;
/** MAX_FRAME_SIZE is SETTINGS_MAX_FRAME_SIZE's default, which this server keeps for what it receives. */
const MAX_FRAME_SIZE = 16_384;
const MIN_PEER_FRAME_SIZE = 16_384;
const MAX_PEER_FRAME_SIZE = 16_777_215;
/** A receive window is topped up once this much of it is used. */
const WINDOW_REFRESH = 32_768;
/** MAX_BUFFERED caps request body bytes held per connection: past it the connection window is not topped up. */
const MAX_BUFFERED = 4 * 1024 * 1024;
/**
 * MAX_WRITE bounds one write to the transport: the Noise connection joins and seals a write in buffers it keeps
 * for writes up to 256 KiB and allocates two new ones past that, which costs a stream several times the CPU per MB
 * (docs/performance.md).
 */
const MAX_WRITE = 256 * 1024;
/** A connection that sent GOAWAY or failed is destroyed this long after, if the peer has not closed it. */
const CLOSE_GRACE_MS = 1_000;

const EMPTY = Buffer.alloc(0);

/** H2Transport is what the server needs of a connection: a Noise connection (NoiseConn) is one. */
export interface H2Transport {
  /** writeRecords sends bytes, in order, as one write; the parts may be reused once it returns. */
  writeRecords(parts: readonly Uint8Array[]): void;
  on(event: 'data', listener: (chunk: Buffer) => void): unknown;
  on(event: 'close' | 'end', listener: () => void): unknown;
  end(): unknown;
  destroy(): unknown;
  readonly destroyed: boolean;
  /** sendBacklog is how many bytes written are still waiting to go out (the peer has not read them). */
  sendBacklog(): number;
}

export interface H2SessionOptions {
  /** onStream is called for each request once its headers are in; its body may still be arriving. */
  onStream: (stream: H2Stream) => void;
  /** onError hears connection errors this side detected, before the GOAWAY that reports them goes out. */
  onError?: (err: H2Error) => void;
  maxConcurrentStreams?: number;
  /** bodyLimit is the largest request body kept; past it body() is refused with status 413. */
  bodyLimit?: number;
  /** bodyTimeoutMs cancels (RST_STREAM CANCEL) a request whose body has not ended this long after its headers. */
  bodyTimeoutMs?: number;
  /** now is the clock the per-connection frame budgets refill by (tests inject one). */
  now?: () => number;
}

/**
 * H2Session is the server side of one HTTP/2 connection. It sends its SETTINGS at once, then reads the
 * client's preface and frames from the transport's 'data' events. Frames it sends within one tick go out as
 * one write.
 */
export class H2Session {
  readonly streams = new Map<number, H2Stream>();
  private readonly hpack = new HpackDecoder();
  private pending: Buffer = EMPTY;
  private prefaceSeen = false;
  private settingsSeen = false;
  private lastStreamId = 0;
  private goawaySent = false;
  private peerGone = false;
  private closed = false;
  /** sendWindow is the connection's flow-control window for what this side sends. */
  private sendWindow = DEFAULT_WINDOW;
  private peerInitialWindow = DEFAULT_WINDOW;
  private peerMaxFrame = MIN_PEER_FRAME_SIZE;
  /** recvWindow is what the peer may still send on the connection before the next WINDOW_UPDATE. */
  private recvWindow = DEFAULT_WINDOW;
  /** buffered counts request body bytes held by streams (MAX_BUFFERED). */
  private buffered = 0;
  private continuation?: { id: number; flags: number; parts: Buffer[]; size: number; frames: number; selfDependent: boolean };
  /** resets and idleFrames are the peer's budgets of stream resets and of frames that ask for no work (h2-limits.ts). */
  private readonly resets: FrameBudget;
  private readonly idleFrames: FrameBudget;
  /** repliesQueued counts acknowledgements and resets queued since the transport last had nothing waiting. */
  private repliesQueued = 0;
  private blocked?: Set<H2Stream>;
  private outbox?: Uint8Array[];
  private readonly flush = (): void => {
    const parts = this.outbox;
    this.outbox = undefined;
    if (!parts || this.transport.destroyed) return;
    const drained = this.transport.sendBacklog() === 0;
    // A flush after a window opens can hold megabytes; the transport is handed them in writes of MAX_WRITE at most.
    let start = 0;
    let size = 0;
    for (let i = 0; i < parts.length; i++) {
      if (size + parts[i]!.length > MAX_WRITE && i > start) {
        this.transport.writeRecords(parts.slice(start, i));
        start = i;
        size = 0;
      }
      size += parts[i]!.length;
    }
    this.transport.writeRecords(start === 0 ? parts : parts.slice(start));
    // Everything queued before went out, and so did this: the peer reads.
    if (drained && this.transport.sendBacklog() === 0) this.repliesQueued = 0;
  };

  constructor(private readonly transport: H2Transport, readonly opts: H2SessionOptions) {
    const now = opts.now ?? Date.now;
    this.resets = new FrameBudget(RESETS, now);
    this.idleFrames = new FrameBudget(IDLE_FRAMES, now);
    const settings = Buffer.alloc(12);
    settings.writeUInt16BE(SETTINGS_MAX_CONCURRENT_STREAMS, 0);
    settings.writeUInt32BE(opts.maxConcurrentStreams ?? 250, 2);
    settings.writeUInt16BE(SETTINGS_MAX_HEADER_LIST_SIZE, 6);
    settings.writeUInt32BE(MAX_HEADER_LIST_SIZE, 8);
    this.frameOut(SETTINGS, 0, 0, settings);
    transport.on('data', (chunk) => this.receive(chunk));
    transport.on('close', () => this.end());
    // The peer closed its side: HTTP/2 has no use for a half-open connection (nothing more can be asked).
    transport.on('end', () => this.finish());
  }

  /** close sends GOAWAY (no error): no new requests are taken, and the connection ends once its streams have. */
  close(): void {
    if (this.closed || this.goawaySent) return;
    this.goaway(H2_ERROR.NO_ERROR);
    if (this.streams.size === 0) this.finish();
  }

  private receive(chunk: Buffer): void {
    if (this.closed) return;
    const buf = this.pending.length ? Buffer.concat([this.pending, chunk]) : chunk;
    let at = 0;
    try {
      if (!this.prefaceSeen) {
        const n = Math.min(buf.length, PREFACE.length);
        if (!buf.subarray(0, n).equals(PREFACE.subarray(0, n))) throw new H2Error(H2_ERROR.PROTOCOL_ERROR, 'the connection does not begin with the HTTP/2 client preface');
        if (n < PREFACE.length) { this.pending = Buffer.from(buf); return; }
        this.prefaceSeen = true;
        at = PREFACE.length;
      }
      while (buf.length - at >= FRAME_HEADER_LENGTH) {
        const length = buf.readUIntBE(at, 3);
        if (length > MAX_FRAME_SIZE) throw new H2Error(H2_ERROR.FRAME_SIZE_ERROR, `a frame of ${length} bytes exceeds SETTINGS_MAX_FRAME_SIZE (${MAX_FRAME_SIZE})`);
        if (buf.length - at < FRAME_HEADER_LENGTH + length) break;
        const type = buf[at + 3]!;
        const flags = buf[at + 4]!;
        const id = buf.readUInt32BE(at + 5) & 0x7fffffff;
        const payload = buf.subarray(at + FRAME_HEADER_LENGTH, at + FRAME_HEADER_LENGTH + length);
        at += FRAME_HEADER_LENGTH + length;
        this.frame(type, flags, id, payload);
        if (this.closed) return;
      }
    } catch (err) {
      this.fail(err instanceof H2Error ? err : new H2Error(H2_ERROR.INTERNAL_ERROR, (err as Error).message));
      return;
    }
    // A partial frame is copied: a view would keep the whole chunk it came in.
    this.pending = at === buf.length ? EMPTY : Buffer.from(buf.subarray(at));
  }

  private frame(type: number, flags: number, id: number, payload: Buffer): void {
    if (this.continuation && (type !== CONTINUATION || id !== this.continuation.id)) {
      throw new H2Error(H2_ERROR.PROTOCOL_ERROR, `expected CONTINUATION for stream ${this.continuation.id}, got frame type ${type} on stream ${id}`);
    }
    if (!this.settingsSeen) {
      if (type !== SETTINGS || (flags & FLAG_ACK)) throw new H2Error(H2_ERROR.PROTOCOL_ERROR, 'the client preface must be followed by a SETTINGS frame');
      this.settingsSeen = true;
    }
    switch (type) {
      case DATA: return this.onData(flags, id, payload);
      case HEADERS: return this.onHeaders(flags, id, payload);
      case PRIORITY:
        this.spend(this.idleFrames);
        if (id === 0) throw new H2Error(H2_ERROR.PROTOCOL_ERROR, 'PRIORITY on stream 0');
        if (payload.length !== 5) this.resetStream(id, H2_ERROR.FRAME_SIZE_ERROR);
        else if ((payload.readUInt32BE(0) & 0x7fffffff) === id) this.resetStream(id, H2_ERROR.PROTOCOL_ERROR); // RFC 9113 §5.3.1
        return;
      case RST_STREAM: {
        if (id === 0) throw new H2Error(H2_ERROR.PROTOCOL_ERROR, 'RST_STREAM on stream 0');
        if (payload.length !== 4) throw new H2Error(H2_ERROR.FRAME_SIZE_ERROR, `RST_STREAM of ${payload.length} bytes`);
        if (id > this.lastStreamId) throw new H2Error(H2_ERROR.PROTOCOL_ERROR, `RST_STREAM on idle stream ${id}`);
        this.spend(this.resets);
        const s = this.streams.get(id);
        if (s) this.closeStream(s);
        return;
      }
      case SETTINGS: return this.onSettings(flags, id, payload);
      case PUSH_PROMISE: throw new H2Error(H2_ERROR.PROTOCOL_ERROR, 'a client sent PUSH_PROMISE');
      case PING:
        if (id !== 0) throw new H2Error(H2_ERROR.PROTOCOL_ERROR, 'PING on a stream');
        if (payload.length !== 8) throw new H2Error(H2_ERROR.FRAME_SIZE_ERROR, `PING of ${payload.length} bytes`);
        this.spend(this.idleFrames); // this server sends no PING, so an acknowledgement asks for no work either
        if (!(flags & FLAG_ACK)) this.replyOut(PING, FLAG_ACK, 0, Buffer.from(payload));
        return;
      case GOAWAY:
        if (id !== 0) throw new H2Error(H2_ERROR.PROTOCOL_ERROR, 'GOAWAY on a stream');
        if (payload.length < 8) throw new H2Error(H2_ERROR.FRAME_SIZE_ERROR, `GOAWAY of ${payload.length} bytes`);
        this.peerGone = true;
        if (this.streams.size === 0) this.finish();
        return;
      case WINDOW_UPDATE: return this.onWindowUpdate(id, payload);
      case CONTINUATION: {
        const c = this.continuation;
        if (!c) throw new H2Error(H2_ERROR.PROTOCOL_ERROR, `CONTINUATION on stream ${id} without HEADERS before it`);
        c.size += payload.length;
        if (c.size > MAX_HEADER_BLOCK) throw new H2Error(H2_ERROR.ENHANCE_YOUR_CALM, `a header block over ${MAX_HEADER_BLOCK} bytes`);
        if (++c.frames > MAX_HEADER_FRAMES) throw new H2Error(H2_ERROR.ENHANCE_YOUR_CALM, `a header block in over ${MAX_HEADER_FRAMES} frames`);
        if (payload.length) c.parts.push(Buffer.from(payload));
        if (flags & FLAG_END_HEADERS) {
          this.continuation = undefined;
          this.onHeaderBlock(c.id, c.flags, Buffer.concat(c.parts), c.selfDependent);
        }
        return;
      }
      default:
        this.spend(this.idleFrames);
        return; // unknown frame types are ignored (RFC 9113 §4.1)
    }
  }

  private onSettings(flags: number, id: number, payload: Buffer): void {
    if (id !== 0) throw new H2Error(H2_ERROR.PROTOCOL_ERROR, 'SETTINGS on a stream');
    this.spend(this.idleFrames);
    if (flags & FLAG_ACK) {
      if (payload.length !== 0) throw new H2Error(H2_ERROR.FRAME_SIZE_ERROR, 'SETTINGS acknowledgement with a payload');
      return;
    }
    if (payload.length % 6 !== 0) throw new H2Error(H2_ERROR.FRAME_SIZE_ERROR, `SETTINGS of ${payload.length} bytes is not a multiple of 6`);
    for (let at = 0; at < payload.length; at += 6) {
      const key = payload.readUInt16BE(at);
      const value = payload.readUInt32BE(at + 2);
      if (key === SETTINGS_ENABLE_PUSH && value > 1) throw new H2Error(H2_ERROR.PROTOCOL_ERROR, `SETTINGS_ENABLE_PUSH ${value}`);
      if (key === SETTINGS_INITIAL_WINDOW_SIZE) {
        if (value > MAX_WINDOW) throw new H2Error(H2_ERROR.FLOW_CONTROL_ERROR, `SETTINGS_INITIAL_WINDOW_SIZE ${value} exceeds 2^31-1`);
        const delta = value - this.peerInitialWindow;
        this.peerInitialWindow = value;
        for (const s of this.streams.values()) {
          s.sendWindow += delta;
          if (s.sendWindow > MAX_WINDOW) throw new H2Error(H2_ERROR.FLOW_CONTROL_ERROR, `stream ${s.id}'s window exceeds 2^31-1`);
        }
      }
      if (key === SETTINGS_MAX_FRAME_SIZE) {
        if (value < MIN_PEER_FRAME_SIZE || value > MAX_PEER_FRAME_SIZE) throw new H2Error(H2_ERROR.PROTOCOL_ERROR, `SETTINGS_MAX_FRAME_SIZE ${value}`);
        this.peerMaxFrame = value;
      }
    }
    this.replyOut(SETTINGS, FLAG_ACK, 0);
    this.pumpBlocked();
  }

  private onWindowUpdate(id: number, payload: Buffer): void {
    if (payload.length !== 4) throw new H2Error(H2_ERROR.FRAME_SIZE_ERROR, `WINDOW_UPDATE of ${payload.length} bytes`);
    const increment = payload.readUInt32BE(0) & 0x7fffffff;
    if (id === 0) {
      if (increment === 0) throw new H2Error(H2_ERROR.PROTOCOL_ERROR, 'WINDOW_UPDATE of 0 on the connection');
      this.sendWindow += increment;
      if (this.sendWindow > MAX_WINDOW) throw new H2Error(H2_ERROR.FLOW_CONTROL_ERROR, 'the connection window exceeds 2^31-1');
      this.pumpBlocked();
      return;
    }
    if (id > this.lastStreamId) throw new H2Error(H2_ERROR.PROTOCOL_ERROR, `WINDOW_UPDATE on idle stream ${id}`);
    const s = this.streams.get(id);
    if (!s) return; // a stream that closed a moment ago
    if (increment === 0) { this.resetStream(id, H2_ERROR.PROTOCOL_ERROR); return; }
    s.sendWindow += increment;
    if (s.sendWindow > MAX_WINDOW) { this.resetStream(id, H2_ERROR.FLOW_CONTROL_ERROR); return; }
    if (s.queue) this.pump(s);
  }

  private onData(flags: number, id: number, payload: Buffer): void {
    if (id === 0) throw new H2Error(H2_ERROR.PROTOCOL_ERROR, 'DATA on stream 0');
    // Padding counts against flow control like data.
    if (payload.length > this.recvWindow) throw new H2Error(H2_ERROR.FLOW_CONTROL_ERROR, `DATA of ${payload.length} bytes past the connection window (${this.recvWindow})`);
    this.recvWindow -= payload.length;
    const data = unpad(flags, payload);
    if (data.length === 0 && !(flags & FLAG_END_STREAM)) this.spend(this.idleFrames);
    const s = this.streams.get(id);
    if (!s || s.requestEnded) {
      if (!s && id > this.lastStreamId) throw new H2Error(H2_ERROR.PROTOCOL_ERROR, `DATA on idle stream ${id}`);
      if (data.length) this.spend(this.idleFrames); // empty ones have spent already
      this.resetStream(id, H2_ERROR.STREAM_CLOSED);
    } else if (payload.length > s.recvWindow) {
      this.resetStream(id, H2_ERROR.FLOW_CONTROL_ERROR);
    } else if (!s.bodyWithin(data.length, (flags & FLAG_END_STREAM) !== 0)) {
      this.resetStream(id, H2_ERROR.PROTOCOL_ERROR); // a body longer or shorter than its content-length (RFC 9113 §8.1.1)
    } else {
      s.recvWindow -= payload.length;
      this.buffered += s.received(data);
      if (flags & FLAG_END_STREAM) this.requestEnded(s);
      else if (s.recvWindow <= DEFAULT_WINDOW - WINDOW_REFRESH && !s.overflowed) {
        this.windowUpdate(id, DEFAULT_WINDOW - s.recvWindow);
        s.recvWindow = DEFAULT_WINDOW;
      }
    }
    this.refreshWindow();
  }

  /** refreshWindow tops up the connection's receive window, unless streams already hold MAX_BUFFERED. */
  private refreshWindow(): void {
    if (this.recvWindow > DEFAULT_WINDOW - WINDOW_REFRESH || this.buffered >= MAX_BUFFERED || this.closed) return;
    this.windowUpdate(0, DEFAULT_WINDOW - this.recvWindow);
    this.recvWindow = DEFAULT_WINDOW;
  }

  /** released is told when a stream lets go of body bytes it held. */
  released(bytes: number): void {
    this.buffered -= bytes;
    this.refreshWindow();
  }

  private onHeaders(flags: number, id: number, payload: Buffer): void {
    if (id === 0) throw new H2Error(H2_ERROR.PROTOCOL_ERROR, 'HEADERS on stream 0');
    let block = unpad(flags, payload);
    let selfDependent = false;
    if (flags & FLAG_PRIORITY) {
      if (block.length < 5) throw new H2Error(H2_ERROR.FRAME_SIZE_ERROR, 'HEADERS too short for its priority fields');
      selfDependent = (block.readUInt32BE(0) & 0x7fffffff) === id;
      block = block.subarray(5);
    }
    if (flags & FLAG_END_HEADERS) { this.onHeaderBlock(id, flags, block, selfDependent); return; }
    this.continuation = { id, flags, parts: block.length ? [Buffer.from(block)] : [], size: block.length, frames: 1, selfDependent };
  }

  /** onHeaderBlock decodes a whole header block (always: the decoder's table must stay in step) and acts on it. */
  private onHeaderBlock(id: number, flags: number, block: Buffer, selfDependent = false): void {
    const request = new RequestHeaders();
    this.hpack.decode(block, (name, value) => request.add(name, value), MAX_DECODED_HEADER_LIST);
    const endStream = (flags & FLAG_END_STREAM) !== 0;
    const existing = this.streams.get(id);
    if (existing) {
      // Trailers: they must end the request, and the body must have been as long as it said; their fields are not used.
      if (existing.requestEnded) this.resetStream(id, H2_ERROR.STREAM_CLOSED);
      else if (!endStream || !existing.bodyComplete()) this.resetStream(id, H2_ERROR.PROTOCOL_ERROR);
      else this.requestEnded(existing);
      return;
    }
    if (id % 2 === 0) throw new H2Error(H2_ERROR.PROTOCOL_ERROR, `a client opened even-numbered stream ${id}`);
    if (id <= this.lastStreamId) throw new H2Error(H2_ERROR.STREAM_CLOSED, `HEADERS on closed stream ${id}`);
    this.lastStreamId = id;
    if (this.goawaySent) return; // after GOAWAY new streams are ignored (RFC 9113 §6.8)
    if (this.streams.size >= (this.opts.maxConcurrentStreams ?? 250)) { this.spend(this.resets); this.resetStream(id, H2_ERROR.REFUSED_STREAM); return; }
    const problem = request.problem() ?? (selfDependent ? 'a stream that depends on itself' : undefined) ?? (endStream && request.contentLength ? 'content-length without a body' : undefined);
    if (problem) { this.spend(this.resets); this.resetStream(id, H2_ERROR.PROTOCOL_ERROR); return; }
    const s = new H2Stream(this, id, request.method, request.path, this.peerInitialWindow);
    s.contentLength = request.contentLength;
    this.streams.set(id, s);
    if (endStream) s.requestEnded = true;
    if (request.size > MAX_HEADER_LIST_SIZE) {
      s.reply(431, 'request header fields too large');
      return;
    }
    if (!endStream && this.opts.bodyTimeoutMs && this.opts.bodyTimeoutMs > 0) s.armBodyTimeout(this.opts.bodyTimeoutMs);
    this.opts.onStream(s);
  }

  private requestEnded(s: H2Stream): void {
    s.requestEnded = true;
    s.requestEnd();
    if (s.endSent) this.closeStream(s);
  }

  // --- sending ------------------------------------------------------------------------------------------

  /** frameOut queues one frame (its payload one piece or several in order); everything queued in a tick is written together. */
  frameOut(type: number, flags: number, id: number, payload?: Uint8Array | readonly Uint8Array[], length = payloadLength(payload)): void {
    if (this.closed) return;
    const header = Buffer.allocUnsafe(FRAME_HEADER_LENGTH);
    header.writeUIntBE(length, 0, 3);
    header[3] = type;
    header[4] = flags;
    header.writeUInt32BE(id, 5);
    if (!this.outbox) { this.outbox = []; process.nextTick(this.flush); }
    this.outbox.push(header);
    pushPieces(this.outbox, payload);
  }

  /**
   * replyOut queues a frame the peer's own frame asked for (an acknowledgement, a reset). A peer that does not read
   * makes them pile up in memory, one per frame it sends; past MAX_QUEUED_REPLIES the connection ends.
   */
  private replyOut(type: number, flags: number, id: number, payload?: Uint8Array): void {
    if (++this.repliesQueued > MAX_QUEUED_REPLIES) {
      this.fail(new H2Error(H2_ERROR.ENHANCE_YOUR_CALM, `over ${MAX_QUEUED_REPLIES} replies wait for the peer to read them`));
      return;
    }
    this.frameOut(type, flags, id, payload);
  }

  /** spend takes one token of a frame budget; past it the connection ends (ENHANCE_YOUR_CALM). */
  private spend(budget: FrameBudget): void {
    if (!budget.take()) throw new H2Error(H2_ERROR.ENHANCE_YOUR_CALM, `too many ${budget.spec.what} (over ${budget.spec.burst}, then ${budget.spec.rate} a second)`);
  }

  sendHeaders(s: H2Stream, block: Buffer, endStream: boolean): void {
    this.frameOut(HEADERS, FLAG_END_HEADERS | (endStream ? FLAG_END_STREAM : 0), s.id, block);
    if (endStream) this.sentEnd(s);
  }

  /** pump sends what a stream has queued, as far as both flow-control windows allow, ending it if it asked to. */
  pump(s: H2Stream): void {
    const q = s.queue;
    if (!q || s.closed) return;
    // The last byte queued carries END_STREAM when the stream is to end; with nothing queued, an empty DATA does.
    let endedOnData = false;
    // Each DATA frame carries as many queued bytes as the frame size and both windows allow, across the pieces a
    // message was queued in (see H2Stream.write): a message is not joined into one buffer first.
    let head = 0;
    while (head < q.length) {
      const room = Math.min(this.peerMaxFrame, this.sendWindow, s.sendWindow);
      if (room <= 0) {
        q.splice(0, head);
        (this.blocked ??= new Set()).add(s);
        return;
      }
      let n = 0;
      const first = head;
      let cut: Uint8Array | undefined;
      while (head < q.length && n < room) {
        const item = q[head]!;
        if (item.length <= room - n) { n += item.length; head++; continue; }
        // The piece goes on in the next frame.
        cut = item.subarray(0, room - n);
        q[head] = item.subarray(room - n);
        n = room;
      }
      endedOnData = s.endQueued && head === q.length;
      const payload = cut ? [...q.slice(first, head), cut] : head - first === 1 ? q[first]! : q.slice(first, head);
      this.frameOut(DATA, endedOnData ? FLAG_END_STREAM : 0, s.id, payload, n);
      this.sendWindow -= n;
      s.sendWindow -= n;
    }
    s.queue = undefined;
    this.blocked?.delete(s);
    if (!s.endQueued) return;
    if (!endedOnData) this.frameOut(DATA, FLAG_END_STREAM, s.id);
    this.sentEnd(s);
  }

  private pumpBlocked(): void {
    if (!this.blocked?.size) return;
    for (const s of [...this.blocked]) {
      if (this.sendWindow <= 0) return;
      this.pump(s);
    }
  }

  /** sentEnd: END_STREAM went out; a request still sending is told to stop (RFC 9113 §8.1), else the stream is done. */
  private sentEnd(s: H2Stream): void {
    s.endSent = true;
    if (!s.requestEnded) this.resetStream(s.id, H2_ERROR.NO_ERROR);
    else this.closeStream(s);
  }

  resetStream(id: number, code: number): void {
    const payload = Buffer.allocUnsafe(4);
    payload.writeUInt32BE(code, 0);
    this.replyOut(RST_STREAM, 0, id, payload);
    const s = this.streams.get(id);
    if (s) this.closeStream(s);
  }

  private windowUpdate(id: number, increment: number): void {
    const payload = Buffer.allocUnsafe(4);
    payload.writeUInt32BE(increment, 0);
    this.frameOut(WINDOW_UPDATE, 0, id, payload);
  }

  closeStream(s: H2Stream): void {
    if (s.closed) return;
    this.streams.delete(s.id);
    this.blocked?.delete(s);
    s.closedNow();
    if (this.streams.size === 0 && (this.goawaySent || this.peerGone)) this.finish();
  }

  private goaway(code: number, debug?: string): void {
    const text = debug ? Buffer.from(debug.slice(0, 200), 'utf8') : EMPTY;
    const payload = Buffer.allocUnsafe(8 + text.length);
    payload.writeUInt32BE(this.lastStreamId, 0);
    payload.writeUInt32BE(code, 4);
    text.copy(payload, 8);
    this.frameOut(GOAWAY, 0, 0, payload);
    this.goawaySent = true;
  }

  /** fail reports a connection error with GOAWAY and ends the connection. */
  private fail(err: H2Error): void {
    if (this.closed) return;
    this.opts.onError?.(err);
    this.goaway(err.code, err.message);
    this.finish();
  }

  /** finish writes what is queued, ends the transport and closes every stream; destroyed if not closed soon after. */
  private finish(): void {
    if (this.closed) return;
    this.flush();
    this.closed = true;
    this.end();
    this.transport.end();
    setTimeout(() => this.transport.destroy(), CLOSE_GRACE_MS).unref();
  }

  /** end closes every stream: the transport closed or the session finished. */
  private end(): void {
    this.closed = true;
    this.outbox = undefined;
    for (const s of [...this.streams.values()]) this.closeStream(s);
  }
}

/** unpad strips a PADDED frame's padding (RFC 9113 §6.1). */
function unpad(flags: number, payload: Buffer): Buffer {
  if (!(flags & FLAG_PADDED)) return payload;
  if (payload.length < 1) throw new H2Error(H2_ERROR.FRAME_SIZE_ERROR, 'a padded frame without its pad length');
  const pad = payload[0]!;
  if (pad >= payload.length) throw new H2Error(H2_ERROR.PROTOCOL_ERROR, `padding of ${pad} bytes fills the frame`);
  return payload.subarray(1, payload.length - pad);
}
