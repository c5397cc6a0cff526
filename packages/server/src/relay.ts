import type http from 'node:http';
import type { Socket as UdpSocket } from 'node:dgram';
import { isIP, type Server as NetServer } from 'node:net';
import { handOver } from './listeners.js';
import { BootstrapDns } from './bootstrap-dns.js';
import { join } from 'node:path';
import type { Duplex } from 'node:stream';
import type Router from '@koa/router';
import type { Context } from 'koa';
import { DerpServer, loadOrCreateRelayCertificate, RELAY_CERT_RENEW_BEFORE_MS, RelayListener, StunServer, verifyHandler, type RelayCertificate } from '@headway/derp';
import type { HeadwayConfig } from '@headway/core';
import { parseHostPort } from '@headway/core';
import { clientAddressOf, trustedProxies } from '@headway/core';
import type { Logger } from '@headway/core';
import { loadOrCreateKey } from '@headway/core';
import type { State } from '@headway/core';
import type { ClusterMember } from '@headway/core';
import { DerpMesh } from '@headway/core';
import { CERT_PIN_MIN_CAPABILITY_VERSION, relayHostName, relayNeedsOwnTls, type DerpMapSource } from '@headway/control';

/** The relay's generated TLS identity, in data_dir (see Relay.startTls). */
export const RELAY_CERT_FILE = 'derp_tls_cert.pem';
export const RELAY_KEY_FILE = 'derp_tls_key.pem';
/** How often a running server checks whether the relay certificate is due for renewal. */
const RELAY_CERT_CHECK_MS = 24 * 3600_000;

function isLoopback(host: string): boolean {
  return host === 'localhost' || host === '::1' || (isIP(host) === 4 && host.startsWith('127.'));
}

/** RelayPorts are the relay's UDP (STUN) and TCP (its own TLS port) sockets, bound before the server started. */
export interface RelayPorts { stun?: UdpSocket; relayTls?: NetServer }

/**
 * Relay is the embedded DERP relay (derp.server.enabled) with STUN and, for an
 * http:// server_url, a TLS port of its own; it serves only registered,
 * unexpired nodes when derp.server.verify_clients is set, and drops a node's
 * relay connection when the node is deleted. Disabled, it starts nothing and
 * its HTTP routes answer 404.
 */
export class Relay {
  derp?: DerpServer;
  stun?: StunServer;
  /** listener is the relay's own TLS (and plain HTTP) port, when server_url is http:// (see relayNeedsOwnTls). */
  listener?: RelayListener;
  /** mesh links this relay with the other cluster instances' relays (cluster mode). */
  mesh?: DerpMesh;
  private certTimer?: NodeJS.Timeout;
  private unsubscribe?: () => void;

  constructor(
    private readonly state: State,
    private readonly config: HeadwayConfig,
    private readonly logger: Logger,
    private readonly derpMap: DerpMapSource,
    /** meshKey (cluster mode) admits the other instances' relays as mesh peers. */
    private readonly meshKey?: string,
    /** ports are STUN's and the TLS port's sockets when bound before start (server/listeners.ts); else start binds them. */
    private readonly ports: RelayPorts = {},
  ) {}

  /** start starts the relay, STUN and the TLS port; on failure it releases whatever it bound. */
  async start(): Promise<void> {
    try {
      await this.startRelay();
    } catch (err) {
      await this.close();
      throw err;
    }
    this.unsubscribe = this.state.bus.subscribe((c) => {
      if (c.type === 'node-removed') this.derp?.disconnect(c.node.nodeKey);
    });
  }

  private async startRelay(): Promise<void> {
    const { config, logger } = this;
    if (!config.derp.server.enabled) return;
    const key = loadOrCreateKey(config.derp.server.private_key_path);
    this.derp = new DerpServer({
      privateKey: key.privateKey,
      logger,
      verifyClient: config.derp.server.verify_clients ? async (nodeKey) => this.admits(nodeKey) : undefined,
      maxUnauthenticatedPerAddress: config.derp.server.max_unauthenticated_connections_per_address,
      loginRate: config.derp.server.login_rate,
      loginBurst: config.derp.server.login_burst,
      clientAddress: clientAddressOf(trustedProxies(config.trusted_proxies)),
      ...(this.meshKey ? { meshKey: this.meshKey } : {}),
    });
    const stunAddr = config.derp.server.stun_listen_addr ? parseHostPort(config.derp.server.stun_listen_addr) : undefined;
    if (stunAddr) {
      this.stun = new StunServer();
      try {
        const bound = await this.stun.listen(this.ports.stun ? { socket: this.ports.stun } : { host: stunAddr.host, port: stunAddr.port });
        this.derpMap.stunPort = bound.port;
      } catch (err) {
        throw new Error(`derp.server.stun_listen_addr ${config.derp.server.stun_listen_addr}: ${(err as Error).message}`);
      }
    } else {
      this.derpMap.stunPort = -1;
    }
    if (relayNeedsOwnTls(config)) await this.startTls();
  }

  /**
   * startTls gives the relay a TLS port of its own with a self-signed
   * certificate kept in data_dir, whose SHA-256 the DERP map pins: Tailscale
   * clients dial DERP only over TLS, so with a plain-http server_url the relay
   * would otherwise be unreachable (every client reporting a TLS error and the
   * server seeing nothing).
   */
  private async startTls(): Promise<void> {
    const { config, logger } = this;
    const s = config.derp.server;
    const host = relayHostName(config);
    const certPath = join(config.data_dir, RELAY_CERT_FILE);
    const keyPath = join(config.data_dir, RELAY_KEY_FILE);
    const hostNames = [host, s.ipv4, s.ipv6].filter((h) => h && h !== 'none');
    const load = async (): Promise<RelayCertificate> => {
      const cert = await loadOrCreateRelayCertificate({ certPath, keyPath, hostNames });
      if (cert.created) logger.info('derp: generated the relay TLS certificate', { path: certPath, reason: cert.reason, sha256: cert.sha256, expires: cert.notAfter.toISOString() });
      return cert;
    };
    let cert = await load();
    const listenHost = parseHostPort(config.listen_addr)!.host;
    const addr = s.tls_listen_addr ? parseHostPort(s.tls_listen_addr)! : { host: listenHost, port: 0 };
    try {
      // The main port's deadline from accept to a complete request head holds here too (noise.handshake_timeout).
      this.listener = await RelayListener.listen({
        derp: this.derp!, cert: cert.cert, key: cert.key, host: addr.host, port: addr.port, handshakeTimeoutMs: config.noise.handshake_timeout,
        ...(this.ports.relayTls ? { server: handOver(this.ports.relayTls) } : {}),
      });
    } catch (err) {
      const what = s.tls_listen_addr ? `derp.server.tls_listen_addr ${s.tls_listen_addr}` : `derp.server.tls_listen_addr (empty: ${listenHost} from listen_addr, any port)`;
      throw new Error(`${what}: ${(err as Error).message}`);
    }
    const port = this.listener.address().port;
    this.derpMap.setRelayTls({ port, certSha256: cert.sha256 });
    logger.info('derp: relay serving TLS on its own port (server_url is http://); its self-signed certificate is pinned in the DERP map', {
      addr: `${addr.host.includes(':') ? `[${addr.host}]` : addr.host}:${port}`, host_name: host, sha256: cert.sha256,
    });
    logger.warn(`derp: Tailscale clients older than 1.82 (capability version ${CERT_PIN_MIN_CAPABILITY_VERSION}) cannot check a pinned certificate, so they are told to use the relay over TLS without verifying it; serve Headway over https (server_url and tls_cert_path, or a TLS proxy) to give every client a verified relay`);
    if (isLoopback(addr.host) && !isLoopback(host)) {
      logger.warn('derp: the relay\'s TLS port listens on loopback but server_url names another host: devices on other machines cannot reach the relay; set derp.server.tls_listen_addr (e.g. 0.0.0.0:8443)', { listen: addr.host, host_name: host });
    }
    // A running server renews the certificate before it expires and republishes the pin.
    this.certTimer = setInterval(() => {
      if (cert.notAfter.getTime() - Date.now() >= RELAY_CERT_RENEW_BEFORE_MS) return;
      load().then((next) => {
        cert = next;
        this.listener?.setCertificate(next.cert, next.key);
        this.derpMap.setRelayTls({ port, certSha256: next.sha256 });
      }).catch((err: Error) => logger.warn('derp: renewing the relay TLS certificate failed; keeping the current one', { error: err.message }));
    }, RELAY_CERT_CHECK_MS);
    this.certTimer.unref();
  }

  /**
   * joinMesh meshes this relay with the relays of the other live instances of the cluster
   * (followed at every heartbeat), so two devices whose relay connections landed on
   * different instances still reach each other through the relay.
   */
  joinMesh(member: ClusterMember): void {
    if (!this.derp || !this.meshKey || this.mesh) return;
    const mesh = new DerpMesh(this.derp, this.meshKey, this.logger);
    this.mesh = mesh;
    member.onLive = (others) => mesh.update(others);
    mesh.update(member.liveInstances());
  }

  /** admits: the relay serves only registered, unexpired nodes (also answers external derpers' /verify). */
  admits(nodeKey: string): boolean {
    const node = this.state.nodes.byNodeKey(nodeKey);
    return Boolean(node && !(node.expiry && node.expiry.getTime() <= Date.now()));
  }

  /** handleUpgrade takes a /derp WebSocket or DERP upgrade; false when the relay is off or refuses it. */
  handleUpgrade(req: http.IncomingMessage, socket: Duplex, head: Buffer): boolean {
    return Boolean(this.derp?.handleUpgrade(req, socket, head));
  }

  /** routes mounts the relay's plain-HTTP routes (/derp, probes, and /verify for verifying relays). */
  routes(router: Router): void {
    const derpRoute = (ctx: Context) => {
      if (this.derp && this.derp.handleRequest(ctx.req, ctx.res)) ctx.respond = false;
      else { ctx.status = 404; ctx.body = 'DERP relay not enabled (derp.server.enabled)\n'; }
    };
    router.get('/derp', derpRoute);
    router.get('/derp/probe', derpRoute);
    router.get('/derp/latency-check', derpRoute);
    router.get('/generate_204', derpRoute);
    // The relay's fallback resolver, for clients whose DNS fails; only where a relay runs, as in headscale.
    const bootstrap = new BootstrapDns(() => this.derpMap.map);
    router.get('/bootstrap-dns', async (ctx) => {
      if (!this.derp) { ctx.status = 404; ctx.body = 'DERP relay not enabled (derp.server.enabled)\n'; return; }
      ctx.set('Cache-Control', 'no-store');
      ctx.body = await bootstrap.answer();
    });
    // /verify tells anyone whether a node key is registered; it exists only for relays
    // that verify clients (derp.server.verify_clients), and is a 404 otherwise.
    if (this.config.derp.server.verify_clients) {
      const verify = verifyHandler(async (nodeKey: string) => this.admits(nodeKey));
      router.post('/verify', async (ctx) => { ctx.respond = false; await verify(ctx.req, ctx.res); });
    }
  }

  async close(): Promise<void> {
    this.unsubscribe?.();
    clearInterval(this.certTimer);
    await this.mesh?.close();
    await this.derp?.close();
    await this.listener?.close();
    await this.stun?.close();
  }
}
