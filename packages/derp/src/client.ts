import { randomBytes } from 'node:crypto';
import { connect as netConnect, isIP, type Socket } from 'node:net';
import { connect as tlsConnect, type ConnectionOptions } from 'node:tls';
import type { Duplex } from 'node:stream';
import { openFrom, sealTo } from './box.js';
import {
  DERP_MAGIC,
  encodeFrame,
  FrameReader,
  FrameType,
  MAX_PACKET_SIZE,
  PROTOCOL_VERSION,
  type Frame,
} from './frames.js';
import { formatNodeKey, generateDerpKeyPair, KEY_LENGTH, parseNodeKey, publicKeyFromPrivate } from './keys.js';
import { newWebSocketKey, webSocketAccept, WebSocketStream } from '@headway/noise';

/** DerpMessage is one server-to-client frame, decoded. */
export type DerpMessage =
  | { type: 'packet'; source: string; data: Buffer }
  | { type: 'peerGone'; peer: string; reason: number }
  | { type: 'peerPresent'; peer: string }
  | { type: 'keepAlive' }
  | { type: 'ping'; data: Buffer }
  | { type: 'pong'; data: Buffer }
  | { type: 'health'; problem: string }
  | { type: 'restarting'; reconnectInMs: number; tryForMs: number }
  | { type: 'unknown'; frameType: number; payload: Buffer };

export interface DerpClientOptions {
  /** url is `http(s)://host:port/derp` (raw DERP upgrade) or `ws(s)://host:port/derp` (WebSocket). */
  url: string;
  /** tls holds options for https:// and wss:// (e.g. `ca` to trust a self-signed relay certificate). */
  tls?: ConnectionOptions;
  /** privateKey is the node's raw X25519 key; a random one is generated when omitted. */
  privateKey?: Buffer;
  /** fastStart sends `Derp-Fast-Start: 1` so the server skips its HTTP 101 response. */
  fastStart?: boolean;
  canAckPings?: boolean;
  isProber?: boolean;
  meshKey?: string;
  /** timeoutMs bounds the whole connect + login (default 10 s). */
  timeoutMs?: number;
}

const MAX_RESPONSE_HEAD = 16 << 10;
/** MAX_RECEIVED_FRAME is the largest frame accepted from a relay: a RecvPacket is at most 64 KiB + 32, the rest far less. */
const MAX_RECEIVED_FRAME = 256 << 10;

/**
 * DerpClient speaks the client side of DERP over plain HTTP or WebSocket; it
 * exists for tests and the relay benchmark, and answers server pings itself
 * when it advertised CanAckPings.
 */
export class DerpClient {
  readonly privateKey: Buffer;
  readonly publicKey: Buffer;
  serverPublicKey: Buffer = Buffer.alloc(0);
  /** closed settles once the connection is gone, for whatever reason. */
  readonly closed: Promise<void>;

  private readonly stream: Duplex;
  private readonly reader = new FrameReader(MAX_RECEIVED_FRAME);
  private readonly queue: DerpMessage[] = [];
  private readonly waiters: { resolve: (m: DerpMessage) => void; reject: (e: Error) => void }[] = [];
  private readonly pendingPings = new Map<string, () => void>();
  private handler: ((m: DerpMessage) => void) | undefined;
  private isClosed = false;
  private closeError: Error | undefined;
  private login: { resolve: () => void; reject: (e: Error) => void; gotServerKey: boolean } | undefined;
  private readonly canAckPings: boolean;

  private constructor(stream: Duplex, privateKey: Buffer, canAckPings: boolean) {
    this.stream = stream;
    this.privateKey = privateKey;
    this.publicKey = publicKeyFromPrivate(privateKey);
    this.canAckPings = canAckPings;
    this.closed = new Promise<void>((resolve) => {
      stream.once('close', () => {
        this.markClosed(new Error('DERP connection closed'));
        resolve();
      });
    });
    stream.on('error', (err: Error) => this.markClosed(err));
    stream.on('end', () => stream.destroy());
    stream.on('data', (chunk: Buffer) => this.onData(chunk));
  }

  /** connect dials the relay, performs the upgrade and the DERP login, and resolves when logged in. */
  static async connect(options: DerpClientOptions): Promise<DerpClient> {
    const url = new URL(options.url);
    const websocket = url.protocol === 'ws:' || url.protocol === 'wss:';
    const secure = url.protocol === 'https:' || url.protocol === 'wss:';
    if (!['http:', 'https:', 'ws:', 'wss:'].includes(url.protocol)) {
      throw new Error(`DerpClient: url must start with http://, https://, ws:// or wss://, got ${url.protocol}`);
    }
    const privateKey = options.privateKey ?? generateDerpKeyPair().privateKey;
    const timeoutMs = options.timeoutMs ?? 10_000;
    const host = url.hostname.replace(/^\[|\]$/g, '');
    const port = Number(url.port || (secure ? 443 : 80));
    const socket: Socket = secure
      ? tlsConnect({ host, port, ...(isIP(host) ? {} : { servername: host }), ...options.tls })
      : netConnect({ host, port });
    socket.setNoDelay(true);
    const timer = setTimeout(() => socket.destroy(new Error(`DerpClient: connect to ${options.url} timed out`)), timeoutMs);
    try {
      await new Promise<void>((resolve, reject) => {
        socket.once(secure ? 'secureConnect' : 'connect', resolve);
        socket.once('error', reject);
      });
      const path = (url.pathname || '/derp') + url.search;
      const wsKey = newWebSocketKey();
      const headers = websocket
        ? ['Upgrade: websocket', 'Connection: Upgrade', `Sec-WebSocket-Key: ${wsKey}`, 'Sec-WebSocket-Version: 13', 'Sec-WebSocket-Protocol: derp']
        : ['Upgrade: DERP', 'Connection: Upgrade', ...(options.fastStart ? ['Derp-Fast-Start: 1'] : [])];
      socket.write(`GET ${path} HTTP/1.1\r\nHost: ${url.host}\r\n${headers.join('\r\n')}\r\n\r\n`);
      let rest: Buffer = Buffer.alloc(0);
      if (!options.fastStart || websocket) {
        const { status, head, body } = await readResponseHead(socket);
        if (status !== 101) throw new Error(`DerpClient: upgrade refused with HTTP ${status}: ${body.toString('utf8').trim().slice(0, 200)}`);
        if (websocket) {
          if (head['sec-websocket-accept'] !== webSocketAccept(wsKey)) throw new Error('DerpClient: bad Sec-WebSocket-Accept');
          if (head['sec-websocket-protocol'] !== 'derp') throw new Error('DerpClient: server did not select the derp subprotocol');
        }
        rest = body;
      }
      const stream: Duplex = websocket ? new WebSocketStream(socket, { role: 'client', head: rest }) : socket;
      const client = new DerpClient(stream, privateKey, options.canAckPings ?? true);
      const loggedIn = new Promise<void>((resolve, reject) => {
        client.login = { resolve, reject, gotServerKey: false };
      });
      client.loginOptions = options;
      if (!websocket && rest.length > 0) client.onData(rest);
      socket.resume();
      await loggedIn;
      return client;
    } catch (err) {
      socket.destroy();
      throw err;
    } finally {
      clearTimeout(timer);
    }
  }

  private loginOptions: DerpClientOptions | undefined;

  /** publicKeyString is this client's node key as `nodekey:<hex>`. */
  get publicKeyString(): string {
    return formatNodeKey(this.publicKey);
  }

  get isOpen(): boolean {
    return !this.isClosed;
  }

  /** send relays packet to the node with key dst (`nodekey:<hex>` or 32 raw bytes). */
  send(dst: string | Uint8Array, packet: Uint8Array): void {
    const dstKey = typeof dst === 'string' ? parseNodeKey(dst) : Buffer.from(dst);
    if (dstKey.length !== KEY_LENGTH) throw new Error(`send: destination key must be ${KEY_LENGTH} bytes`);
    if (packet.length > MAX_PACKET_SIZE) throw new Error(`send: packet of ${packet.length} bytes exceeds ${MAX_PACKET_SIZE}`);
    this.write(encodeFrame(FrameType.SendPacket, dstKey, packet));
  }

  /** ping sends a Ping and resolves with the round-trip time in milliseconds once the Pong arrives. */
  ping(timeoutMs = 5000): Promise<number> {
    const data = randomBytes(8);
    const started = performance.now();
    return new Promise<number>((resolve, reject) => {
      const id = data.toString('hex');
      const timer = setTimeout(() => {
        this.pendingPings.delete(id);
        reject(new Error(`ping: no pong within ${timeoutMs} ms`));
      }, timeoutMs);
      this.pendingPings.set(id, () => {
        clearTimeout(timer);
        resolve(performance.now() - started);
      });
      this.write(encodeFrame(FrameType.Ping, data));
    });
  }

  /** notePreferred tells the server whether it is this node's home DERP. */
  notePreferred(preferred: boolean): void {
    this.write(encodeFrame(FrameType.NotePreferred, Buffer.of(preferred ? 1 : 0)));
  }

  /** watchConns asks a relay (as its mesh peer) for PeerPresent/PeerGone about every client it holds. */
  watchConns(): void {
    this.write(encodeFrame(FrameType.WatchConns));
  }

  /**
   * forwardPacket hands the relay (as its mesh peer) a packet from src for its client dst.
   * It never buffers without bound: false (dropped) when the connection is closed or backed up.
   */
  forwardPacket(src: Uint8Array, dst: Uint8Array, packet: Uint8Array): boolean {
    if (this.isClosed || this.stream.destroyed || this.stream.writableNeedDrain) return false;
    this.stream.write(encodeFrame(FrameType.ForwardPacket, src, dst, packet));
    return true;
  }

  /** closePeer asks the relay (as its mesh peer) to drop its client with that key. */
  closePeer(key: string | Uint8Array): void {
    this.write(encodeFrame(FrameType.ClosePeer, typeof key === 'string' ? parseNodeKey(key) : key));
  }

  /** writeRaw sends bytes verbatim; tests use it to exercise malformed frames. */
  writeRaw(bytes: Uint8Array): void {
    this.write(Buffer.from(bytes));
  }

  /** pause stops reading from the connection, simulating a slow reader. */
  pause(): void {
    this.stream.pause();
  }

  resume(): void {
    this.stream.resume();
  }

  /**
   * onMessage routes every later message to handler instead of the recv queue
   * (the benchmark uses it to avoid promise overhead); pass undefined to revert.
   */
  onMessage(handler: ((m: DerpMessage) => void) | undefined): void {
    this.handler = handler;
  }

  /** recv resolves with the next message, or rejects on timeout or when the connection is closed. */
  recv(timeoutMs = 5000): Promise<DerpMessage> {
    const queued = this.queue.shift();
    if (queued) return Promise.resolve(queued);
    if (this.isClosed) return Promise.reject(this.closeError ?? new Error('DERP connection closed'));
    return new Promise<DerpMessage>((resolve, reject) => {
      const waiter = {
        resolve: (m: DerpMessage) => {
          clearTimeout(timer);
          resolve(m);
        },
        reject: (e: Error) => {
          clearTimeout(timer);
          reject(e);
        },
      };
      const timer = setTimeout(() => {
        const i = this.waiters.indexOf(waiter);
        if (i >= 0) this.waiters.splice(i, 1);
        reject(new Error(`recv: no DERP message within ${timeoutMs} ms`));
      }, timeoutMs);
      this.waiters.push(waiter);
    });
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<DerpMessage> {
    while (true) {
      try {
        yield await this.recv(2 ** 31 - 1);
      } catch (err) {
        if (this.isClosed && this.queue.length === 0) return;
        throw err;
      }
    }
  }

  /** close ends the connection and resolves once the socket is closed. */
  async close(): Promise<void> {
    if (!this.stream.destroyed) {
      this.stream.end();
      const timer = setTimeout(() => this.stream.destroy(), 500);
      timer.unref();
    }
    await this.closed;
  }

  private write(frame: Buffer): void {
    if (this.isClosed) throw new Error('DERP connection is closed');
    this.stream.write(frame);
  }

  private markClosed(err: Error): void {
    if (this.isClosed) return;
    this.isClosed = true;
    this.closeError = err;
    for (const w of this.waiters.splice(0)) w.reject(err);
    this.login?.reject(err);
  }

  private onData(chunk: Buffer): void {
    this.reader.push(chunk);
    try {
      for (let frame = this.reader.next(); frame; frame = this.reader.next()) this.onFrame(frame);
    } catch (err) {
      this.stream.destroy(err instanceof Error ? err : new Error(String(err)));
    }
  }

  private onFrame(frame: Frame): void {
    const login = this.login;
    if (login) {
      if (!login.gotServerKey) {
        const p = frame.payload;
        if (frame.type !== FrameType.ServerKey || p.length < DERP_MAGIC.length + KEY_LENGTH || !p.subarray(0, 8).equals(DERP_MAGIC)) {
          throw new Error('invalid DERP server greeting');
        }
        this.serverPublicKey = Buffer.from(p.subarray(DERP_MAGIC.length, DERP_MAGIC.length + KEY_LENGTH));
        login.gotServerKey = true;
        const opts = this.loginOptions;
        const info: Record<string, unknown> = { version: PROTOCOL_VERSION };
        if (opts?.meshKey) info.meshKey = opts.meshKey;
        info.CanAckPings = this.canAckPings;
        if (opts?.isProber) info.IsProber = true;
        const sealed = sealTo(Buffer.from(JSON.stringify(info)), this.serverPublicKey, this.privateKey);
        this.write(encodeFrame(FrameType.ClientInfo, this.publicKey, sealed));
        return;
      }
      if (frame.type !== FrameType.ServerInfo) throw new Error(`expected ServerInfo, got frame type 0x${frame.type.toString(16)}`);
      const opened = openFrom(frame.payload, this.serverPublicKey, this.privateKey);
      if (!opened) throw new Error('ServerInfo box does not open with the server key');
      this.login = undefined;
      login.resolve();
      return;
    }
    const message = decodeMessage(frame);
    if (message.type === 'ping' && this.canAckPings) this.write(encodeFrame(FrameType.Pong, message.data.subarray(0, 8)));
    if (message.type === 'pong') {
      const done = this.pendingPings.get(message.data.toString('hex'));
      if (done) {
        this.pendingPings.delete(message.data.toString('hex'));
        done();
        return;
      }
    }
    if (this.handler) return this.handler(message);
    const waiter = this.waiters.shift();
    if (waiter) waiter.resolve(message);
    else this.queue.push(message);
  }
}

function decodeMessage(frame: Frame): DerpMessage {
  const p = frame.payload;
  switch (frame.type) {
    case FrameType.RecvPacket:
      if (p.length >= KEY_LENGTH) return { type: 'packet', source: formatNodeKey(p.subarray(0, KEY_LENGTH)), data: p.subarray(KEY_LENGTH) };
      break;
    case FrameType.PeerGone:
      if (p.length >= KEY_LENGTH) return { type: 'peerGone', peer: formatNodeKey(p.subarray(0, KEY_LENGTH)), reason: p.length > KEY_LENGTH ? p[KEY_LENGTH]! : 0 };
      break;
    case FrameType.PeerPresent:
      if (p.length >= KEY_LENGTH) return { type: 'peerPresent', peer: formatNodeKey(p.subarray(0, KEY_LENGTH)) };
      break;
    case FrameType.KeepAlive:
      return { type: 'keepAlive' };
    case FrameType.Ping:
      if (p.length >= 8) return { type: 'ping', data: p.subarray(0, 8) };
      break;
    case FrameType.Pong:
      if (p.length >= 8) return { type: 'pong', data: p.subarray(0, 8) };
      break;
    case FrameType.Health:
      return { type: 'health', problem: p.toString('utf8') };
    case FrameType.Restarting:
      if (p.length >= 8) return { type: 'restarting', reconnectInMs: p.readUInt32BE(0), tryForMs: p.readUInt32BE(4) };
      break;
  }
  return { type: 'unknown', frameType: frame.type, payload: p };
}

/** readResponseHead reads an HTTP/1.1 response head off socket and returns any bytes after it. */
function readResponseHead(socket: Socket): Promise<{ status: number; head: Record<string, string>; body: Buffer }> {
  return new Promise((resolve, reject) => {
    let buf = Buffer.alloc(0);
    const onData = (chunk: Buffer): void => {
      buf = Buffer.concat([buf, chunk]);
      const end = buf.indexOf('\r\n\r\n');
      if (end === -1) {
        if (buf.length > MAX_RESPONSE_HEAD) finish(new Error('DerpClient: HTTP response head too large'));
        return;
      }
      socket.pause();
      const lines = buf.subarray(0, end).toString('latin1').split('\r\n');
      const m = /^HTTP\/1\.[01] (\d{3})/.exec(lines[0] ?? '');
      if (!m) return finish(new Error(`DerpClient: malformed HTTP status line ${JSON.stringify(lines[0])}`));
      const head: Record<string, string> = {};
      for (const line of lines.slice(1)) {
        const i = line.indexOf(':');
        if (i > 0) head[line.slice(0, i).trim().toLowerCase()] = line.slice(i + 1).trim();
      }
      finish(undefined, { status: Number(m[1]), head, body: buf.subarray(end + 4) });
    };
    const onClose = (): void => finish(new Error(`DerpClient: connection closed before the HTTP response${buf.length ? `: ${buf.toString('utf8').slice(0, 200)}` : ''}`));
    const finish = (err?: Error, value?: { status: number; head: Record<string, string>; body: Buffer }): void => {
      socket.off('data', onData);
      socket.off('close', onClose);
      socket.off('error', onClose);
      if (err) reject(err);
      else resolve(value!);
    };
    socket.on('data', onData);
    socket.on('close', onClose);
    socket.on('error', onClose);
  });
}
