import { createHash, randomBytes } from 'node:crypto';
import { Duplex } from 'node:stream';

/** WEBSOCKET_GUID is the RFC 6455 constant appended to Sec-WebSocket-Key for the accept hash. */
const WEBSOCKET_GUID = '258EAFA5-E914-47DA-95CA-C5AB0DC85B11';
/**
 * DEFAULT_MAX_MESSAGE_BYTES bounds one frame and one fragment run; ts2021 records are ≤ 4 KiB and DERP
 * frames ≤ 64 KiB, so anything near this is abuse.
 */
const DEFAULT_MAX_MESSAGE_BYTES = 1 << 20;

const OP_CONTINUATION = 0x0;
const OP_TEXT = 0x1;
const OP_BINARY = 0x2;
const OP_CLOSE = 0x8;
const OP_PING = 0x9;
const OP_PONG = 0xa;
/** PONG_BACKLOG_BYTES: pings are answered only while the socket has less than this waiting to be written. */
export const PONG_BACKLOG_BYTES = 64 * 1024;

/** WsCloseCode lists the close codes from RFC 6455 §7.4.1 that this endpoint sends. */
export const WsCloseCode = { Normal: 1000, ProtocolError: 1002, UnsupportedData: 1003, TooBig: 1009 } as const;

/** webSocketAccept computes Sec-WebSocket-Accept for a client's Sec-WebSocket-Key. */
export function webSocketAccept(key: string): string {
  return createHash('sha1').update(key + WEBSOCKET_GUID).digest('base64');
}

/** websocketAccept is the earlier spelling of webSocketAccept, kept so existing importers still work. */
export const websocketAccept: (key: string) => string = webSocketAccept;

/** isValidWebSocketKey checks the key is base64 of exactly 16 bytes, as RFC 6455 §4.1 requires. */
export function isValidWebSocketKey(key: string | undefined): key is string {
  if (!key || !/^[A-Za-z0-9+/]{22}==$/.test(key)) return false;
  return Buffer.from(key, 'base64').length === 16;
}

/** newWebSocketKey returns a random Sec-WebSocket-Key for a client handshake. */
export function newWebSocketKey(): string {
  return randomBytes(16).toString('base64');
}

export interface WebSocketStreamOptions {
  /** role decides masking: clients mask every frame, servers never do and require masked input. */
  role: 'server' | 'client';
  /** head holds bytes already read past the HTTP handshake. */
  head?: Buffer;
  /** maxMessageBytes caps one frame and one reassembled fragment run (default 1 MiB). */
  maxMessageBytes?: number;
}

/**
 * WebSocketStream exposes the binary messages of an RFC 6455 connection as one byte stream, which is
 * how both ts2021 and DERP use WebSockets: message boundaries carry no meaning, so each data frame's
 * payload is pushed as it arrives. Pings are answered, close is echoed, and protocol violations
 * (text messages, unmasked client frames, oversized frames, bad fragmentation) close the connection
 * with the matching status code.
 */
export class WebSocketStream extends Duplex {
  private readonly socket: Duplex;
  private readonly role: 'server' | 'client';
  /**
   * maxMessageBytes caps one frame and one reassembled fragment run. A server may start small, while
   * the peer has not proved who it is, and raise it later: a frame is buffered whole before its
   * payload is passed on.
   */
  maxMessageBytes: number;
  private pending: Buffer = Buffer.alloc(0);
  private inFragmentedMessage = false;
  private fragmentedBytes = 0;
  private closeSent = false;
  private closeReceived = false;
  private readonly onData = (chunk: Buffer): void => this.onSocketData(chunk);
  /** closeCode is the status the peer sent, or the one we failed with. */
  closeCode: number | undefined;

  constructor(socket: Duplex, options: WebSocketStreamOptions) {
    super();
    this.socket = socket;
    this.role = options.role;
    this.maxMessageBytes = options.maxMessageBytes ?? DEFAULT_MAX_MESSAGE_BYTES;
    socket.on('data', this.onData);
    socket.on('end', () => this.push(null));
    socket.on('close', () => {
      if (!this.destroyed) this.destroy();
    });
    socket.on('error', (err) => this.destroy(err));
    if (options.head && options.head.length > 0) {
      const head = options.head;
      // Deferred so the caller can attach its listeners before the first frames are delivered.
      queueMicrotask(() => this.onSocketData(head));
    }
  }

  override _read(): void {
    this.socket.resume();
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, callback: (error?: Error | null) => void): void {
    if (this.closeSent) {
      callback(new Error('WebSocket is closing; no more data can be sent'));
      return;
    }
    this.socket.write(this.encodeFrame(OP_BINARY, chunk), callback);
  }

  override _final(callback: (error?: Error | null) => void): void {
    this.sendClose(WsCloseCode.Normal, '');
    this.socket.end();
    callback();
  }

  override _destroy(error: Error | null, callback: (error?: Error | null) => void): void {
    this.socket.off('data', this.onData);
    this.socket.destroy();
    callback(error);
  }

  private encodeFrame(opcode: number, payload: Buffer): Buffer {
    const masked = this.role === 'client';
    const length = payload.length;
    const lengthBytes = length < 126 ? 0 : length < 65536 ? 2 : 8;
    const header = Buffer.allocUnsafe(2 + lengthBytes + (masked ? 4 : 0));
    header[0] = 0x80 | opcode;
    if (lengthBytes === 0) header[1] = length;
    else if (lengthBytes === 2) {
      header[1] = 126;
      header.writeUInt16BE(length, 2);
    } else {
      header[1] = 127;
      header.writeBigUInt64BE(BigInt(length), 2);
    }
    if (!masked) return Buffer.concat([header, payload]);
    header[1]! |= 0x80;
    const mask = randomBytes(4);
    mask.copy(header, 2 + lengthBytes);
    const body = Buffer.allocUnsafe(length);
    for (let i = 0; i < length; i++) body[i] = payload[i]! ^ mask[i & 3]!;
    return Buffer.concat([header, body]);
  }

  private sendClose(code: number, reason: string): void {
    if (this.closeSent || this.socket.destroyed) return;
    this.closeSent = true;
    const payload = Buffer.alloc(2 + Buffer.byteLength(reason));
    payload.writeUInt16BE(code, 0);
    payload.write(reason, 2);
    this.socket.write(this.encodeFrame(OP_CLOSE, payload));
  }

  /** fail closes with a protocol status and tears the stream down. */
  private fail(code: number, reason: string): void {
    this.closeCode = code;
    this.sendClose(code, reason);
    this.socket.end();
    this.destroy(new Error(`WebSocket ${reason} (close ${code})`));
  }

  private onSocketData(chunk: Buffer): void {
    this.pending = this.pending.length === 0 ? chunk : Buffer.concat([this.pending, chunk]);
    while (!this.destroyed) {
      const consumed = this.parseOne();
      if (consumed === 0) break;
      this.pending = this.pending.subarray(consumed);
    }
  }

  /** parseOne handles one complete frame from pending and returns the bytes it used (0 = need more). */
  private parseOne(): number {
    const buf = this.pending;
    if (buf.length < 2) return 0;
    const b0 = buf[0]!;
    const b1 = buf[1]!;
    const fin = (b0 & 0x80) !== 0;
    const opcode = b0 & 0x0f;
    const masked = (b1 & 0x80) !== 0;
    let length = b1 & 0x7f;
    let offset = 2;
    if ((b0 & 0x70) !== 0) return this.failed(WsCloseCode.ProtocolError, 'reserved bits set without an extension');
    if (this.role === 'server' && !masked) return this.failed(WsCloseCode.ProtocolError, 'client frame not masked');
    if (this.role === 'client' && masked) return this.failed(WsCloseCode.ProtocolError, 'server frame masked');
    if (length === 126) {
      if (buf.length < 4) return 0;
      length = buf.readUInt16BE(2);
      offset = 4;
    } else if (length === 127) {
      if (buf.length < 10) return 0;
      const big = buf.readBigUInt64BE(2);
      if (big > BigInt(this.maxMessageBytes)) return this.failed(WsCloseCode.TooBig, 'frame too large');
      length = Number(big);
      offset = 10;
    }
    const isControl = (opcode & 0x8) !== 0;
    if (isControl && (length > 125 || !fin)) return this.failed(WsCloseCode.ProtocolError, 'invalid control frame');
    if (length > this.maxMessageBytes) return this.failed(WsCloseCode.TooBig, 'frame too large');
    const maskOffset = offset;
    if (masked) offset += 4;
    if (buf.length < offset + length) return 0;
    const payload = Buffer.from(buf.subarray(offset, offset + length));
    if (masked) {
      for (let i = 0; i < length; i++) payload[i]! ^= buf[maskOffset + (i & 3)]!;
    }
    const used = offset + length;

    switch (opcode) {
      case OP_TEXT:
        return this.failed(WsCloseCode.UnsupportedData, 'text messages are not supported (binary only)');
      case OP_BINARY:
      case OP_CONTINUATION: {
        if (opcode === OP_CONTINUATION && !this.inFragmentedMessage) {
          return this.failed(WsCloseCode.ProtocolError, 'continuation without a message to continue');
        }
        if (opcode === OP_BINARY && this.inFragmentedMessage) {
          return this.failed(WsCloseCode.ProtocolError, 'new message before previous fragments finished');
        }
        this.fragmentedBytes = opcode === OP_BINARY ? length : this.fragmentedBytes + length;
        if (this.fragmentedBytes > this.maxMessageBytes) return this.failed(WsCloseCode.TooBig, 'message too large');
        this.inFragmentedMessage = !fin;
        if (this.closeReceived) return used;
        if (payload.length > 0 && !this.push(payload)) this.socket.pause();
        return used;
      }
      case OP_PING:
        // A pong waits for the socket only while little else does: a peer that sends pings and never reads would
        // grow the server by gigabytes (each answer queued in memory). RFC 6455 lets an endpoint answer only the
        // latest ping.
        if (!this.closeSent && this.socket.writableLength < PONG_BACKLOG_BYTES) this.socket.write(this.encodeFrame(OP_PONG, payload));
        return used;
      case OP_PONG:
        return used;
      case OP_CLOSE: {
        this.closeReceived = true;
        this.closeCode = payload.length >= 2 ? payload.readUInt16BE(0) : 1005;
        if (payload.length === 1) return this.failed(WsCloseCode.ProtocolError, 'one-byte close payload');
        this.sendClose(payload.length >= 2 ? this.closeCode : WsCloseCode.Normal, '');
        this.push(null);
        this.socket.end();
        return used;
      }
      default:
        return this.failed(WsCloseCode.ProtocolError, `unknown opcode ${opcode}`);
    }
  }

  private failed(code: number, reason: string): number {
    this.fail(code, reason);
    return 0;
  }
}
