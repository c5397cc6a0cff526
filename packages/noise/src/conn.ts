import { Socket } from 'node:net';
import { Duplex } from 'node:stream';
import { ownBytes, TAG_LENGTH, type CipherState } from './cipher.js';
import type { TransportKeys } from './handshake.js';
import {
  FRAME_HEADER_LENGTH,
  MAX_FRAME_LENGTH,
  MAX_PLAINTEXT_PER_RECORD,
  MESSAGE_TYPE_ERROR,
  MESSAGE_TYPE_RECORD,
} from './messages.js';

/** EARLY_PAYLOAD_MAGIC starts the optional server→client early payload ("\xff\xff\xffTS"); it can never begin an HTTP/2 frame. */
export const EARLY_PAYLOAD_MAGIC = Buffer.from([0xff, 0xff, 0xff, 0x54, 0x53]);
/** EARLY_PAYLOAD_PEEK_LENGTH is magic + u32 length, and also the size of an HTTP/2 frame header. */
const EARLY_PAYLOAD_PEEK_LENGTH = 9;
/** MAX_EARLY_PAYLOAD_LENGTH bounds what a client will buffer before HTTP/2 starts. */
const MAX_EARLY_PAYLOAD_LENGTH = 1 << 20;

const EMPTY = Buffer.alloc(0);

/** sealedLength is how many bytes sealRecords makes of `plaintext` bytes: each record adds a header and a tag. */
export function sealedLength(plaintext: number): number {
  return plaintext + Math.ceil(plaintext / MAX_PLAINTEXT_PER_RECORD) * (FRAME_HEADER_LENGTH + TAG_LENGTH);
}

/** sealRecords encrypts plaintext into as many type-4 records as needed (each ≤ 4077 plaintext bytes), in one buffer. */
export function sealRecords(cipher: CipherState, plaintext: Uint8Array): Buffer {
  const out = Buffer.allocUnsafe(sealedLength(plaintext.length));
  const n = sealRecordsInto(cipher, plaintext, out);
  return n === out.length ? out : out.subarray(0, n);
}

/** sealRecordsInto is sealRecords into `out` (at least sealedLength bytes) from its start; it returns the bytes written. */
function sealRecordsInto(cipher: CipherState, plaintext: Uint8Array, out: Buffer): number {
  let at = 0;
  for (let offset = 0; offset < plaintext.length; offset += MAX_PLAINTEXT_PER_RECORD) {
    const sealed = cipher.sealInto(plaintext.subarray(offset, offset + MAX_PLAINTEXT_PER_RECORD), out, at + FRAME_HEADER_LENGTH);
    out[at] = MESSAGE_TYPE_RECORD;
    out.writeUInt16BE(sealed, at + 1);
    at += FRAME_HEADER_LENGTH + sealed;
  }
  return at;
}

/**
 * SCRATCH_MAX bounds the plaintext buffer writeRecords joins parts in before sealing. One per process, reused:
 * sealing reads it and writes a new buffer, so it is free again on return. Larger writes get one of their own.
 */
const SCRATCH_MAX = 256 * 1024;
let scratch = Buffer.allocUnsafeSlow(16 * 1024);

function scratchOf(size: number): Buffer {
  if (size <= scratch.length) return scratch;
  if (size > SCRATCH_MAX) return Buffer.allocUnsafeSlow(size);
  scratch = Buffer.allocUnsafeSlow(Math.min(SCRATCH_MAX, Math.max(size, scratch.length * 2)));
  return scratch;
}

/**
 * SEALED_SCRATCH_MIN: sealed output from this size up is written from one buffer kept for the process when a TCP
 * socket takes it whole at once (see writeRecords); a shorter one comes from Buffer's pool, which costs little.
 */
const SEALED_SCRATCH_MIN = 4096;
/** SEALED_SCRATCH_MAX bounds the sealed output buffer kept for reuse (a write past it gets one of its own). */
const SEALED_SCRATCH_MAX = sealedLength(SCRATCH_MAX);
let sealedScratch: Buffer | undefined;

/** encodeEarlyPayload frames a JSON object as the early payload plaintext (magic, u32 BE length, JSON). */
export function encodeEarlyPayload(payload: object): Buffer {
  const json = Buffer.from(JSON.stringify(payload), 'utf8');
  const length = Buffer.alloc(4);
  length.writeUInt32BE(json.length, 0);
  return Buffer.concat([EARLY_PAYLOAD_MAGIC, length, json]);
}

/** NoiseConnOptions wire a finished handshake to the byte stream it ran on. */
export interface NoiseConnOptions {
  socket: Duplex;
  keys: TransportKeys;
  /** initialBytes already read from the socket past the handshake (e.g. the HTTP upgrade `head`). */
  initialBytes?: Uint8Array;
  /** peekEarlyPayload makes the connection (client side) strip an early payload from the first plaintext bytes. */
  peekEarlyPayload?: boolean;
  /** machinePublicKey is the peer's authenticated static key (server side: the client's machine key). */
  peerPublicKey?: Buffer;
  capabilityVersion?: number;
}

/**
 * NoiseConn is a Duplex of plaintext over Tailscale's type-4 Noise records. Records may be split across or
 * coalesced within socket reads; any decrypt failure, oversized frame or unexpected type destroys the
 * connection, because a transport nonce once out of step can never recover.
 */
export class NoiseConn extends Duplex {
  readonly socket: Duplex;
  readonly handshakeHash: Buffer;
  readonly peerPublicKey: Buffer | undefined;
  readonly capabilityVersion: number | undefined;
  /** earlyPayload resolves once the first plaintext bytes show whether the server sent one (always undefined without peeking). */
  readonly earlyPayload: Promise<object | undefined>;

  private readonly send: CipherState;
  private readonly receive: CipherState;
  private pending: Buffer = EMPTY;
  private peeking: boolean;
  private peeked: Buffer = EMPTY;
  private resolveEarly!: (value: object | undefined) => void;
  private rejectEarly!: (err: Error) => void;
  private readonly onSocketData = (chunk: Buffer): void => this.receiveBytes(chunk);
  private readonly onSocketEnd = (): void => this.finishReading();
  private readonly onSocketError = (err: Error): void => {
    this.destroy(err);
  };
  private readonly onSocketClose = (): void => {
    if (!this.destroyed) {
      this.finishReading();
      this.destroy();
    }
  };

  constructor(opts: NoiseConnOptions) {
    super({ allowHalfOpen: true });
    this.socket = opts.socket;
    this.send = opts.keys.send;
    this.receive = opts.keys.receive;
    // Both live as long as the connection: copies of their own, so they pin no pool slab (see ownBytes).
    this.handshakeHash = ownBytes(opts.keys.handshakeHash);
    this.peerPublicKey = opts.peerPublicKey && ownBytes(opts.peerPublicKey);
    this.capabilityVersion = opts.capabilityVersion;
    this.peeking = opts.peekEarlyPayload ?? false;
    this.earlyPayload = new Promise<object | undefined>((resolve, reject) => {
      this.resolveEarly = resolve;
      this.rejectEarly = reject;
    });
    // Nobody may be forced to observe this promise; a rejection also destroys the connection.
    this.earlyPayload.catch(() => undefined);
    if (!this.peeking) this.resolveEarly(undefined);
    this.socket.on('data', this.onSocketData);
    this.socket.on('end', this.onSocketEnd);
    this.socket.on('error', this.onSocketError);
    this.socket.on('close', this.onSocketClose);
    if (opts.initialBytes && opts.initialBytes.length > 0) this.receiveBytes(Buffer.from(opts.initialBytes));
    this.socket.resume();
  }

  private receiveBytes(chunk: Buffer): void {
    if (this.destroyed) return;
    this.pending = this.pending.length === 0 ? chunk : Buffer.concat([this.pending, chunk]);
    // The records this read completes go to the reader as one chunk: pushed a record (at most 4 KiB) at a time, a
    // large map would go through the reader's stream machinery, and a client's HTTP/2 parser, once per record,
    // which costs more CPU than decrypting them.
    const got: Buffer[] = [];
    const fail = (err: Error): void => {
      this.deliverAll(got);
      if (!this.destroyed) this.destroy(err);
    };
    while (this.pending.length >= FRAME_HEADER_LENGTH) {
      const type = this.pending[0];
      const length = this.pending.readUInt16BE(1);
      if (FRAME_HEADER_LENGTH + length > MAX_FRAME_LENGTH) {
        fail(new Error(`noise frame too large: ${FRAME_HEADER_LENGTH + length} bytes exceeds ${MAX_FRAME_LENGTH}`));
        return;
      }
      if (this.pending.length < FRAME_HEADER_LENGTH + length) break;
      const body = this.pending.subarray(FRAME_HEADER_LENGTH, FRAME_HEADER_LENGTH + length);
      // Once all is consumed, drop the view: an empty view would still pin the socket's read buffer while idle.
      this.pending = this.pending.length === FRAME_HEADER_LENGTH + length ? EMPTY : this.pending.subarray(FRAME_HEADER_LENGTH + length);
      if (type === MESSAGE_TYPE_ERROR) {
        fail(new Error(`server error: ${JSON.stringify(body.toString('utf8'))}`));
        return;
      }
      if (type !== MESSAGE_TYPE_RECORD) {
        fail(new Error(`unexpected noise message type ${type}, expected a transport record (4)`));
        return;
      }
      try {
        got.push(this.receive.open(body));
      } catch (err) {
        fail(new Error(`decrypting noise record: ${(err as Error).message}`));
        return;
      }
    }
    this.deliverAll(got);
  }

  /** deliverAll delivers a read's plaintext records, in order, as one chunk. */
  private deliverAll(got: Buffer[]): void {
    if (got.length) this.deliver(got.length === 1 ? got[0]! : Buffer.concat(got));
  }

  private deliver(plaintext: Buffer): void {
    if (this.peeking) {
      this.peeked = Buffer.concat([this.peeked, plaintext]);
      this.tryFinishPeek(false);
      return;
    }
    if (plaintext.length > 0 && !this.push(plaintext)) this.socket.pause();
  }

  private tryFinishPeek(atEnd: boolean): void {
    const buf = this.peeked;
    if (buf.length >= EARLY_PAYLOAD_PEEK_LENGTH && buf.subarray(0, EARLY_PAYLOAD_MAGIC.length).equals(EARLY_PAYLOAD_MAGIC)) {
      const length = buf.readUInt32BE(EARLY_PAYLOAD_MAGIC.length);
      if (length > MAX_EARLY_PAYLOAD_LENGTH) {
        this.failPeek(new Error(`early payload of ${length} bytes exceeds the ${MAX_EARLY_PAYLOAD_LENGTH}-byte limit`));
        return;
      }
      if (buf.length < EARLY_PAYLOAD_PEEK_LENGTH + length) {
        if (atEnd) this.failPeek(new Error('connection ended inside the early payload'));
        return;
      }
      let payload: unknown;
      try {
        payload = JSON.parse(buf.subarray(EARLY_PAYLOAD_PEEK_LENGTH, EARLY_PAYLOAD_PEEK_LENGTH + length).toString('utf8'));
      } catch (err) {
        this.failPeek(new Error(`early payload is not valid JSON: ${(err as Error).message}`));
        return;
      }
      if (payload === null || typeof payload !== 'object') {
        this.failPeek(new Error('early payload must be a JSON object'));
        return;
      }
      this.endPeek(payload, buf.subarray(EARLY_PAYLOAD_PEEK_LENGTH + length));
    } else if (buf.length >= EARLY_PAYLOAD_PEEK_LENGTH || atEnd) {
      this.endPeek(undefined, buf);
    }
  }

  private endPeek(payload: object | undefined, rest: Buffer): void {
    this.peeking = false;
    this.peeked = EMPTY;
    this.resolveEarly(payload);
    if (rest.length > 0 && !this.push(rest)) this.socket.pause();
  }

  private failPeek(err: Error): void {
    this.peeking = false;
    this.rejectEarly(err);
    this.destroy(err);
  }

  private finishReading(): void {
    if (this.peeking) this.tryFinishPeek(true);
    if (this.pending.length > 0 && !this.destroyed) {
      this.destroy(new Error(`connection ended inside a noise frame (${this.pending.length} bytes pending)`));
      return;
    }
    if (!this.destroyed) this.push(null);
  }

  override _read(): void {
    this.socket.resume();
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, callback: (error?: Error | null) => void): void {
    if (chunk.length === 0) {
      callback();
      return;
    }
    let frames: Buffer;
    try {
      frames = sealRecords(this.send, chunk);
    } catch (err) {
      callback(err as Error);
      return;
    }
    this.socket.write(frames, (err) => callback(err ?? null));
  }

  /**
   * _writev seals everything written in one corked batch as one run of records and hands the socket one
   * buffer: HTTP/2 writes a frame header and its payload as separate chunks, which otherwise cost a record
   * (cipher, tag, header) and a socket write each. Record boundaries are not part of the byte stream.
   */
  override _writev(chunks: Array<{ chunk: Buffer }>, callback: (error?: Error | null) => void): void {
    if (chunks.length === 1) return this._write(chunks[0]!.chunk, 'binary', callback);
    let frames: Buffer;
    try {
      frames = sealRecords(this.send, Buffer.concat(chunks.map((c) => c.chunk)));
    } catch (err) {
      callback(err as Error);
      return;
    }
    if (frames.length === 0) { callback(); return; }
    this.socket.write(frames, (err) => callback(err ?? null));
  }

  /** sendBacklog is how many sealed bytes wait in the socket for the peer to read them. */
  sendBacklog(): number {
    return this.socket.writableLength;
  }

  /**
   * writeRecords seals parts, in order, as one run of records and gives the socket one buffer, bypassing the
   * Writable side (its buffering, callbacks and per-write state): for a caller that is this connection's only
   * writer, such as the control server's HTTP/2, which writes a frame header and its payload together. The
   * parts are read before it returns, so a caller may reuse them. Nothing is written once the connection ends.
   */
  writeRecords(parts: readonly Uint8Array[]): void {
    if (this.destroyed || this.writableEnded) return;
    let total = 0;
    for (const p of parts) total += p.length;
    if (total === 0) return;
    let plaintext: Uint8Array;
    if (parts.length === 1) plaintext = parts[0]!;
    else {
      const joined = scratchOf(total);
      let at = 0;
      for (const p of parts) { joined.set(p, at); at += p.length; }
      plaintext = joined.subarray(0, total);
    }
    this.writeSealed(plaintext);
  }

  /**
   * writeSealed seals plaintext and writes the records. A TCP socket that takes them at once (nothing queued after
   * the write: the kernel accepted every byte, and node keeps no reference) leaves the output buffer free, so large
   * output is sealed into one buffer kept for the process. A new buffer per write (a policy change sends each of
   * thousands of sessions tens of KB) would be a large share of the sealing's time: each one counts as external
   * memory, and enough of them start the collector's marking inside the allocation.
   * A write the socket queues (its reader is slow) keeps that buffer until sent: it is the socket's then, and the
   * next large write, on any connection, takes a new one. A socket already holding data queues this write behind it,
   * so it gets a buffer of its own. Other streams (a WebSocket, a test's duplex pair) may keep a chunk after taking
   * it: they always get a buffer of their own.
   */
  private writeSealed(plaintext: Uint8Array): void {
    const need = sealedLength(plaintext.length);
    const reuse = need >= SEALED_SCRATCH_MIN && need <= SEALED_SCRATCH_MAX && this.socket instanceof Socket && this.socket.writableLength === 0;
    if (!reuse) { this.socket.write(sealRecords(this.send, plaintext)); return; }
    if (!sealedScratch || sealedScratch.length < need) sealedScratch = Buffer.allocUnsafeSlow(Math.min(SEALED_SCRATCH_MAX, Math.max(need, 64 * 1024)));
    const out = sealedScratch;
    const n = sealRecordsInto(this.send, plaintext, out);
    this.socket.write(out.subarray(0, n));
    if (this.socket.writableLength !== 0) sealedScratch = undefined;
  }

  override _final(callback: (error?: Error | null) => void): void {
    this.socket.end(() => callback());
  }

  override _destroy(err: Error | null, callback: (error?: Error | null) => void): void {
    if (this.peeking) {
      this.peeking = false;
      this.rejectEarly(err ?? new Error('connection closed before the early payload was read'));
    }
    this.socket.off('data', this.onSocketData);
    this.socket.off('end', this.onSocketEnd);
    this.socket.off('close', this.onSocketClose);
    // Keep a no-op error listener: the socket may still report a late error after we let go of it.
    this.socket.off('error', this.onSocketError);
    this.socket.on('error', () => undefined);
    this.socket.destroy();
    callback(err);
  }

  // http2 calls these on its transport when present; forward them to the TCP socket where one exists.
  setNoDelay(noDelay?: boolean): this {
    (this.socket as { setNoDelay?: (v?: boolean) => unknown }).setNoDelay?.(noDelay);
    return this;
  }

  setKeepAlive(enable?: boolean, initialDelay?: number): this {
    (this.socket as { setKeepAlive?: (e?: boolean, d?: number) => unknown }).setKeepAlive?.(enable, initialDelay);
    return this;
  }

  get remoteAddress(): string | undefined {
    return (this.socket as { remoteAddress?: string }).remoteAddress;
  }

  get remotePort(): number | undefined {
    return (this.socket as { remotePort?: number }).remotePort;
  }
}
