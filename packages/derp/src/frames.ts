import { KEY_LENGTH } from './keys.js';

/** FrameType numbers every DERP frame (derp/derp.go). */
export const FrameType = {
  ServerKey: 0x01,
  ClientInfo: 0x02,
  ServerInfo: 0x03,
  SendPacket: 0x04,
  RecvPacket: 0x05,
  KeepAlive: 0x06,
  NotePreferred: 0x07,
  PeerGone: 0x08,
  PeerPresent: 0x09,
  ForwardPacket: 0x0a,
  WatchConns: 0x10,
  ClosePeer: 0x11,
  Ping: 0x12,
  Pong: 0x13,
  Health: 0x14,
  Restarting: 0x15,
} as const;
export type FrameTypeValue = (typeof FrameType)[keyof typeof FrameType];

/** PeerGoneReason is the trailing byte of a PeerGone frame. */
export const PeerGoneReason = { Disconnected: 0x00, NotHere: 0x01 } as const;

/** DERP_MAGIC opens the ServerKey frame: "DERP🔑" in UTF-8. */
export const DERP_MAGIC = Buffer.from('44455250f09f9491', 'hex');
export const PROTOCOL_VERSION = 2;
export const FRAME_HEADER_LENGTH = 5;
/** MAX_PACKET_SIZE bounds the data bytes of one relayed packet. */
export const MAX_PACKET_SIZE = 64 << 10;
/** MAX_FRAME_LENGTH bounds every post-login frame: a destination key plus the largest packet. */
export const MAX_FRAME_LENGTH = KEY_LENGTH + MAX_PACKET_SIZE;
/**
 * MAX_CLIENT_INFO_LENGTH bounds the untrusted login frame before any key is proven. A real
 * client's is about 200 bytes (its 32-byte key, a 24-byte nonce, a 16-byte tag and sealed JSON of
 * version, meshKey, CanAckPings and IsProber), so a few KiB leave room for a long mesh key while a
 * connection that never logs in can hold no more than this (tailscale's derper allows 256 KiB:
 * 2,000 such connections trickling one held half a gigabyte until their login timers).
 */
export const MAX_CLIENT_INFO_LENGTH = 4 << 10;

/** encodeFrame builds `type u8 | length u32 BE | payload` from one or more payload parts. */
export function encodeFrame(type: number, ...parts: Uint8Array[]): Buffer {
  let length = 0;
  for (const p of parts) length += p.length;
  const out = Buffer.allocUnsafe(FRAME_HEADER_LENGTH + length);
  out[0] = type;
  out.writeUInt32BE(length, 1);
  let offset = FRAME_HEADER_LENGTH;
  for (const p of parts) {
    out.set(p, offset);
    offset += p.length;
  }
  return out;
}

/** Frame is one decoded DERP frame; payload is a private copy. */
export interface Frame {
  type: number;
  payload: Buffer;
}

/** FrameTooLargeError reports a header whose declared length exceeds the reader's limit. */
export class FrameTooLargeError extends Error {
  constructor(
    readonly frameType: number,
    readonly length: number,
    readonly limit: number,
  ) {
    super(`DERP frame type 0x${frameType.toString(16)} declares ${length} bytes, over the limit of ${limit}`);
  }
}

/**
 * FrameReader turns a byte stream into frames. It rejects a frame as soon as its
 * header declares more than maxLength bytes, so a peer cannot make us buffer an
 * oversized payload.
 */
export class FrameReader {
  private chunks: Buffer[] = [];
  private buffered = 0;

  constructor(public maxLength: number) {}

  /** push appends bytes; call next() until it returns null to drain complete frames. */
  push(chunk: Buffer): void {
    if (chunk.length === 0) return;
    this.chunks.push(chunk);
    this.buffered += chunk.length;
  }

  get bufferedBytes(): number {
    return this.buffered;
  }

  /** next returns the next complete frame, null if more bytes are needed, or throws FrameTooLargeError. */
  next(): Frame | null {
    if (this.buffered < FRAME_HEADER_LENGTH) return null;
    const header = this.peek(FRAME_HEADER_LENGTH);
    const type = header[0]!;
    const length = header.readUInt32BE(1);
    if (length > this.maxLength) throw new FrameTooLargeError(type, length, this.maxLength);
    if (this.buffered < FRAME_HEADER_LENGTH + length) return null;
    this.consume(FRAME_HEADER_LENGTH);
    const payload = this.take(length);
    return { type, payload };
  }

  private peek(n: number): Buffer {
    const first = this.chunks[0]!;
    if (first.length >= n) return first.subarray(0, n);
    const merged = Buffer.concat(this.chunks);
    this.chunks = [merged];
    return merged.subarray(0, n);
  }

  private consume(n: number): void {
    this.take(n);
  }

  private take(n: number): Buffer {
    this.buffered -= n;
    const first = this.chunks[0];
    if (n === 0) return Buffer.alloc(0);
    if (first && first.length > n) {
      // Copy so the caller never pins a large socket chunk in memory.
      const out = Buffer.from(first.subarray(0, n));
      this.chunks[0] = first.subarray(n);
      return out;
    }
    const out = Buffer.allocUnsafe(n);
    let filled = 0;
    while (filled < n) {
      const c = this.chunks[0]!;
      const want = n - filled;
      if (c.length <= want) {
        out.set(c, filled);
        filled += c.length;
        this.chunks.shift();
      } else {
        out.set(c.subarray(0, want), filled);
        this.chunks[0] = c.subarray(want);
        filled += want;
      }
    }
    return out;
  }
}

/** DISCO_MAGIC starts every disco packet ("TS💬"); PeerGone "not here" is only sent in reply to these. */
export const DISCO_MAGIC = Buffer.from('5453f09f92ac', 'hex');
const DISCO_HEADER_LENGTH = DISCO_MAGIC.length + KEY_LENGTH + 24;

/** looksLikeDisco mirrors tailscale's disco.LooksLikeDiscoWrapper: magic plus room for key and nonce. */
export function looksLikeDisco(packet: Uint8Array): boolean {
  if (packet.length < DISCO_HEADER_LENGTH) return false;
  for (let i = 0; i < DISCO_MAGIC.length; i++) if (packet[i] !== DISCO_MAGIC[i]) return false;
  return true;
}
