import type { Duplex } from 'node:stream';
import { encodeFrame, FrameReader, FrameType, MAX_CLIENT_INFO_LENGTH } from './frames.js';
import type { DerpClientInfo } from './types.js';

/** Control frames (pong, peer-gone, keepalive) are tiny; this cap only stops a reader that never reads. */
const MAX_CONTROL_QUEUE = 256;

/**
 * ConnState is where a connection is in its life: waiting for its ClientInfo frame, waiting for
 * verifyClient to admit it, relaying, or gone.
 */
export type ConnState = 'login' | 'verifying' | 'active' | 'closed';

/** ProtocolError is a client breaking the DERP protocol; it closes that connection and nothing else. */
export class ProtocolError extends Error {}

/**
 * ClientConn is one accepted connection. Writes never wait: frames go straight
 * to the socket while it has room and otherwise into bounded queues drained on
 * 'drain', so one slow reader can never stall forwarding for anyone else.
 */
export class ClientConn {
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

  /** sendPong answers a Ping with its first 8 bytes; like tailscale, a client pinging faster than it reads is ignored. */
  sendPong(data: Buffer): void {
    if (this.pendingPong) return;
    const pong = encodeFrame(FrameType.Pong, data);
    if (this.controlQueue.length === 0 && this.packetQueue.length === 0 && this.writable) {
      this.socket.write(pong);
    } else if (this.controlQueue.length < MAX_CONTROL_QUEUE) {
      this.pendingPong = pong;
      this.controlQueue.push(pong);
    }
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

  /**
   * startKeepAlive sends KeepAlive every periodMs plus up to 5 s of jitter (a tenth of the period
   * at most), as tailscale does, so clients' keepalives do not line up.
   */
  startKeepAlive(periodMs: number): void {
    const jitter = Math.floor(Math.random() * Math.min(5000, periodMs / 10));
    const frame = encodeFrame(FrameType.KeepAlive);
    this.keepAliveTimer = setInterval(() => {
      // A keepalive only matters if nothing else is flowing; skip it when the client is backed up.
      if (this.controlQueue.length === 0) this.sendControl(frame);
    }, periodMs + jitter);
    this.keepAliveTimer.unref();
  }

  /**
   * end marks the connection closed, stops its timers and empties its queues; it returns how
   * many queued packets that dropped. The caller unregisters it and destroys the socket.
   */
  end(): number {
    this.state = 'closed';
    clearTimeout(this.loginTimer);
    clearInterval(this.keepAliveTimer);
    const dropped = this.packetQueue.length;
    this.packetQueue.length = 0;
    this.controlQueue.length = 0;
    return dropped;
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
