import type { ConnectionOptions } from 'node:tls';
import { DerpClient, type DerpMessage } from './client.js';
import type { DerpLogger, DerpServer, MeshForwarder } from './server.js';

export interface MeshPeerOptions {
  /** url is the other relay's DERP address (`http(s)://host:port/derp`). */
  url: string;
  /** meshKey is the region's shared mesh secret (both relays' DerpServerOptions.meshKey). */
  meshKey: string;
  /** server is the local relay that learns routes from this peer and forwards through it. */
  server: DerpServer;
  logger?: DerpLogger;
  tls?: ConnectionOptions;
  /** minBackoffMs / maxBackoffMs bound the reconnect delay (default 250 ms to 10 s, doubling). */
  minBackoffMs?: number;
  maxBackoffMs?: number;
  /**
   * pingIntervalMs is how often the connection is checked with a DERP ping (default 15 s); a
   * peer that does not answer within 5 s is dropped and redialled, so a silent network
   * failure costs its routes instead of blackholing packets until TCP gives up.
   */
  pingIntervalMs?: number;
}

const silent: DerpLogger = { debug() {}, info() {}, warn() {} };

/**
 * MeshPeer is this relay's connection to another relay of the same region: it logs in
 * with the mesh key, watches which nodes are connected there (PeerPresent/PeerGone) and
 * registers them as routes on the local server, which then hands it packets for those
 * nodes (ForwardPacket). When the connection drops, its routes go at once and it
 * reconnects with a doubling backoff until closed.
 */
export class MeshPeer implements MeshForwarder {
  readonly url: string;
  private client: DerpClient | undefined;
  /** routes are the node keys (`nodekey:<hex>`) this peer registered on the local server. */
  private readonly routes = new Set<string>();
  private closed = false;
  private timer: NodeJS.Timeout | undefined;
  private pinger: NodeJS.Timeout | undefined;
  private backoffMs: number;
  private readonly log: DerpLogger;
  /** connects counts successful logins (tests check a reconnect happened). */
  connects = 0;

  constructor(private readonly options: MeshPeerOptions) {
    this.url = options.url;
    this.log = options.logger ?? silent;
    this.backoffMs = options.minBackoffMs ?? 250;
  }

  /** connected says whether the watch connection is up. */
  get connected(): boolean {
    return Boolean(this.client?.isOpen);
  }

  /** routeCount is how many nodes this peer currently reports. */
  get routeCount(): number {
    return this.routes.size;
  }

  start(): void {
    void this.dial();
  }

  forwardPacket(src: Buffer, dst: Buffer, packet: Buffer): boolean {
    const c = this.client;
    return c !== undefined && c.forwardPacket(src, dst, packet);
  }

  private async dial(): Promise<void> {
    if (this.closed) return;
    let client: DerpClient;
    try {
      client = await DerpClient.connect({ url: this.url, meshKey: this.options.meshKey, tls: this.options.tls, canAckPings: true, timeoutMs: 5000 });
    } catch (err) {
      this.log.debug('derp mesh: could not reach the peer relay; retrying', { url: this.url, err: (err as Error).message, retry_ms: this.backoffMs });
      this.retry();
      return;
    }
    if (this.closed) {
      await client.close();
      return;
    }
    this.client = client;
    this.connects++;
    this.backoffMs = this.options.minBackoffMs ?? 250;
    this.log.info('derp mesh: connected to peer relay', { url: this.url });
    client.onMessage((m) => this.onMessage(m));
    this.pinger = setInterval(() => {
      client.ping(5000).catch(() => {
        this.log.warn('derp mesh: the peer relay stopped answering pings; reconnecting', { url: this.url });
        void client.close();
      });
    }, this.options.pingIntervalMs ?? 15_000);
    this.pinger.unref();
    void client.closed.then(() => {
      clearInterval(this.pinger);
      if (this.client === client) this.client = undefined;
      this.dropRoutes();
      if (!this.closed) {
        this.log.info('derp mesh: lost the peer relay; reconnecting', { url: this.url });
        this.retry();
      }
    });
    try {
      client.watchConns();
    } catch {
      // Closed already: the close handler above reconnects.
    }
  }

  private retry(): void {
    if (this.closed) return;
    const max = this.options.maxBackoffMs ?? 10_000;
    const delay = this.backoffMs * (0.75 + Math.random() * 0.5);
    this.backoffMs = Math.min(max, this.backoffMs * 2);
    this.timer = setTimeout(() => void this.dial(), delay);
    this.timer.unref();
  }

  private onMessage(m: DerpMessage): void {
    if (m.type === 'peerPresent') {
      this.routes.add(m.peer);
      this.options.server.addMeshRoute(m.peer, this);
    } else if (m.type === 'peerGone') {
      this.routes.delete(m.peer);
      this.options.server.removeMeshRoute(m.peer, this);
    } else if (m.type === 'restarting') {
      this.log.info('derp mesh: peer relay is restarting', { url: this.url });
    }
  }

  private dropRoutes(): void {
    for (const key of this.routes) this.options.server.removeMeshRoute(key, this);
    this.routes.clear();
  }

  /** close stops reconnecting, ends the connection and removes every route this peer added. */
  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.timer);
    clearInterval(this.pinger);
    const c = this.client;
    this.client = undefined;
    this.dropRoutes();
    await c?.close();
  }
}
