import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import { isValidWebSocketKey, WebSocketStream } from '@headway/noise';
import { HandshakeFailureLog, type HandshakeFailure } from './failurelog.js';
import { answerRelayRequest, pathOf, switchToDerp, switchToWebSocket, writeHttpError, WS_LOGIN_MESSAGE_LIMIT } from './http.js';
import { encodeFrame, FrameType } from './frames.js';
import { formatNodeKey, KEY_LENGTH, publicKeyFromPrivate } from './keys.js';
import { LoginLimits } from './limits.js';
import { keyHexOf, Routes } from './routes.js';
import { Sessions } from './sessions.js';
import { newStats, silentLogger, type DerpLogger, type DerpServerOptions, type DerpServerStats, type MeshForwarder, type RestartNotice } from './types.js';

export {
  DERP_LOGIN_LIMITS,
  type DerpClientInfo,
  type DerpLogger,
  type DerpServerOptions,
  type DerpServerStats,
  type MeshForwarder,
  type RestartNotice,
  type VerifyClient,
} from './types.js';

const DEFAULT_KEEPALIVE_MS = 60_000;
const DEFAULT_QUEUE_DEPTH = 32;
const DEFAULT_LOGIN_TIMEOUT_MS = 10_000;
/** MAX_MESH_KEY_LENGTH keeps a mesh peer's ClientInfo (key, nonce, tag, JSON around the key) under MAX_CLIENT_INFO_LENGTH. */
const MAX_MESH_KEY_LENGTH = 1024;

/**
 * DerpServer is an embedded DERP relay: it accepts upgraded HTTP connections
 * (raw DERP or WebSocket), logs clients in with their node key, and relays
 * packets between them. It owns no listener; the HTTP server hands it
 * upgrades and requests.
 *
 * It is the front of four parts: LoginLimits (what clients not logged in may cost),
 * Sessions (each connection from login through its frames to its close), Routes (where
 * each node is reachable, here or through a mesh peer) and the HTTP answers in http.ts.
 */
export class DerpServer {
  readonly publicKey: Buffer;
  private readonly log: DerpLogger;
  private readonly failures: HandshakeFailureLog;
  private readonly limits: LoginLimits;
  private readonly routes: Routes;
  private readonly sessions: Sessions;
  private readonly clientAddress: (req: IncomingMessage) => string | undefined;
  private readonly counters = newStats();

  constructor(options: DerpServerOptions) {
    if (!Buffer.isBuffer(options?.privateKey) || options.privateKey.length !== KEY_LENGTH) {
      throw new Error(`DerpServer: privateKey must be a ${KEY_LENGTH}-byte Buffer`);
    }
    const keepAliveMs = options.keepAliveMs ?? DEFAULT_KEEPALIVE_MS;
    if (!Number.isFinite(keepAliveMs) || keepAliveMs <= 0) throw new Error('DerpServer: keepAliveMs must be a positive number');
    const queueDepth = options.sendQueueDepth ?? DEFAULT_QUEUE_DEPTH;
    if (!Number.isInteger(queueDepth) || queueDepth < 1) throw new Error('DerpServer: sendQueueDepth must be a positive integer');
    const privateKey = Buffer.from(options.privateKey);
    this.publicKey = publicKeyFromPrivate(privateKey);
    this.log = options.logger ?? silentLogger;
    this.clientAddress = options.clientAddress ?? ((req) => req.socket?.remoteAddress);
    this.failures = new HandshakeFailureLog(this.log, options.handshakeLog);
    if (options.meshKey !== undefined && (typeof options.meshKey !== 'string' || options.meshKey.length < 16 || options.meshKey.length > MAX_MESH_KEY_LENGTH)) {
      throw new Error(`DerpServer: meshKey must be a string of 16 to ${MAX_MESH_KEY_LENGTH} characters`);
    }
    this.limits = new LoginLimits(options, this.counters, this.failures);
    this.routes = new Routes(this.counters, queueDepth, () => this.sessions.closing);
    this.sessions = new Sessions({
      privateKey,
      publicKey: this.publicKey,
      verifyClient: options.verifyClient,
      keepAliveMs,
      loginTimeoutMs: options.loginTimeoutMs ?? DEFAULT_LOGIN_TIMEOUT_MS,
      meshKey: options.meshKey ? Buffer.from(options.meshKey, 'utf8') : undefined,
      log: this.log,
      failures: this.failures,
      limits: this.limits,
      routes: this.routes,
      counters: this.counters,
    });
  }

  /**
   * addMeshRoute says the node key (`nodekey:<hex>`) is connected to the relay behind
   * forwarder; packets for it go there unless the node is connected here too.
   */
  addMeshRoute(nodePublicKey: string, forwarder: MeshForwarder): void {
    this.routes.addMeshRoute(keyHexOf(nodePublicKey), forwarder);
  }

  /**
   * removeMeshRoute forgets the route when it still points at forwarder; local clients that
   * received packets from that node (and cannot reach it here) get PeerGone, as they would
   * for a local sender that left.
   */
  removeMeshRoute(nodePublicKey: string, forwarder: MeshForwarder): void {
    this.routes.removeMeshRoute(keyHexOf(nodePublicKey), forwarder);
  }

  /** hasMeshRoute reports whether packets for a node key would go to a mesh peer (tests and metrics). */
  hasMeshRoute(nodePublicKey: string): boolean {
    return this.routes.hasMeshRoute(keyHexOf(nodePublicKey));
  }

  /** meshRouteCount is how many node keys are reachable through mesh peers. */
  get meshRouteCount(): number {
    return this.routes.meshRouteCount;
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
    return this.routes.clientCount;
  }

  get stats(): Readonly<DerpServerStats> {
    return { ...this.counters };
  }

  /** loginLimits are the per-address limits on clients that have not logged in, as configured. */
  get loginLimits(): { maxUnauthenticatedPerAddress: number; loginRate: number; loginBurst: number } {
    const { maxUnauthenticatedPerAddress, loginRate, loginBurst } = this.limits;
    return { maxUnauthenticatedPerAddress, loginRate, loginBurst };
  }

  /** unauthenticatedConnections counts connections not logged in yet from the source of remoteAddress (tests and metrics). */
  unauthenticatedConnections(remoteAddress: string): number {
    return this.limits.unauthenticated(remoteAddress);
  }

  /** isConnected reports whether a node key (`nodekey:<hex>`) has an active connection. */
  isConnected(nodePublicKey: string): boolean {
    return this.routes.client(keyHexOf(nodePublicKey)) !== undefined;
  }

  /** queuedPackets reports how many packets wait in a client's send queue (for tests and metrics). */
  queuedPackets(nodePublicKey: string): number {
    return this.routes.client(keyHexOf(nodePublicKey))?.packetQueue.length ?? 0;
  }

  /** droppedPackets reports how many packets were dropped because a client's queue was full. */
  droppedPackets(nodePublicKey: string): number {
    return this.routes.client(keyHexOf(nodePublicKey))?.packetsDropped ?? 0;
  }

  /** disconnect drops a node's connection (e.g. the node was deleted); its peers get PeerGone. */
  disconnect(nodePublicKey: string): boolean {
    return this.sessions.disconnect(keyHexOf(nodePublicKey));
  }

  /** sendHealth tells a client its connection has a problem (empty string clears it). */
  sendHealth(nodePublicKey: string, problem: string): boolean {
    const conn = this.routes.client(keyHexOf(nodePublicKey));
    if (!conn) return false;
    return conn.sendControl(encodeFrame(FrameType.Health, Buffer.from(problem, 'utf8')));
  }

  /**
   * handleRequest answers the relay's plain HTTP routes and returns false for
   * paths it does not own, so the caller can route them elsewhere.
   */
  handleRequest(req: IncomingMessage, res: ServerResponse): boolean {
    return answerRelayRequest(req, res);
  }

  /**
   * handleUpgrade takes over an HTTP upgrade for `/derp` (raw DERP or WebSocket
   * with the `derp` subprotocol) and returns false, leaving the socket alone,
   * for any other path.
   */
  handleUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer): boolean {
    if (pathOf(req) !== '/derp') return false;
    socket.on('error', (err) => this.log.debug('derp: socket error', { err: err.message }));
    if (this.sessions.closing) {
      writeHttpError(socket, 503, 'DERP server is shutting down');
      return true;
    }
    const upgrade = String(req.headers.upgrade ?? '').toLowerCase();
    const protocols = String(req.headers['sec-websocket-protocol'] ?? '')
      .split(',')
      .map((p) => p.trim());
    const remoteAddress = this.clientAddress(req);
    if (this.limits.refuse(remoteAddress)) {
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
      switchToWebSocket(socket, key);
      if ('setNoDelay' in socket && typeof socket.setNoDelay === 'function') socket.setNoDelay(true);
      const ws = new WebSocketStream(socket, { role: 'server', head, maxMessageBytes: WS_LOGIN_MESSAGE_LIMIT });
      this.accept(ws, remoteAddress, 'websocket', Buffer.alloc(0));
      return true;
    }
    // Some old clients send "Upgrade: WebSocket" while speaking raw DERP, so a
    // websocket upgrade without the derp subprotocol is treated as raw DERP.
    if (upgrade !== 'derp' && upgrade !== 'websocket') {
      this.reportHandshakeFailure({ remote: remoteAddress, reason: `upgrade to ${JSON.stringify(upgrade)} instead of DERP or WebSocket` });
      writeHttpError(socket, 426, 'DERP requires connection upgrade');
      return true;
    }
    if (req.headers['derp-fast-start'] !== '1') switchToDerp(socket, this.publicKeyString);
    this.accept(socket, remoteAddress, 'derp', head);
    return true;
  }

  /**
   * accept serves an already-upgraded byte stream; handleUpgrade calls it, and
   * tests or other transports may too.
   */
  accept(socket: Duplex, remoteAddress: string | undefined, transport: 'derp' | 'websocket' = 'derp', head?: Buffer): void {
    if (this.limits.refuse(remoteAddress)) {
      socket.on('error', () => undefined);
      socket.destroy();
      return;
    }
    this.sessions.start(socket, remoteAddress, transport, head);
  }

  /**
   * close tells every client the server is restarting, then closes all
   * connections; it resolves once they are gone.
   */
  async close(notice: RestartNotice = {}): Promise<void> {
    await this.sessions.close(notice);
  }
}
