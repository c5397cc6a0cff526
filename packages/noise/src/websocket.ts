import { createHash, randomBytes } from 'node:crypto';
import { Duplex } from 'node:stream';

/** WEBSOCKET_GUID is the RFC 6455 constant appended to Sec-WebSocket-Key for the accept hash. */
const WEBSOCKET_GUID = '258EAFA5-E914-47DA-95CA-C5AB0DC85B11';
/** MAX_WEBSOCKET_FRAME bounds one frame's payload; ts2021 records are ≤ 4 KiB, so anything near this is abuse. */
const MAX_WEBSOCKET_FRAME = 1 << 20;

const OP_CONTINUATION = 0x0;
const OP_BINARY = 0x2;
const OP_TEXT = 0x1;
const OP_CLOSE = 0x8;
const OP_PING = 0x9;
const OP_PONG = 0xa;

/** websocketAccept computes Sec-WebSocket-Accept for a client's Sec-WebSocket-Key. */
export function websocketAccept(key: string): string {
  return createHash('sha1').update(key + WEBSOCKET_GUID).digest('base64');
}

function encodeFrame(opcode: number, payload: Buffer, mask: boolean): Buffer {
  const len = payload.length;
  const headerLength = 2 + (len < 126 ? 0 : len <= 0xffff ? 2 : 8) + (mask ? 4 : 0);
  const header = Buffer.alloc(headerLength);
  header[0] = 0x80 | opcode;
  let offset = 2;
  if (len < 126) header[1] = len;
  else if (len <= 0xffff) {
    header[1] = 126;
    header.writeUInt16BE(len, 2);
    offset = 4;
  } else {
    header[1] = 127;
    header.writeBigUInt64BE(BigInt(len), 2);
    offset = 10;
  }
  if (!mask) return Buffer.concat([header, payload]);
  header[1]! |= 0x80;
  const maskKey = randomBytes(4);
  maskKey.copy(header, offset);
  const masked = Buffer.alloc(len);
  for (let i = 0; i < len; i++) masked[i] = payload[i]! ^ maskKey[i & 3]!;
  return Buffer.concat([header, masked]);
}

/**
 * WebSocketStream exposes the binary messages of an RFC 6455 connection as one byte stream, which is
 * how ts2021 uses WebSockets (message boundaries carry no meaning). Clients mask, servers must not;
 * text frames and oversized frames are protocol errors.
 */
export class WebSocketStream extends Duplex {
  private pending: Buffer = Buffer.alloc(0);
  private closeSent = false;
  private readonly onData = (chunk: Buffer): void => this.receive(chunk);

  constructor(private readonly socket: Duplex, private readonly role: 'client' | 'server', initialBytes?: Buffer) {
    super();
    socket.on('data', this.onData);
    socket.on('end', () => this.push(null));
    socket.on('error', (err) => this.destroy(err));
    socket.on('close', () => {
      if (!this.destroyed) this.destroy();
    });
    if (initialBytes && initialBytes.length > 0) this.receive(initialBytes);
  }

  private receive(chunk: Buffer): void {
    this.pending = this.pending.length === 0 ? chunk : Buffer.concat([this.pending, chunk]);
    while (this.pending.length >= 2 && !this.destroyed) {
      const b0 = this.pending[0]!;
      const b1 = this.pending[1]!;
      const opcode = b0 & 0x0f;
      const masked = (b1 & 0x80) !== 0;
      let length = b1 & 0x7f;
      let offset = 2;
      if (length === 126) {
        if (this.pending.length < 4) return;
        length = this.pending.readUInt16BE(2);
        offset = 4;
      } else if (length === 127) {
        if (this.pending.length < 10) return;
        const big = this.pending.readBigUInt64BE(2);
        length = big > BigInt(MAX_WEBSOCKET_FRAME) ? MAX_WEBSOCKET_FRAME + 1 : Number(big);
        offset = 10;
      }
      if (length > MAX_WEBSOCKET_FRAME) {
        this.destroy(new Error(`websocket frame of ${length} bytes exceeds ${MAX_WEBSOCKET_FRAME}`));
        return;
      }
      if (masked !== (this.role === 'server')) {
        this.destroy(new Error(this.role === 'server' ? 'websocket client frame is not masked' : 'websocket server frame is masked'));
        return;
      }
      const maskKey = masked ? this.pending.subarray(offset, offset + 4) : undefined;
      if (masked) offset += 4;
      if (this.pending.length < offset + length) return;
      const payload = Buffer.from(this.pending.subarray(offset, offset + length));
      this.pending = this.pending.subarray(offset + length);
      if (maskKey) for (let i = 0; i < payload.length; i++) payload[i]! ^= maskKey[i & 3]!;
      switch (opcode) {
        case OP_BINARY:
        case OP_CONTINUATION:
          if (payload.length > 0 && !this.push(payload)) this.socket.pause();
          break;
        case OP_PING:
          this.socket.write(encodeFrame(OP_PONG, payload, this.role === 'client'));
          break;
        case OP_PONG:
          break;
        case OP_CLOSE:
          this.sendClose();
          this.push(null);
          this.socket.end();
          return;
        case OP_TEXT:
          this.destroy(new Error('websocket text message received; ts2021 uses binary messages only'));
          return;
        default:
          this.destroy(new Error(`websocket frame with unknown opcode ${opcode}`));
          return;
      }
    }
  }

  private sendClose(): void {
    if (this.closeSent) return;
    this.closeSent = true;
    const normal = Buffer.alloc(2);
    normal.writeUInt16BE(1000, 0);
    this.socket.write(encodeFrame(OP_CLOSE, normal, this.role === 'client'));
  }

  override _read(): void {
    this.socket.resume();
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, callback: (error?: Error | null) => void): void {
    this.socket.write(encodeFrame(OP_BINARY, chunk, this.role === 'client'), (err) => callback(err ?? null));
  }

  override _final(callback: (error?: Error | null) => void): void {
    this.sendClose();
    this.socket.end();
    callback();
  }

  override _destroy(err: Error | null, callback: (error?: Error | null) => void): void {
    this.socket.off('data', this.onData);
    this.socket.destroy();
    callback(err);
  }
}
