import { timingSafeEqual } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import { BOX_OVERHEAD, NONCE_LENGTH, openFrom, sealTo } from './box.js';
import {
  DERP_MAGIC,
  encodeFrame,
  FRAME_HEADER_LENGTH,
  FrameReader,
  FrameTooLargeError,
  FrameType,
  looksLikeDisco,
  MAX_CLIENT_INFO_LENGTH,
  MAX_FRAME_LENGTH,
  MAX_PACKET_SIZE,
  PeerGoneReason,
  PROTOCOL_VERSION,
  type Frame,
} from './frames.js';
import { formatNodeKey, KEY_LENGTH, publicKeyFromPrivate } from './keys.js';
import { HandshakeFailureLog, type HandshakeFailure, type HandshakeFailureLogOptions } from './failurelog.js';
import { isValidWebSocketKey, sourceOf, TokenBuckets, webSocketAccept, WebSocketStream } from '@headway/noise';

/** DerpLogger is the slice of a structured logger the relay writes to; @headway/core's Logger fits. */
export interface DerpLogger {
  debug(msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
}

/**
 * DerpClientInfo describes a client asking to be admitted: what it declared in
 * its sealed ClientInfo JSON and where it came from. For `transport: 'verify'`
 * (an external derper asking the control server) only remoteAddress is known.
 */
export interface DerpClientInfo {
  transport: 'derp' | 'websocket' | 'verify';
  version?: number;
  canAckPings?: boolean;
  isProber?: boolean;
  meshKey?: string;
  remoteAddress?: string;
}

/** VerifyClient decides admission for a node key (`nodekey:<hex>`) after it proved ownership of it. */
export type VerifyClient = (nodePublicKey: string, info: DerpClientInfo) => Promise<boolean>;

export interface DerpServerOptions {
  privateKey: Buffer;
  verifyClient?: VerifyClient;
  /** keepAliveMs is the KeepAlive period (default 60 s, plus up to 5 s of jitter like tailscale). */
  keepAliveMs?: number;
  /** sendQueueDepth caps packets buffered per client beyond the socket's own buffer (default 32). */
  sendQueueDepth?: number;
  /** loginTimeoutMs bounds how long a connection may take to log in (default 10 s). */
  loginTimeoutMs?: number;
  logger?: DerpLogger;
  /** handshakeLog tunes the rate limit on lines about failed connection attempts. */
  handshakeLog?: HandshakeFailureLogOptions;
  /**
   * maxUnauthenticatedPerAddress caps connections from one source (an IPv4 address or an IPv6 /64)
   * that have not logged in yet; past it an upgrade gets HTTP 429 (default 1,000).
   */
  maxUnauthenticatedPerAddress?: number;
  /**
   * loginRate and loginBurst bound the logins (ClientInfo frames, each a public-key box to open)
   * one source may attempt: loginBurst at once, loginRate per second after that; a login over the
   * rate is refused, connection closed, before its box is opened (defaults 100 and 1,000).
   */
  loginRate?: number;
  loginBurst?: number;
  /** now is the clock of the login rate limit (tests inject one; default Date.now). */
  now?: () => number;
  /**
   * meshKey, when set, is the secret the other relays of this region present in their
   * ClientInfo: a client showing it is a trusted mesh peer (admitted without verifyClient)
   * and may watch connections (WatchConns) and forward packets (ForwardPacket, ClosePeer).
   * Without it every mesh frame is a protocol error.
   */
  meshKey?: string;
}

/**
 * MeshForwarder carries packets to a node connected to another relay of the region
 * (a mesh peer connection); forwardPacket returns false when it had to drop the packet.
 */
export interface MeshForwarder {
  forwardPacket(src: Buffer, dst: Buffer, packet: Buffer): boolean;
}

/** DerpServerStats are cumulative counters, useful for tests and metrics. */
export interface DerpServerStats {
  accepts: number;
  packetsReceived: number;
  packetsForwarded: number;
  packetsDroppedUnknownDest: number;
  packetsDroppedQueueFull: number;
  packetsDroppedGone: number;
  peerGoneDisconnectedFrames: number;
  peerGoneNotHereFrames: number;
  pings: number;
  loginFailures: number;
  protocolErrors: number;
  unknownFrames: number;
  /** packetsMeshForwarded counts packets handed to a mesh peer for a node connected to another relay. */
  packetsMeshForwarded: number;
  /** packetsMeshDropped counts packets a mesh peer could not take (disconnected or backed up). */
  packetsMeshDropped: number;
  /** packetsFromMesh counts ForwardPacket frames delivered to a local client. */
  packetsFromMesh: number;
  /** connectionsRefusedPerAddress counts connections refused because their address had too many not logged in yet. */
  connectionsRefusedPerAddress: number;
  /** loginsRateLimited counts login frames refused, unopened, because their address was over the login rate. */
  loginsRateLimited: number;
}

export interface RestartNotice {
  /** reconnectInMs advises clients how long to wait before reconnecting. */
  reconnectInMs?: number;
  /** tryForMs advises clients how long to keep trying before normal failure handling. */
  tryForMs?: number;
}

const DEFAULT_KEEPALIVE_MS = 60_000;
const DEFAULT_QUEUE_DEPTH = 32;
const DEFAULT_LOGIN_TIMEOUT_MS = 10_000;
/**
 * DERP_LOGIN_LIMITS are the defaults of the per-address limits on clients that have not logged in
 * (Headway's config sets them from derp.server.*, whose docs in core's keys.ts give the reasons).
 */
export const DERP_LOGIN_LIMITS = { maxUnauthenticatedPerAddress: 1000, loginRate: 100, loginBurst: 1000 } as const;
/**
 * WS_MESSAGE_LIMIT caps one WebSocket frame of a logged-in client (its frames are ≤ 64 KiB + 37 bytes);
 * before login a frame may hold no more than one ClientInfo frame, since frames are buffered whole.
 */
const WS_MESSAGE_LIMIT = 256 << 10;
const WS_LOGIN_MESSAGE_LIMIT = FRAME_HEADER_LENGTH + MAX_CLIENT_INFO_LENGTH;
/** MAX_MESH_KEY_LENGTH keeps a mesh peer's ClientInfo (key, nonce, tag, JSON around the key) under MAX_CLIENT_INFO_LENGTH. */
const MAX_MESH_KEY_LENGTH = 1024;
const MAX_PING_LENGTH = 1000;
/** Control frames (pong, peer-gone, keepalive) are tiny; this cap only stops a reader that never reads. */
const MAX_CONTROL_QUEUE = 256;
const NO_CONTENT_CHALLENGE_HEADER = 'x-tailscale-challenge';
const NO_CONTENT_RESPONSE_HEADER = 'X-Tailscale-Response';

const silentLogger: DerpLogger = { debug() {}, info() {}, warn() {} };

type ConnState = 'login' | 'verifying' | 'active' | 'closed';

/**
 * ClientConn is one accepted connection. Writes never wait: frames go straight
 * to the socket while it has room and otherwise into bounded queues drained on
 * 'drain', so one slow reader can never stall forwarding for anyone else.
 */
class ClientConn {
  state: ConnState = 'login';
  keyHex = '';
  key: Buffer = Buffer.alloc(0);
  info: DerpClientInfo | undefined;
  preferred = false;
  /** canMesh: the client presented the mesh key (another relay of the region). */
  canMesh = false;
  /** unauthenticated: the connection is counted against its source's cap on connections not logged in yet. */
  unauthenticated = false;
  readonly reader = new FrameReader(MAX_CLIENT_INFO_LENGTH);
  readonly packetQueue: Buffer[] = [];
  readonly controlQueue: Buffer[] = [];
  /** sawSources holds keys of peers that sent to this client; it gets PeerGone when they leave. */
  readonly sawSources = new Set<string>();
  packetsDropped = 0;
  /** pendingPong is the one queued Pong, if any; tailscale also keeps at most one waiting. */
  pendingPong: Buffer | undefined;
  keepAliveTimer: NodeJS.Timeout | undefined;
  loginTimer: NodeJS.Timeout | undefined;
  /** Token bucket for PeerGone(not here): 1 per second, burst 3, as tailscale limits it. */
  notHereTokens = 3;
  notHereRefilledAt = Date.now();

  constructor(
    readonly socket: Duplex,
    readonly remoteAddress: string | undefined,
    readonly transport: 'derp' | 'websocket',
    /** source is what per-address limits charge the connection to (IPv4 address or IPv6 /64). */
    readonly source: string,
  ) {}

  get writable(): boolean {
    return !this.socket.destroyed && !this.socket.writableNeedDrain;
  }

  /** sendControl writes or queues a small non-droppable frame; false if the client is hopelessly behind. */
  sendControl(frame: Buffer): boolean {
    if (this.state === 'closed' || this.socket.destroyed) return false;
    if (this.controlQueue.length === 0 && this.packetQueue.length === 0 && this.writable) {
      this.socket.write(frame);
      return true;
    }
    if (this.controlQueue.length >= MAX_CONTROL_QUEUE) return false;
    this.controlQueue.push(frame);
    return true;
  }

  /**
   * sendWatch writes or queues a presence frame for a mesh watcher. Unlike sendControl it
   * has no cap: a dropped PeerPresent/PeerGone would leave the peer's routes wrong for good,
   * and a watcher is a trusted relay whose backlog is bounded by the clients' churn.
   */
  sendWatch(frame: Buffer): void {
    if (this.state === 'closed' || this.socket.destroyed) return;
    if (this.controlQueue.length === 0 && this.packetQueue.length === 0 && this.writable) this.socket.write(frame);
    else this.controlQueue.push(frame);
  }

  /**
   * sendPacketFrame writes or queues a data frame. When the queue is full it
   * drops the oldest queued packet (fresher packets are worth more to
   * WireGuard) and returns true so the caller can count the drop.
   */
  sendPacketFrame(frame: Buffer, depth: number): boolean {
    if (this.controlQueue.length === 0 && this.packetQueue.length === 0 && this.writable) {
      this.socket.write(frame);
      return false;
    }
    let dropped = false;
    if (this.packetQueue.length >= depth) {
      this.packetQueue.shift();
      this.packetsDropped++;
      dropped = true;
    }
    this.packetQueue.push(frame);
    return dropped;
  }

  /** flush moves queued frames to the socket until it signals backpressure again. */
  flush(): void {
    while (this.writable) {
      const next = this.controlQueue.shift() ?? this.packetQueue.shift();
      if (!next) return;
      if (next === this.pendingPong) this.pendingPong = undefined;
      this.socket.write(next);
    }
  }

  takeNotHereToken(): boolean {
    const now = Date.now();
    this.notHereTokens = Math.min(3, this.notHereTokens + (now - this.notHereRefilledAt) / 1000);
    this.notHereRefilledAt = now;
    if (this.notHereTokens < 1) return false;
    this.notHereTokens -= 1;
    return true;
  }
}

class ProtocolError extends Error {}

/**
 * DerpServer is an embedded DERP relay: it accepts upgraded HTTP connections
 * (raw DERP or WebSocket), logs clients in with their node key, and relays
 * packets between them. It owns no listener; the HTTP server hands it
 * upgrades and requests.
 */
export class DerpServer {
  readonly publicKey: Buffer;
  private readonly privateKey: Buffer;
  private readonly verifyClient: VerifyClient | undefined;
  private readonly keepAliveMs: number;
  private readonly queueDepth: number;
  private readonly loginTimeoutMs: number;
  private readonly log: DerpLogger;
  private readonly failures: HandshakeFailureLog;
  /** clients maps raw-key hex to the one active connection for that key. */
  private readonly clients = new Map<string, ClientConn>();
  /** receiversOf maps a sender's key hex to connections it has sent to, who get PeerGone when it leaves. */
  private readonly receiversOf = new Map<string, Set<ClientConn>>();
  private readonly connections = new Set<ClientConn>();
  /** meshKey is the region's mesh secret as bytes (see DerpServerOptions.meshKey). */
  private readonly meshKey: Buffer | undefined;
  /** watchers are mesh peers told about every client that connects or leaves here. */
  private readonly watchers = new Set<ClientConn>();
  /** remote maps a key hex to the mesh peer whose relay holds that node (one lookup per packet). */
  private readonly remote = new Map<string, MeshForwarder>();
  /**
   * remoteAll lists, oldest first, every mesh peer claiming a key, only while more than one
   * does (a device moving between instances shows up on the new one before the old one
   * reports it gone): the newest wins, and the others take over if it leaves first.
   */
  private readonly remoteAll = new Map<string, MeshForwarder[]>();
  private closing = false;
  private readonly maxUnauthenticatedPerAddress: number;
  /** unauthenticatedBySource counts connections not logged in yet per source. */
  private readonly unauthenticatedBySource = new Map<string, number>();
  private readonly loginRate: number;
  private readonly loginBurst: number;
  /** logins rate-limits login frames per source before their box is opened. */
  private readonly logins: TokenBuckets;
  private readonly counters: DerpServerStats = {
    accepts: 0,
    packetsReceived: 0,
    packetsForwarded: 0,
    packetsDroppedUnknownDest: 0,
    packetsDroppedQueueFull: 0,
    packetsDroppedGone: 0,
    peerGoneDisconnectedFrames: 0,
    peerGoneNotHereFrames: 0,
    pings: 0,
    loginFailures: 0,
    protocolErrors: 0,
    unknownFrames: 0,
    packetsMeshForwarded: 0,
    packetsMeshDropped: 0,
    packetsFromMesh: 0,
    connectionsRefusedPerAddress: 0,
    loginsRateLimited: 0,
  };

  constructor(options: DerpServerOptions) {
    if (!Buffer.isBuffer(options?.privateKey) || options.privateKey.length !== KEY_LENGTH) {
      throw new Error(`DerpServer: privateKey must be a ${KEY_LENGTH}-byte Buffer`);
    }
    const keepAliveMs = options.keepAliveMs ?? DEFAULT_KEEPALIVE_MS;
    if (!Number.isFinite(keepAliveMs) || keepAliveMs <= 0) throw new Error('DerpServer: keepAliveMs must be a positive number');
    const queueDepth = options.sendQueueDepth ?? DEFAULT_QUEUE_DEPTH;
    if (!Number.isInteger(queueDepth) || queueDepth < 1) throw new Error('DerpServer: sendQueueDepth must be a positive integer');
    this.privateKey = Buffer.from(options.privateKey);
    this.publicKey = publicKeyFromPrivate(this.privateKey);
    this.verifyClient = options.verifyClient;
    this.keepAliveMs = keepAliveMs;
    this.queueDepth = queueDepth;
    this.loginTimeoutMs = options.loginTimeoutMs ?? DEFAULT_LOGIN_TIMEOUT_MS;
    this.log = options.logger ?? silentLogger;
    this.failures = new HandshakeFailureLog(this.log, options.handshakeLog);
    if (options.meshKey !== undefined && (typeof options.meshKey !== 'string' || options.meshKey.length < 16 || options.meshKey.length > MAX_MESH_KEY_LENGTH)) {
      throw new Error(`DerpServer: meshKey must be a string of 16 to ${MAX_MESH_KEY_LENGTH} characters`);
    }
    const maxUnauthenticated = options.maxUnauthenticatedPerAddress ?? DERP_LOGIN_LIMITS.maxUnauthenticatedPerAddress;
    if (!Number.isInteger(maxUnauthenticated) || maxUnauthenticated < 1) throw new Error('DerpServer: maxUnauthenticatedPerAddress must be a positive integer');
    this.maxUnauthenticatedPerAddress = maxUnauthenticated;
    this.loginRate = options.loginRate ?? DERP_LOGIN_LIMITS.loginRate;
    this.loginBurst = options.loginBurst ?? DERP_LOGIN_LIMITS.loginBurst;
    this.logins = new TokenBuckets({ rate: this.loginRate, burst: this.loginBurst, ...(options.now ? { now: options.now } : {}) });
    this.meshKey = options.meshKey ? Buffer.from(options.meshKey, 'utf8') : undefined;
  }

  /**
   * addMeshRoute says the node key (`nodekey:<hex>`) is connected to the relay behind
   * forwarder; packets for it go there unless the node is connected here too.
   */
  addMeshRoute(nodePublicKey: string, forwarder: MeshForwarder): void {
    const hex = keyHexOf(nodePublicKey);
    if (hex.length !== KEY_LENGTH * 2) return;
    const current = this.remote.get(hex);
    if (current && current !== forwarder) {
      let all = this.remoteAll.get(hex);
      if (!all) this.remoteAll.set(hex, (all = [current]));
      const i = all.indexOf(forwarder);
      if (i >= 0) all.splice(i, 1);
      all.push(forwarder);
    }
    this.remote.set(hex, forwarder);
  }

  /**
   * removeMeshRoute forgets the route when it still points at forwarder; local clients that
   * received packets from that node (and cannot reach it here) get PeerGone, as they would
   * for a local sender that left.
   */
  removeMeshRoute(nodePublicKey: string, forwarder: MeshForwarder): void {
    const hex = keyHexOf(nodePublicKey);
    const all = this.remoteAll.get(hex);
    if (all) {
      const i = all.indexOf(forwarder);
      if (i < 0) return;
      all.splice(i, 1);
      this.remote.set(hex, all[all.length - 1]!);
      if (all.length === 1) this.remoteAll.delete(hex);
      return;
    }
    if (this.remote.get(hex) !== forwarder) return;
    this.remote.delete(hex);
    if (!this.clients.has(hex)) this.notifyGone(hex, Buffer.from(hex, 'hex'));
  }

  /** hasMeshRoute reports whether packets for a node key would go to a mesh peer (tests and metrics). */
  hasMeshRoute(nodePublicKey: string): boolean {
    return this.remote.has(keyHexOf(nodePublicKey));
  }

  /** meshRouteCount is how many node keys are reachable through mesh peers. */
  get meshRouteCount(): number {
    return this.remote.size;
  }

  /**
   * reportHandshakeFailure logs a connection attempt that never became a
   * relay client (TLS, HTTP upgrade or DERP login failed), rate-limited per
   * address and reason; listeners in front of the relay report through it too.
   */
  reportHandshakeFailure(failure: HandshakeFailure): boolean {
    return this.failures.report(failure);
  }

  /** publicKeyString is the server key as `nodekey:<hex>` (the DERP map's node key form). */
  get publicKeyString(): string {
    return formatNodeKey(this.publicKey);
  }

  /** clientCount is the number of distinct logged-in node keys. */
  get clientCount(): number {
    return this.clients.size;
  }

  get stats(): Readonly<DerpServerStats> {
    return { ...this.counters };
  }

  /** loginLimits are the per-address limits on clients that have not logged in, as configured. */
  get loginLimits(): { maxUnauthenticatedPerAddress: number; loginRate: number; loginBurst: number } {
    return { maxUnauthenticatedPerAddress: this.maxUnauthenticatedPerAddress, loginRate: this.loginRate, loginBurst: this.loginBurst };
  }

  /** unauthenticatedConnections counts connections not logged in yet from the source of remoteAddress (tests and metrics). */
  unauthenticatedConnections(remoteAddress: string): number {
    return this.unauthenticatedBySource.get(sourceOf(remoteAddress)) ?? 0;
  }

  /** isConnected reports whether a node key (`nodekey:<hex>`) has an active connection. */
  isConnected(nodePublicKey: string): boolean {
    return this.clients.has(keyHexOf(nodePublicKey));
  }

  /** queuedPackets reports how many packets wait in a client's send queue (for tests and metrics). */
  queuedPackets(nodePublicKey: string): number {
    return this.clients.get(keyHexOf(nodePublicKey))?.packetQueue.length ?? 0;
  }

  /** droppedPackets reports how many packets were dropped because a client's queue was full. */
  droppedPackets(nodePublicKey: string): number {
    return this.clients.get(keyHexOf(nodePublicKey))?.packetsDropped ?? 0;
  }

  /** disconnect drops a node's connection (e.g. the node was deleted); its peers get PeerGone. */
  disconnect(nodePublicKey: string): boolean {
    const conn = this.clients.get(keyHexOf(nodePublicKey));
    if (!conn) return false;
    this.log.info('derp: disconnecting client', { node_key: formatNodeKey(conn.key) });
    this.closeConn(conn);
    return true;
  }

  /** sendHealth tells a client its connection has a problem (empty string clears it). */
  sendHealth(nodePublicKey: string, problem: string): boolean {
    const conn = this.clients.get(keyHexOf(nodePublicKey));
    if (!conn) return false;
    return conn.sendControl(encodeFrame(FrameType.Health, Buffer.from(problem, 'utf8')));
  }

  /**
   * handleRequest answers the relay's plain HTTP routes and returns false for
   * paths it does not own, so the caller can route them elsewhere.
   */
  handleRequest(req: IncomingMessage, res: ServerResponse): boolean {
    const path = pathOf(req);
    switch (path) {
      case '/derp':
        res.writeHead(426, { 'Content-Type': 'text/plain; charset=utf-8', Connection: 'close' });
        res.end('DERP requires connection upgrade\n');
        return true;
      case '/derp/probe':
      case '/derp/latency-check':
        if (req.method === 'GET' || req.method === 'HEAD') {
          res.writeHead(200, { 'Access-Control-Allow-Origin': '*' });
          res.end();
        } else {
          res.writeHead(405, { 'Content-Type': 'text/plain; charset=utf-8' });
          res.end('bogus probe method\n');
        }
        return true;
      case '/generate_204': {
        const headers: Record<string, string> = {
          'Cache-Control': 'no-cache, no-store, must-revalidate, no-transform, max-age=0',
        };
        const challenge = req.headers[NO_CONTENT_CHALLENGE_HEADER];
        if (typeof challenge === 'string' && challenge.length > 0 && challenge.length <= 64 && /^[A-Za-z0-9._:-]+$/.test(challenge)) {
          headers[NO_CONTENT_RESPONSE_HEADER] = `response ${challenge}`;
        }
        res.writeHead(204, headers);
        res.end();
        return true;
      }
      default:
        return false;
    }
  }

  /**
   * handleUpgrade takes over an HTTP upgrade for `/derp` (raw DERP or WebSocket
   * with the `derp` subprotocol) and returns false, leaving the socket alone,
   * for any other path.
   */
  handleUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer): boolean {
    if (pathOf(req) !== '/derp') return false;
    socket.on('error', (err) => this.log.debug('derp: socket error', { err: err.message }));
    if (this.closing) {
      writeHttpError(socket, 503, 'DERP server is shutting down');
      return true;
    }
    const upgrade = String(req.headers.upgrade ?? '').toLowerCase();
    const protocols = String(req.headers['sec-websocket-protocol'] ?? '')
      .split(',')
      .map((p) => p.trim());
    const remoteAddress = req.socket?.remoteAddress;
    if (this.refuseUnauthenticated(remoteAddress)) {
      writeHttpError(socket, 429, 'too many DERP connections from this address that have not logged in; retry later');
      return true;
    }

    if (upgrade === 'websocket' && protocols.includes('derp')) {
      const key = req.headers['sec-websocket-key'];
      if (req.headers['sec-websocket-version'] !== '13' || !isValidWebSocketKey(key)) {
        this.reportHandshakeFailure({ remote: remoteAddress, reason: 'WebSocket upgrade without version 13 or a valid key' });
        writeHttpError(socket, 400, 'WebSocket upgrade needs Sec-WebSocket-Version: 13 and a valid Sec-WebSocket-Key');
        return true;
      }
      socket.write(
        'HTTP/1.1 101 Switching Protocols\r\n' +
          'Upgrade: websocket\r\n' +
          'Connection: Upgrade\r\n' +
          `Sec-WebSocket-Accept: ${webSocketAccept(key)}\r\n` +
          'Sec-WebSocket-Protocol: derp\r\n\r\n',
      );
      if ('setNoDelay' in socket && typeof socket.setNoDelay === 'function') socket.setNoDelay(true);
      const ws = new WebSocketStream(socket, { role: 'server', head, maxMessageBytes: WS_LOGIN_MESSAGE_LIMIT });
      this.accept(ws, remoteAddress, 'websocket', Buffer.alloc(0));
      return true;
    }
    // Very old clients sent "Upgrade: WebSocket" while speaking raw DERP, so a
    // websocket upgrade without the derp subprotocol is treated as raw DERP.
    if (upgrade !== 'derp' && upgrade !== 'websocket') {
      this.reportHandshakeFailure({ remote: remoteAddress, reason: `upgrade to ${JSON.stringify(upgrade)} instead of DERP or WebSocket` });
      writeHttpError(socket, 426, 'DERP requires connection upgrade');
      return true;
    }
    if (req.headers['derp-fast-start'] !== '1') {
      socket.write(
        'HTTP/1.1 101 Switching Protocols\r\n' +
          'Upgrade: DERP\r\n' +
          'Connection: Upgrade\r\n' +
          `Derp-Version: ${PROTOCOL_VERSION}\r\n` +
          `Derp-Public-Key: ${this.publicKeyString}\r\n\r\n`,
      );
    }
    this.accept(socket, remoteAddress, 'derp', head);
    return true;
  }

  /**
   * accept serves an already-upgraded byte stream; handleUpgrade calls it, and
   * tests or other transports may too.
   */
  accept(socket: Duplex, remoteAddress: string | undefined, transport: 'derp' | 'websocket' = 'derp', head?: Buffer): void {
    if (this.refuseUnauthenticated(remoteAddress)) {
      socket.on('error', () => undefined);
      socket.destroy();
      return;
    }
    const conn = new ClientConn(socket, remoteAddress, transport, sourceOf(remoteAddress));
    this.counters.accepts++;
    this.connections.add(conn);
    conn.unauthenticated = true;
    this.unauthenticatedBySource.set(conn.source, (this.unauthenticatedBySource.get(conn.source) ?? 0) + 1);
    if ('setNoDelay' in socket && typeof socket.setNoDelay === 'function') socket.setNoDelay(true);
    socket.on('data', (chunk: Buffer) => this.onData(conn, chunk));
    socket.on('drain', () => conn.flush());
    socket.on('end', () => this.closeConn(conn));
    socket.on('close', () => this.closeConn(conn));
    socket.on('error', (err: Error) => {
      this.log.debug('derp: connection error', { err: err.message, remote: remoteAddress });
      this.closeConn(conn);
    });
    conn.loginTimer = setTimeout(() => {
      this.counters.loginFailures++;
      this.reportHandshakeFailure({ remote: remoteAddress, reason: `did not log in within ${this.loginTimeoutMs} ms` });
      this.closeConn(conn);
    }, this.loginTimeoutMs);
    conn.loginTimer.unref();
    socket.write(encodeFrame(FrameType.ServerKey, DERP_MAGIC, this.publicKey));
    if (head && head.length > 0) this.onData(conn, head);
  }

  /**
   * refuseUnauthenticated reports (and counts) that remoteAddress's source already has
   * maxUnauthenticatedPerAddress connections that have not logged in, so a new one must be refused.
   */
  private refuseUnauthenticated(remoteAddress: string | undefined): boolean {
    const source = sourceOf(remoteAddress);
    if ((this.unauthenticatedBySource.get(source) ?? 0) < this.maxUnauthenticatedPerAddress) return false;
    this.counters.connectionsRefusedPerAddress++;
    this.reportHandshakeFailure({ remote: remoteAddress, reason: `too many connections not logged in from ${source} (limit ${this.maxUnauthenticatedPerAddress})` });
    return true;
  }

  /** releaseUnauthenticated stops counting a connection against its source's cap (it logged in, or it closed). */
  private releaseUnauthenticated(conn: ClientConn): void {
    if (!conn.unauthenticated) return;
    conn.unauthenticated = false;
    const n = (this.unauthenticatedBySource.get(conn.source) ?? 1) - 1;
    if (n > 0) this.unauthenticatedBySource.set(conn.source, n);
    else this.unauthenticatedBySource.delete(conn.source);
  }

  /**
   * close tells every client the server is restarting, then closes all
   * connections; it resolves once they are gone.
   */
  async close(notice: RestartNotice = {}): Promise<void> {
    this.closing = true;
    const restarting = Buffer.alloc(8);
    restarting.writeUInt32BE(clampU32(notice.reconnectInMs ?? 0), 0);
    restarting.writeUInt32BE(clampU32(notice.tryForMs ?? 0), 4);
    const frame = encodeFrame(FrameType.Restarting, restarting);
    const closed: Promise<void>[] = [];
    for (const conn of this.connections) {
      // Restarting goes out ahead of anything still queued; queued packets are dropped.
      if (conn.state === 'active' && !conn.socket.destroyed) conn.socket.write(frame);
      closed.push(
        new Promise<void>((resolve) => {
          if (conn.socket.destroyed) return resolve();
          conn.socket.once('close', () => resolve());
          // Give the Restarting frame a moment to leave, then force the socket shut.
          setTimeout(() => conn.socket.destroy(), 200).unref();
        }),
      );
      this.retire(conn);
      conn.socket.end();
    }
    await Promise.all(closed);
  }

  private onData(conn: ClientConn, chunk: Buffer): void {
    if (conn.state === 'closed') return;
    conn.reader.push(chunk);
    this.processFrames(conn);
  }

  private processFrames(conn: ClientConn): void {
    try {
      while (conn.state === 'login' || conn.state === 'active') {
        const frame = conn.reader.next();
        if (!frame) return;
        if (conn.state === 'login') this.handleClientInfo(conn, frame);
        else this.handleFrame(conn, frame);
      }
    } catch (err) {
      // Whatever went wrong, it is confined to this connection: the relay keeps serving everyone else.
      const expected = err instanceof ProtocolError || err instanceof FrameTooLargeError;
      if (expected) this.counters.protocolErrors++;
      const message = err instanceof Error ? err.message : String(err);
      if (conn.state === 'login') {
        this.counters.loginFailures++;
        this.reportHandshakeFailure({ remote: conn.remoteAddress, reason: `bad DERP login: ${message}`, level: expected ? 'info' : 'warn' });
        this.closeConn(conn);
        return;
      }
      const fields = {
        err: message,
        remote: conn.remoteAddress,
        node_key: conn.keyHex ? formatNodeKey(conn.key) : undefined,
      };
      if (expected) this.log.info('derp: closing client after protocol error', fields);
      else this.log.warn('derp: closing client after internal error', fields);
      this.closeConn(conn);
    }
  }

  private handleClientInfo(conn: ClientConn, frame: Frame): void {
    if (frame.type !== FrameType.ClientInfo) {
      throw new ProtocolError(`expected ClientInfo frame, got type 0x${frame.type.toString(16)}`);
    }
    if (frame.payload.length < KEY_LENGTH + NONCE_LENGTH + BOX_OVERHEAD) throw new ProtocolError('short ClientInfo frame');
    // Opening the box is the costly step (about a millisecond): an address over its login rate is refused before it.
    if (!this.logins.take(conn.source)) {
      this.counters.loginsRateLimited++;
      this.counters.loginFailures++;
      this.reportHandshakeFailure({ remote: conn.remoteAddress, reason: `over the login rate of ${conn.source} (login attempts per address are limited)` });
      this.closeConn(conn);
      return;
    }
    const clientKey = Buffer.from(frame.payload.subarray(0, KEY_LENGTH));
    const opened = openFrom(frame.payload.subarray(KEY_LENGTH), clientKey, this.privateKey);
    if (!opened) throw new ProtocolError('ClientInfo box does not open with the claimed client key');
    let json: unknown;
    try {
      json = JSON.parse(opened.toString('utf8'));
    } catch {
      throw new ProtocolError('ClientInfo is not valid JSON');
    }
    if (typeof json !== 'object' || json === null || Array.isArray(json)) throw new ProtocolError('ClientInfo JSON is not an object');
    const raw = json as Record<string, unknown>;
    const info: DerpClientInfo = {
      version: typeof raw.version === 'number' ? raw.version : 0,
      canAckPings: raw.CanAckPings === true,
      isProber: raw.IsProber === true,
      transport: conn.transport,
    };
    if (typeof raw.meshKey === 'string' && raw.meshKey !== '') info.meshKey = raw.meshKey;
    if (conn.remoteAddress !== undefined) info.remoteAddress = conn.remoteAddress;
    conn.canMesh = this.isMeshKey(info.meshKey);
    conn.key = clientKey;
    conn.keyHex = clientKey.toString('hex');
    conn.info = info;
    conn.state = 'verifying';
    // The key is proven: a WebSocket client may now send frames as large as a logged-in client's
    // (it may send them before it hears it is admitted; they wait in the paused stream).
    if (conn.socket instanceof WebSocketStream) conn.socket.maxMessageBytes = WS_MESSAGE_LIMIT;
    // Hold further frames until admission is decided; the socket's buffer absorbs them meanwhile.
    conn.socket.pause();
    const nodeKey = formatNodeKey(clientKey);
    // A mesh peer is another relay of the region, not a node: the mesh key is its admission.
    const verify = conn.canMesh ? undefined : this.verifyClient;
    // Promise.resolve().then also turns a synchronous throw in verifyClient into a refusal.
    const decision = verify ? Promise.resolve().then(() => verify(nodeKey, info)) : Promise.resolve(true);
    decision
      .then(
        (allowed) => this.finishLogin(conn, allowed === true),
        (err: unknown) => {
          this.log.warn('derp: verifyClient failed; refusing client', { node_key: nodeKey, err: String(err) });
          this.finishLogin(conn, false);
        },
      )
      .catch((err: unknown) => {
        this.log.warn('derp: login failed', { node_key: nodeKey, err: String(err) });
        this.closeConn(conn);
      });
  }

  private finishLogin(conn: ClientConn, allowed: boolean): void {
    if (conn.state !== 'verifying') return;
    const nodeKey = formatNodeKey(conn.key);
    if (!allowed || this.closing) {
      this.counters.loginFailures++;
      const reason = this.closing ? 'relay shutting down' : 'not admitted: the relay does not accept this node key (unknown or expired node)';
      this.reportHandshakeFailure({ remote: conn.remoteAddress, reason, fields: { node_key: nodeKey } });
      this.closeConn(conn);
      return;
    }
    clearTimeout(conn.loginTimer);
    conn.loginTimer = undefined;
    conn.state = 'active';
    this.releaseUnauthenticated(conn);
    if (conn.canMesh) {
      // A mesh peer is not a node: it is not a packet destination and watchers are not told of it.
      conn.reader.maxLength = MAX_FRAME_LENGTH + KEY_LENGTH;
      const serverInfo = sealTo(Buffer.from(JSON.stringify({ version: PROTOCOL_VERSION })), conn.key, this.privateKey);
      conn.socket.write(encodeFrame(FrameType.ServerInfo, serverInfo));
      this.startKeepAlive(conn);
      this.log.info('derp: mesh peer connected', { remote: conn.remoteAddress });
      conn.socket.resume();
      this.processFrames(conn);
      return;
    }
    conn.reader.maxLength = MAX_FRAME_LENGTH;
    const previous = this.clients.get(conn.keyHex);
    this.clients.set(conn.keyHex, conn);
    if (previous && previous !== conn) {
      // The newest connection wins; the key never left, so peers get no PeerGone.
      this.log.info('derp: client reconnected; replacing previous connection', { node_key: nodeKey });
      this.retire(previous);
      previous.socket.destroy();
    }
    const serverInfo = sealTo(Buffer.from(JSON.stringify({ version: PROTOCOL_VERSION })), conn.key, this.privateKey);
    conn.socket.write(encodeFrame(FrameType.ServerInfo, serverInfo));
    this.startKeepAlive(conn);
    this.log.debug('derp: client connected', { node_key: nodeKey, transport: conn.transport });
    if (this.watchers.size && !previous) {
      const present = encodeFrame(FrameType.PeerPresent, conn.key);
      for (const w of this.watchers) w.sendWatch(present);
    }
    conn.socket.resume();
    this.processFrames(conn);
  }

  private startKeepAlive(conn: ClientConn): void {
    const jitter = Math.floor(Math.random() * Math.min(5000, this.keepAliveMs / 10));
    const frame = encodeFrame(FrameType.KeepAlive);
    conn.keepAliveTimer = setInterval(() => {
      // A keepalive only matters if nothing else is flowing; skip it when the client is backed up.
      if (conn.controlQueue.length === 0) conn.sendControl(frame);
    }, this.keepAliveMs + jitter);
    conn.keepAliveTimer.unref();
  }

  private handleFrame(conn: ClientConn, frame: Frame): void {
    const p = frame.payload;
    switch (frame.type) {
      case FrameType.SendPacket:
        if (p.length < KEY_LENGTH) throw new ProtocolError('short SendPacket frame');
        if (p.length - KEY_LENGTH > MAX_PACKET_SIZE) throw new ProtocolError('SendPacket data over 64 KiB');
        this.forward(conn, p.subarray(0, KEY_LENGTH), p.subarray(KEY_LENGTH));
        return;
      case FrameType.NotePreferred:
        if (p.length !== 1) throw new ProtocolError(`NotePreferred must carry 1 byte, got ${p.length}`);
        conn.preferred = p[0] !== 0;
        return;
      case FrameType.Ping: {
        this.counters.pings++;
        if (p.length < 8) throw new ProtocolError(`short Ping frame (${p.length} bytes)`);
        if (p.length > MAX_PING_LENGTH) throw new ProtocolError(`Ping frame too large (${p.length} bytes)`);
        // Like tailscale, at most one pong waits at a time; a client pinging faster is ignored.
        if (conn.pendingPong) return;
        const pong = encodeFrame(FrameType.Pong, p.subarray(0, 8));
        if (conn.controlQueue.length === 0 && conn.packetQueue.length === 0 && conn.writable) {
          conn.socket.write(pong);
        } else if (conn.controlQueue.length < MAX_CONTROL_QUEUE) {
          conn.pendingPong = pong;
          conn.controlQueue.push(pong);
        }
        return;
      }
      case FrameType.ForwardPacket:
        if (!conn.canMesh) throw new ProtocolError('ForwardPacket from a client without the mesh key');
        if (p.length < 2 * KEY_LENGTH) throw new ProtocolError('short ForwardPacket frame');
        if (p.length - 2 * KEY_LENGTH > MAX_PACKET_SIZE) throw new ProtocolError('ForwardPacket data over 64 KiB');
        this.deliverFromMesh(p.subarray(0, KEY_LENGTH), p.subarray(KEY_LENGTH, 2 * KEY_LENGTH), p.subarray(2 * KEY_LENGTH));
        return;
      case FrameType.WatchConns:
        if (!conn.canMesh) throw new ProtocolError('WatchConns from a client without the mesh key');
        if (this.watchers.has(conn)) return;
        this.watchers.add(conn);
        for (const c of this.clients.values()) conn.sendWatch(encodeFrame(FrameType.PeerPresent, c.key));
        return;
      case FrameType.ClosePeer:
        if (!conn.canMesh) throw new ProtocolError('ClosePeer from a client without the mesh key');
        if (p.length !== KEY_LENGTH) throw new ProtocolError(`ClosePeer must carry ${KEY_LENGTH} bytes, got ${p.length}`);
        this.disconnect(p.toString('hex'));
        return;
      default:
        this.counters.unknownFrames++;
        return;
    }
  }

  private isMeshKey(presented: string | undefined): boolean {
    if (!this.meshKey || presented === undefined) return false;
    const given = Buffer.from(presented, 'utf8');
    return given.length === this.meshKey.length && timingSafeEqual(given, this.meshKey);
  }

  private forward(src: ClientConn, dstKey: Buffer, packet: Buffer): void {
    this.counters.packetsReceived++;
    const dstHex = dstKey.toString('hex');
    const dst = this.clients.get(dstHex);
    if (!dst || dst.state !== 'active') {
      const peer = this.remote.get(dstHex);
      if (peer) {
        if (peer.forwardPacket(src.key, dstKey, packet)) this.counters.packetsMeshForwarded++;
        else this.counters.packetsMeshDropped++;
        return;
      }
      this.counters.packetsDroppedUnknownDest++;
      // Tailscale only answers disco packets, rate-limited, so magicsock stops probing a peer not here.
      if (looksLikeDisco(packet) && src.takeNotHereToken()) {
        if (src.sendControl(encodeFrame(FrameType.PeerGone, dstKey, Buffer.of(PeerGoneReason.NotHere)))) {
          this.counters.peerGoneNotHereFrames++;
        }
      }
      return;
    }
    if (dst.socket.destroyed) {
      this.counters.packetsDroppedGone++;
      return;
    }
    this.counters.packetsForwarded++;
    this.deliver(dst, src.key, src.keyHex, packet);
  }

  /** deliver queues a RecvPacket for dst and remembers that it heard from the source (for PeerGone). */
  private deliver(dst: ClientConn, srcKey: Buffer, srcHex: string, packet: Buffer): void {
    const frame = encodeFrame(FrameType.RecvPacket, srcKey, packet);
    if (dst.sendPacketFrame(frame, this.queueDepth)) this.counters.packetsDroppedQueueFull++;
    if (!dst.sawSources.has(srcHex)) {
      dst.sawSources.add(srcHex);
      let receivers = this.receiversOf.get(srcHex);
      if (!receivers) this.receiversOf.set(srcHex, (receivers = new Set()));
      receivers.add(dst);
    }
  }

  /**
   * deliverFromMesh hands a packet another relay forwarded to the local client it names,
   * as if the original sender were connected here. A destination not connected here is
   * dropped, never forwarded again, so two relays can never bounce a packet between them.
   */
  private deliverFromMesh(srcKey: Buffer, dstKey: Buffer, packet: Buffer): void {
    const dst = this.clients.get(dstKey.toString('hex'));
    if (!dst || dst.state !== 'active' || dst.socket.destroyed) {
      this.counters.packetsDroppedUnknownDest++;
      return;
    }
    this.counters.packetsFromMesh++;
    // srcKey is a view into the frame just read; the hex names it for PeerGone bookkeeping.
    this.deliver(dst, srcKey, srcKey.toString('hex'), packet);
  }

  /** notifyGone tells every client that received packets from the key that it left. */
  private notifyGone(hex: string, key: Buffer): void {
    const receivers = this.receiversOf.get(hex);
    this.receiversOf.delete(hex);
    if (!receivers || this.closing) return;
    const gone = encodeFrame(FrameType.PeerGone, key, Buffer.of(PeerGoneReason.Disconnected));
    for (const receiver of receivers) {
      receiver.sawSources.delete(hex);
      if (receiver.sendControl(gone)) this.counters.peerGoneDisconnectedFrames++;
    }
  }

  /** retire unregisters a connection exactly once: timers stop, queues empty, and peers learn it left. */
  private retire(conn: ClientConn): void {
    if (conn.state === 'closed') return;
    const wasActive = conn.state === 'active';
    conn.state = 'closed';
    this.releaseUnauthenticated(conn);
    clearTimeout(conn.loginTimer);
    clearInterval(conn.keepAliveTimer);
    this.counters.packetsDroppedGone += conn.packetQueue.length;
    conn.packetQueue.length = 0;
    conn.controlQueue.length = 0;
    this.connections.delete(conn);
    this.watchers.delete(conn);
    for (const srcHex of conn.sawSources) {
      const receivers = this.receiversOf.get(srcHex);
      receivers?.delete(conn);
      if (receivers && receivers.size === 0) this.receiversOf.delete(srcHex);
    }
    conn.sawSources.clear();
    if (!wasActive || this.clients.get(conn.keyHex) !== conn) return;
    this.clients.delete(conn.keyHex);
    if (this.watchers.size && !this.closing) {
      const gone = encodeFrame(FrameType.PeerGone, conn.key, Buffer.of(PeerGoneReason.Disconnected));
      for (const w of this.watchers) w.sendWatch(gone);
    }
    // A node still reachable through a mesh peer has not left the region.
    if (this.remote.has(conn.keyHex)) return;
    this.notifyGone(conn.keyHex, conn.key);
  }

  private closeConn(conn: ClientConn): void {
    this.retire(conn);
    if (!conn.socket.destroyed) conn.socket.destroy();
  }
}

function keyHexOf(nodePublicKey: string): string {
  if (typeof nodePublicKey !== 'string') return '';
  return nodePublicKey.startsWith('nodekey:') ? nodePublicKey.slice(8).toLowerCase() : nodePublicKey.toLowerCase();
}

function pathOf(req: IncomingMessage): string {
  const url = req.url ?? '/';
  const q = url.indexOf('?');
  return q === -1 ? url : url.slice(0, q);
}

function writeHttpError(socket: Duplex, status: number, message: string): void {
  const reason = status === 400 ? 'Bad Request' : status === 426 ? 'Upgrade Required' : status === 429 ? 'Too Many Requests' : 'Service Unavailable';
  const body = message + '\n';
  socket.end(
    `HTTP/1.1 ${status} ${reason}\r\nContent-Type: text/plain; charset=utf-8\r\n` +
      `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
  );
}

function clampU32(ms: number): number {
  if (!Number.isFinite(ms) || ms < 0) return 0;
  return Math.min(Math.floor(ms), 0xffffffff);
}
