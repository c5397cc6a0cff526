import { timingSafeEqual } from 'node:crypto';
import type { Duplex } from 'node:stream';
import { sourceOf, WebSocketStream } from '@headway/noise';
import { BOX_OVERHEAD, NONCE_LENGTH, openFrom, sealTo } from './box.js';
import { ClientConn, ProtocolError } from './conn.js';
import type { HandshakeFailureLog } from './failurelog.js';
import { DERP_MAGIC, encodeFrame, FrameTooLargeError, FrameType, MAX_FRAME_LENGTH, MAX_PACKET_SIZE, PROTOCOL_VERSION, type Frame } from './frames.js';
import { WS_MESSAGE_LIMIT } from './http.js';
import { formatNodeKey, KEY_LENGTH } from './keys.js';
import type { LoginLimits } from './limits.js';
import type { Routes } from './routes.js';
import type { DerpClientInfo, DerpLogger, DerpServerStats, RestartNotice, VerifyClient } from './types.js';

const MAX_PING_LENGTH = 1000;

/** SessionsConfig is what DerpServer hands the connections' lifecycle: its key, policy and shared parts. */
export interface SessionsConfig {
  privateKey: Buffer;
  publicKey: Buffer;
  verifyClient: VerifyClient | undefined;
  keepAliveMs: number;
  loginTimeoutMs: number;
  /** meshKey is the region's mesh secret as bytes (see DerpServerOptions.meshKey). */
  meshKey: Buffer | undefined;
  log: DerpLogger;
  failures: HandshakeFailureLog;
  limits: LoginLimits;
  routes: Routes;
  counters: DerpServerStats;
}

/**
 * Sessions runs every accepted connection from its first byte to its close: the login
 * (ClientInfo, admission by verifyClient or the mesh key), then the frame loop, whose
 * packets Routes forwards, and finally its retirement from every table.
 */
export class Sessions {
  readonly connections = new Set<ClientConn>();
  /** closing: the relay is shutting down; logins are refused and departures go unannounced. */
  closing = false;

  constructor(private readonly c: SessionsConfig) {}

  /** start serves an upgraded byte stream: it sends ServerKey and waits for the client to log in. */
  start(socket: Duplex, remoteAddress: string | undefined, transport: 'derp' | 'websocket', head?: Buffer): void {
    const conn = new ClientConn(socket, remoteAddress, transport, sourceOf(remoteAddress));
    this.c.counters.accepts++;
    this.connections.add(conn);
    this.c.limits.charge(conn);
    if ('setNoDelay' in socket && typeof socket.setNoDelay === 'function') socket.setNoDelay(true);
    socket.on('data', (chunk: Buffer) => this.onData(conn, chunk));
    socket.on('drain', () => conn.flush());
    socket.on('end', () => this.closeConn(conn));
    socket.on('close', () => this.closeConn(conn));
    socket.on('error', (err: Error) => {
      this.c.log.debug('derp: connection error', { err: err.message, remote: remoteAddress });
      this.closeConn(conn);
    });
    conn.loginTimer = setTimeout(() => {
      this.c.counters.loginFailures++;
      this.c.failures.report({ remote: remoteAddress, reason: `did not log in within ${this.c.loginTimeoutMs} ms` });
      this.closeConn(conn);
    }, this.c.loginTimeoutMs);
    conn.loginTimer.unref();
    socket.write(encodeFrame(FrameType.ServerKey, DERP_MAGIC, this.c.publicKey));
    if (head && head.length > 0) this.onData(conn, head);
  }

  /** disconnect drops the connection of a node key's hex; its peers get PeerGone. */
  disconnect(hex: string): boolean {
    const conn = this.c.routes.client(hex);
    if (!conn) return false;
    this.c.log.info('derp: disconnecting client', { node_key: formatNodeKey(conn.key) });
    this.closeConn(conn);
    return true;
  }

  /** close sends Restarting to every logged-in client, closes all connections and resolves once they are gone. */
  async close(notice: RestartNotice): Promise<void> {
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
      if (expected) this.c.counters.protocolErrors++;
      const message = err instanceof Error ? err.message : String(err);
      if (conn.state === 'login') {
        this.c.counters.loginFailures++;
        this.c.failures.report({ remote: conn.remoteAddress, reason: `bad DERP login: ${message}`, level: expected ? 'info' : 'warn' });
        this.closeConn(conn);
        return;
      }
      const fields = {
        err: message,
        remote: conn.remoteAddress,
        node_key: conn.keyHex ? formatNodeKey(conn.key) : undefined,
      };
      if (expected) this.c.log.info('derp: closing client after protocol error', fields);
      else this.c.log.warn('derp: closing client after internal error', fields);
      this.closeConn(conn);
    }
  }

  private handleClientInfo(conn: ClientConn, frame: Frame): void {
    if (frame.type !== FrameType.ClientInfo) {
      throw new ProtocolError(`expected ClientInfo frame, got type 0x${frame.type.toString(16)}`);
    }
    if (frame.payload.length < KEY_LENGTH + NONCE_LENGTH + BOX_OVERHEAD) throw new ProtocolError('short ClientInfo frame');
    // Opening the box is the costly step (about a millisecond): an address over its login rate is refused before it.
    if (!this.c.limits.takeLogin(conn)) {
      this.closeConn(conn);
      return;
    }
    const clientKey = Buffer.from(frame.payload.subarray(0, KEY_LENGTH));
    const info = this.openClientInfo(conn, clientKey, frame.payload.subarray(KEY_LENGTH));
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
    const verify = conn.canMesh ? undefined : this.c.verifyClient;
    // Promise.resolve().then also turns a synchronous throw in verifyClient into a refusal.
    const decision = verify ? Promise.resolve().then(() => verify(nodeKey, info)) : Promise.resolve(true);
    decision
      .then(
        (allowed) => this.finishLogin(conn, allowed === true),
        (err: unknown) => {
          this.c.log.warn('derp: verifyClient failed; refusing client', { node_key: nodeKey, err: String(err) });
          this.finishLogin(conn, false);
        },
      )
      .catch((err: unknown) => {
        this.c.log.warn('derp: login failed', { node_key: nodeKey, err: String(err) });
        this.closeConn(conn);
      });
  }

  /** openClientInfo opens the sealed ClientInfo JSON, proving the client holds clientKey, and reads what it declares. */
  private openClientInfo(conn: ClientConn, clientKey: Buffer, sealed: Buffer): DerpClientInfo {
    const opened = openFrom(sealed, clientKey, this.c.privateKey);
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
    return info;
  }

  private isMeshKey(presented: string | undefined): boolean {
    if (!this.c.meshKey || presented === undefined) return false;
    const given = Buffer.from(presented, 'utf8');
    return given.length === this.c.meshKey.length && timingSafeEqual(given, this.c.meshKey);
  }

  private finishLogin(conn: ClientConn, allowed: boolean): void {
    if (conn.state !== 'verifying') return;
    const nodeKey = formatNodeKey(conn.key);
    if (!allowed || this.closing) {
      this.c.counters.loginFailures++;
      const reason = this.closing ? 'relay shutting down' : 'not admitted: the relay does not accept this node key (unknown or expired node)';
      this.c.failures.report({ remote: conn.remoteAddress, reason, fields: { node_key: nodeKey } });
      this.closeConn(conn);
      return;
    }
    clearTimeout(conn.loginTimer);
    conn.loginTimer = undefined;
    conn.state = 'active';
    this.c.limits.release(conn);
    if (conn.canMesh) {
      // A mesh peer is not a node: it is not a packet destination and watchers are not told of it.
      conn.reader.maxLength = MAX_FRAME_LENGTH + KEY_LENGTH;
      this.sendServerInfo(conn);
      this.c.log.info('derp: mesh peer connected', { remote: conn.remoteAddress });
    } else {
      conn.reader.maxLength = MAX_FRAME_LENGTH;
      const previous = this.c.routes.addClient(conn);
      if (previous) {
        // The newest connection wins; the key never left, so peers get no PeerGone.
        this.c.log.info('derp: client reconnected; replacing previous connection', { node_key: nodeKey });
        this.retire(previous);
        previous.socket.destroy();
      }
      this.sendServerInfo(conn);
      this.c.log.debug('derp: client connected', { node_key: nodeKey, transport: conn.transport });
    }
    conn.socket.resume();
    this.processFrames(conn);
  }

  /** sendServerInfo tells a client it is admitted and starts its keepalives. */
  private sendServerInfo(conn: ClientConn): void {
    const serverInfo = sealTo(Buffer.from(JSON.stringify({ version: PROTOCOL_VERSION })), conn.key, this.c.privateKey);
    conn.socket.write(encodeFrame(FrameType.ServerInfo, serverInfo));
    conn.startKeepAlive(this.c.keepAliveMs);
  }

  private handleFrame(conn: ClientConn, frame: Frame): void {
    const p = frame.payload;
    switch (frame.type) {
      case FrameType.SendPacket:
        if (p.length < KEY_LENGTH) throw new ProtocolError('short SendPacket frame');
        if (p.length - KEY_LENGTH > MAX_PACKET_SIZE) throw new ProtocolError('SendPacket data over 64 KiB');
        this.c.routes.forward(conn, p.subarray(0, KEY_LENGTH), p.subarray(KEY_LENGTH));
        return;
      case FrameType.NotePreferred:
        if (p.length !== 1) throw new ProtocolError(`NotePreferred must carry 1 byte, got ${p.length}`);
        conn.preferred = p[0] !== 0;
        return;
      case FrameType.Ping:
        this.c.counters.pings++;
        if (p.length < 8) throw new ProtocolError(`short Ping frame (${p.length} bytes)`);
        if (p.length > MAX_PING_LENGTH) throw new ProtocolError(`Ping frame too large (${p.length} bytes)`);
        conn.sendPong(p.subarray(0, 8));
        return;
      case FrameType.ForwardPacket:
        if (!conn.canMesh) throw new ProtocolError('ForwardPacket from a client without the mesh key');
        if (p.length < 2 * KEY_LENGTH) throw new ProtocolError('short ForwardPacket frame');
        if (p.length - 2 * KEY_LENGTH > MAX_PACKET_SIZE) throw new ProtocolError('ForwardPacket data over 64 KiB');
        this.c.routes.deliverFromMesh(p.subarray(0, KEY_LENGTH), p.subarray(KEY_LENGTH, 2 * KEY_LENGTH), p.subarray(2 * KEY_LENGTH));
        return;
      case FrameType.WatchConns:
        if (!conn.canMesh) throw new ProtocolError('WatchConns from a client without the mesh key');
        this.c.routes.watch(conn);
        return;
      case FrameType.ClosePeer:
        if (!conn.canMesh) throw new ProtocolError('ClosePeer from a client without the mesh key');
        if (p.length !== KEY_LENGTH) throw new ProtocolError(`ClosePeer must carry ${KEY_LENGTH} bytes, got ${p.length}`);
        this.disconnect(p.toString('hex'));
        return;
      default:
        this.c.counters.unknownFrames++;
        return;
    }
  }

  /** retire unregisters a connection exactly once: timers stop, queues empty, and peers learn it left. */
  private retire(conn: ClientConn): void {
    if (conn.state === 'closed') return;
    const wasActive = conn.state === 'active';
    this.c.counters.packetsDroppedGone += conn.end();
    this.c.limits.release(conn);
    this.connections.delete(conn);
    this.c.routes.remove(conn, wasActive);
  }

  private closeConn(conn: ClientConn): void {
    this.retire(conn);
    if (!conn.socket.destroyed) conn.socket.destroy();
  }
}

function clampU32(ms: number): number {
  if (!Number.isFinite(ms) || ms < 0) return 0;
  return Math.min(Math.floor(ms), 0xffffffff);
}
