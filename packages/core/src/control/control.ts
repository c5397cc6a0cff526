import http from 'node:http';
import http2 from 'node:http2';
import https from 'node:https';
import { isIP, type Socket } from 'node:net';
import { join } from 'node:path';
import type { Duplex } from 'node:stream';
import type Router from '@koa/router';
import { handleTs2021Upgrade, Ts2021Limits, type RefusalKind, type Ts2021ConnectionInfo } from '@headway/noise';
import { DerpServer, HandshakeFailureLog, loadOrCreateRelayCertificate, RELAY_CERT_RENEW_BEFORE_MS, RelayListener, StunServer, verifyHandler, type RelayCertificate } from '@headway/derp';
import type { HeadwayConfig } from '../config/schema.js';
import { parseHostPort } from '../config/load.js';
import type { Node } from '../domain.js';
import { HeadwayError } from '../errors.js';
import type { Logger } from '../log.js';
import { safeErrorText } from '../errors.js';
import { loadOrCreateKey } from '../kernel/keyfile.js';
import type { DnsPort } from '../ports/dns.js';
import type { DriveGrant } from '../ports/drive.js';
import type { PolicyService } from '../policy/service.js';
import type { State } from '../state/state.js';
import type { Metrics } from '../server/metrics.js';
import { CERT_PIN_MIN_CAPABILITY_VERSION, DerpMapSource, relayHostName, relayNeedsOwnTls } from './derpmap.js';
import { DnsConfigSource } from './dns.js';
import { frame, zstdReady } from './frames.js';
import { Mapper } from './mapper.js';
import { NetworkView } from './netview.js';
import { Registrar, routesFromHostinfo } from './register.js';
import { MapSession, SessionHub } from './sessions.js';
import { parseMapRequest, parseRegisterRequest } from './validate.js';
import { MIN_CAPABILITY_VERSION, type MapRequest } from './wire.js';

const H2_BODY_LIMIT = 1024 * 1024;
/** The relay's generated TLS identity, in data_dir (see startRelayTls). */
export const RELAY_CERT_FILE = 'derp_tls_cert.pem';
export const RELAY_KEY_FILE = 'derp_tls_key.pem';
/** How often a running server checks whether the relay certificate is due for renewal. */
const RELAY_CERT_CHECK_MS = 24 * 3600_000;
/** TLS_HANDSHAKE_RECORD is the first byte a TLS client sends. */
const TLS_HANDSHAKE_RECORD = 0x16;

export interface ControlOptions {
  state: State;
  config: HeadwayConfig;
  logger: Logger;
  metrics: Metrics;
  policy: PolicyService;
  controlKey: { privateKey: Buffer; publicKey: Buffer };
  dnsPlugins?: DnsPort[];
  /** driveGrants are the drive adapters' Taildrive grants (DriveService.grants), compiled into every node's map. */
  driveGrants?: () => readonly DriveGrant[];
}

function isLoopback(host: string): boolean {
  return host === 'localhost' || host === '::1' || (isIP(host) === 4 && host.startsWith('127.'));
}

/**
 * RefusalLog logs refused ts2021 handshakes without letting a flood flood the log: the first of each kind
 * per minute is logged, later ones are counted into the next line.
 */
class RefusalLog {
  private readonly last = new Map<RefusalKind, { at: number; suppressed: number }>();
  constructor(private readonly logger: Logger) {}
  note(reason: string, kind: RefusalKind): void {
    const now = Date.now();
    const l = this.last.get(kind);
    if (l && now - l.at < 60_000) { l.suppressed++; return; }
    this.logger.info('ts2021 connection refused', { reason, kind, ...(l?.suppressed ? { suppressed_since_last: l.suppressed } : {}) });
    this.last.set(kind, { at: now, suppressed: 0 });
  }
}


function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

/**
 * ControlServer speaks the Tailscale control protocol: `/key`, the ts2021 Noise
 * upgrade with HTTP/2 inside, register and map, the register page, and (when
 * enabled) the embedded DERP relay with STUN.
 */
export class ControlServer {
  readonly view: NetworkView;
  readonly mapper: Mapper;
  readonly hub: SessionHub;
  readonly registrar: Registrar;
  readonly dns: DnsConfigSource;
  readonly derpMap: DerpMapSource;
  derp?: DerpServer;
  stun?: StunServer;
  /** relayListener is the relay's own TLS (and plain HTTP) port, when server_url is http:// (see relayNeedsOwnTls). */
  relayListener?: RelayListener;
  private relayCertTimer?: NodeJS.Timeout;
  /** mismatchLog reports TLS handshakes that reach a plain-HTTP listener, rate-limited. */
  private readonly mismatchLog: HandshakeFailureLog;
  private readonly conns = new Map<string, Set<Duplex>>();
  private readonly streams = new Map<number, Set<http2.Http2ServerResponse>>();
  private readonly ephemeralTimers = new Map<number, NodeJS.Timeout>();
  private unsubscribe?: () => void;
  /** limits guard /ts2021 against unauthenticated exhaustion (handshake rate, replays, session caps). */
  readonly limits: Ts2021Limits;
  /** sourceByMachineKey remembers where each machine's latest session came from (pending-login quotas). */
  private readonly sourceByMachineKey = new Map<string, string>();
  private pendingGc?: NodeJS.Timeout;

  constructor(private readonly o: ControlOptions) {
    const { state, config, logger } = o;
    this.view = new NetworkView(state, logger, o.driveGrants);
    const prefixes = [config.prefixes.v4, config.prefixes.v6].filter(Boolean);
    this.dns = new DnsConfigSource(config.dns, prefixes, logger, () => state.bus.publish({ type: 'dns-changed' }), o.dnsPlugins);
    this.derpMap = new DerpMapSource(config, logger, () => state.bus.publish({ type: 'derp-changed' }));
    this.mapper = new Mapper(state, config, this.view, this.dns, this.derpMap);
    this.hub = new SessionHub(state, this.mapper, logger, o.metrics, () => o.policy.policyText);
    this.hub.closeNode = (id) => this.endStreams(id);
    this.registrar = new Registrar(state, config, logger);
    this.registrar.sourceOf = (machineKey) => this.sourceByMachineKey.get(machineKey);
    this.limits = new Ts2021Limits({
      handshakeRate: config.noise.handshake_rate,
      handshakeBurst: config.noise.handshake_burst,
      replayWindowMs: config.noise.replay_window,
      maxUnauthenticated: config.noise.max_unauthenticated_sessions,
      maxUnauthenticatedPerSource: config.noise.max_unauthenticated_sessions_per_address,
      isAuthenticated: (machineKey) => state.nodeByMachineKey(machineKey) !== undefined,
    });
    this.mismatchLog = new HandshakeFailureLog(logger);
  }

  async init(): Promise<void> {
    await zstdReady();
    await this.dns.init();
    const { state, logger } = this.o;
    try {
      await this.startRelay();
      await this.derpMap.init();
    } catch (err) {
      // startServer only closes a ControlServer whose init succeeded: release the relay's ports here.
      clearInterval(this.relayCertTimer);
      await this.relayListener?.close();
      await this.stun?.close();
      throw err;
    }
    if (!Object.keys(this.derpMap.map.Regions).length) {
      logger.warn('the DERP map is empty: devices behind NAT cannot reach each other; enable derp.server or set derp.urls/derp.paths');
    }
    this.hub.start();
    this.unsubscribe = state.bus.subscribe((c) => {
      // autoApprovers apply whenever a node's advertised routes may have changed, and to all on a policy change.
      if (c.type === 'policy-changed') void this.applyAutoApprovals(state.listNodes());
      if (c.type === 'node-added' || c.type === 'node-changed') void this.applyAutoApprovals([c.node]);
      if (c.type === 'node-removed') {
        this.derp?.disconnect(c.node.nodeKey);
        clearTimeout(this.ephemeralTimers.get(c.nodeId));
      }
    });
    for (const n of state.listNodes()) if (n.ephemeral) this.scheduleEphemeral(n.id);
    this.startPendingGc();
  }

  /** startPendingGc deletes expired interactive logins periodically (nothing else removes abandoned ones). */
  private startPendingGc(): void {
    const every = this.o.config.registration.gc_interval;
    if (!every) return;
    const sweep = () => {
      this.o.state.deleteExpiredPending().catch((err: Error) => this.o.logger.warn('pending registration cleanup failed', { error: err.message }));
    };
    sweep();
    this.pendingGc = setInterval(sweep, every);
    this.pendingGc.unref();
  }

  /** startRelay starts the embedded relay with STUN and, for an http:// server_url, its TLS port. */
  private async startRelay(): Promise<void> {
    const { config, logger } = this.o;
    if (!config.derp.server.enabled) return;
    const key = loadOrCreateKey(config.derp.server.private_key_path);
    this.derp = new DerpServer({
      privateKey: key.privateKey,
      logger,
      verifyClient: config.derp.server.verify_clients ? async (nodeKey) => this.admits(nodeKey) : undefined,
    });
    const stunAddr = config.derp.server.stun_listen_addr ? parseHostPort(config.derp.server.stun_listen_addr) : undefined;
    if (stunAddr) {
      this.stun = new StunServer();
      try {
        const bound = await this.stun.listen({ host: stunAddr.host, port: stunAddr.port });
        this.derpMap.stunPort = bound.port;
      } catch (err) {
        throw new Error(`derp.server.stun_listen_addr ${config.derp.server.stun_listen_addr}: ${(err as Error).message}`);
      }
    } else {
      this.derpMap.stunPort = -1;
    }
    if (relayNeedsOwnTls(config)) await this.startRelayTls();
  }

  /**
   * startRelayTls gives the relay a TLS port of its own with a self-signed
   * certificate kept in data_dir, whose SHA-256 the DERP map pins: Tailscale
   * clients dial DERP only over TLS, so with a plain-http server_url the relay
   * would otherwise be unreachable (every client reporting a TLS error and the
   * server seeing nothing).
   */
  private async startRelayTls(): Promise<void> {
    const { config, logger } = this.o;
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
      this.relayListener = await RelayListener.listen({ derp: this.derp!, cert: cert.cert, key: cert.key, host: addr.host, port: addr.port });
    } catch (err) {
      const what = s.tls_listen_addr ? `derp.server.tls_listen_addr ${s.tls_listen_addr}` : `derp.server.tls_listen_addr (empty: ${listenHost} from listen_addr, any port)`;
      throw new Error(`${what}: ${(err as Error).message}`);
    }
    const port = this.relayListener.address().port;
    this.derpMap.setRelayTls({ port, certSha256: cert.sha256 });
    logger.info('derp: relay serving TLS on its own port (server_url is http://); its self-signed certificate is pinned in the DERP map', {
      addr: `${addr.host.includes(':') ? `[${addr.host}]` : addr.host}:${port}`, host_name: host, sha256: cert.sha256,
    });
    logger.warn(`derp: Tailscale clients older than 1.82 (capability version ${CERT_PIN_MIN_CAPABILITY_VERSION}) cannot check a pinned certificate, so they are told to use the relay over TLS without verifying it; serve Headway over https (server_url and tls_cert_path, or a TLS proxy) to give every client a verified relay`);
    if (isLoopback(addr.host) && !isLoopback(host)) {
      logger.warn('derp: the relay\'s TLS port listens on loopback but server_url names another host: devices on other machines cannot reach the relay; set derp.server.tls_listen_addr (e.g. 0.0.0.0:8443)', { listen: addr.host, host_name: host });
    }
    // A running server renews the certificate before it expires and republishes the pin.
    this.relayCertTimer = setInterval(() => {
      if (cert.notAfter.getTime() - Date.now() >= RELAY_CERT_RENEW_BEFORE_MS) return;
      load().then((next) => {
        cert = next;
        this.relayListener?.setCertificate(next.cert, next.key);
        this.derpMap.setRelayTls({ port, certSha256: next.sha256 });
      }).catch((err: Error) => logger.warn('derp: renewing the relay TLS certificate failed; keeping the current one', { error: err.message }));
    }, RELAY_CERT_CHECK_MS);
    this.relayCertTimer.unref();
  }

  /** admits: the relay serves only registered, unexpired nodes (also answers external derpers' /verify). */
  /** primaryRoutes answers API reads with primaries brought up to date first. */
  primaryRoutes(nodeId: number): string[] {
    this.hub.syncPrimaries();
    return this.view.primaryRoutes(nodeId);
  }

  admits(nodeKey: string): boolean {
    const node = this.o.state.nodeByNodeKey(nodeKey);
    return Boolean(node && !(node.expiry && node.expiry.getTime() <= Date.now()));
  }

  /**
   * attach takes over HTTP upgrades for /ts2021 and /derp on a listener, bounds how long a TCP
   * connection may stay silent before its first request or upgrade (noise.handshake_timeout),
   * and on a plain-HTTP listener reports TLS handshakes that reach it (a client told to use
   * https here: server_url says https with no TLS in front, or a DERP map names this port for
   * TLS), which otherwise fail on the client alone.
   */
  attach(server: http.Server): void {
    if (!(server instanceof https.Server)) {
      server.on('clientError', (err: NodeJS.ErrnoException & { rawPacket?: Buffer }, socket: Duplex) => {
        if (err.rawPacket?.[0] === TLS_HANDSHAKE_RECORD) {
          const s = socket as Socket;
          this.mismatchLog.report({
            remote: s.remoteAddress ? `${s.remoteAddress}:${s.remotePort}` : undefined,
            reason: 'TLS handshake on the plain-HTTP listener: the client expects https here (an https server_url with no TLS in front of Headway, or a DERP map that names this port); terminate TLS in front of Headway or set tls_cert_path',
            level: 'warn',
          });
          socket.destroy();
          return;
        }
        // Otherwise do what Node does when nobody listens: answer unless a response already started.
        const s = socket as Socket & { _httpMessage?: { _headerSent?: boolean } | null };
        if (s.writable && !s._httpMessage?._headerSent) {
          const status = err.code === 'HPE_HEADER_OVERFLOW' ? '431 Request Header Fields Too Large'
            : err.code === 'HPE_CHUNK_EXTENSIONS_OVERFLOW' ? '413 Payload Too Large'
            : err.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? '408 Request Timeout' : '400 Bad Request';
          s.write(`HTTP/1.1 ${status}\r\nConnection: close\r\n\r\n`);
        }
        s.destroy();
      });
    }
    const deadline = this.o.config.noise.handshake_timeout;
    if (deadline > 0) {
      // Keyed by peer address and port: with TLS, 'connection' sees the TCP socket, requests the TLS one.
      const waiting = new Map<string, NodeJS.Timeout>();
      const peer = (s: { remoteAddress?: string; remotePort?: number }) => `${s.remoteAddress}|${s.remotePort}`;
      const arrived = (s: Duplex) => {
        const key = peer(s as never);
        const t = waiting.get(key);
        if (t) { clearTimeout(t); waiting.delete(key); }
      };
      server.on('connection', (socket: Socket) => {
        const key = peer(socket);
        const t = setTimeout(() => { waiting.delete(key); socket.destroy(); }, deadline);
        t.unref();
        waiting.set(key, t);
        socket.once('close', () => { if (waiting.get(key) === t) { clearTimeout(t); waiting.delete(key); } });
      });
      server.prependListener('request', (req: http.IncomingMessage) => arrived(req.socket));
      server.prependListener('upgrade', (req: http.IncomingMessage) => arrived(req.socket));
    }
    const refusals = new RefusalLog(this.o.logger);
    server.on('upgrade', (req: http.IncomingMessage, socket: Duplex, head: Buffer) => {
      const path = (req.url ?? '').split('?')[0];
      if (path === '/ts2021') {
        handleTs2021Upgrade(req, socket, head, {
          privateKey: this.o.controlKey.privateKey,
          minCapabilityVersion: MIN_CAPABILITY_VERSION,
          limits: this.limits,
          onConnection: (conn, info) => this.serveConnection(conn, info),
          onRefused: (reason, kind) => refusals.note(reason, kind),
        });
        return;
      }
      if (path === '/derp' && this.derp?.handleUpgrade(req, socket, head)) return;
      socket.end('HTTP/1.1 404 Not Found\r\nConnection: close\r\nContent-Length: 0\r\n\r\n');
    });
  }

  /** routes mounts the plain-HTTP control routes on the main listener's router. */
  routes(router: Router): void {
    router.get('/key', (ctx) => {
      const v = Number(ctx.query.v);
      if (!ctx.query.v || !Number.isInteger(v)) { ctx.status = 400; ctx.body = 'missing or invalid capability version (?v=N)\n'; return; }
      if (v < 39) { ctx.status = 400; ctx.body = 'client too old\n'; return; }
      ctx.body = { legacyPublicKey: `mkey:${'0'.repeat(64)}`, publicKey: `mkey:${this.o.controlKey.publicKey.toString('hex')}` };
    });
    router.get('/register/:key', async (ctx) => {
      const key = String(ctx.params.key);
      const pending = /^[A-Za-z0-9_-]{1,64}$/.test(key) ? await this.o.state.getPending(key) : undefined;
      ctx.type = 'text/html; charset=utf-8';
      if (!pending) {
        ctx.status = 404;
        ctx.body = `<!doctype html><title>Headway</title><h1>Registration expired</h1><p>This registration link is unknown or has expired. Run <code>tailscale up</code> again on the device to get a new one.</p>`;
        return;
      }
      const host = escapeHtml(String((pending.hostinfo as { Hostname?: string } | null)?.Hostname ?? 'a device'));
      ctx.body = `<!doctype html><meta charset="utf-8"><title>Headway: register ${host}</title>
<h1>Register ${host}</h1>
<p>An administrator can add this device to the network by running, on the Headway server:</p>
<pre><code>headway nodes register --user &lt;USER&gt; --key ${escapeHtml(key)}</code></pre>
<p>Replace <code>&lt;USER&gt;</code> with the user who will own the device. This link expires at ${pending.expiresAt.toISOString()}.</p>`;
    });
    const derpRoute = (ctx: import('koa').Context) => {
      if (this.derp && this.derp.handleRequest(ctx.req, ctx.res)) ctx.respond = false;
      else { ctx.status = 404; ctx.body = 'DERP relay not enabled (derp.server.enabled)\n'; }
    };
    router.get('/derp', derpRoute);
    router.get('/derp/probe', derpRoute);
    router.get('/derp/latency-check', derpRoute);
    router.get('/generate_204', derpRoute);
    // /verify tells anyone whether a node key is registered; it exists only for relays
    // that verify clients (derp.server.verify_clients), and is a 404 otherwise.
    if (this.o.config.derp.server.verify_clients) {
      const verify = verifyHandler(async (nodeKey: string) => this.admits(nodeKey));
      router.post('/verify', async (ctx) => { ctx.respond = false; await verify(ctx.req, ctx.res); });
    }
  }

  /**
   * serveConnection runs HTTP/2 over a finished Noise handshake. A connection must send its first request
   * within noise.first_request_timeout and is closed after noise.idle_timeout without an open stream (a map
   * long-poll stays open), so handshaken connections that never speak HTTP/2 cannot pile up.
   */
  private serveConnection(conn: Duplex, info: Ts2021ConnectionInfo): void {
    const set = this.conns.get(info.machineKey) ?? this.conns.set(info.machineKey, new Set()).get(info.machineKey)!;
    set.add(conn);
    this.sourceByMachineKey.set(info.machineKey, info.source);
    let timer: NodeJS.Timeout | undefined;
    let session: http2.ServerHttp2Session | undefined;
    const arm = (ms: number) => {
      clearTimeout(timer);
      if (ms <= 0) return;
      timer = setTimeout(() => {
        // GOAWAY first so a client learns the connection is done; destroy regardless of what it does next.
        if (session && !session.destroyed) session.close();
        setImmediate(() => conn.destroy());
      }, ms);
      timer.unref();
    };
    arm(this.o.config.noise.first_request_timeout);
    conn.on('close', () => {
      clearTimeout(timer);
      set.delete(conn);
      if (!set.size) { this.conns.delete(info.machineKey); this.sourceByMachineKey.delete(info.machineKey); }
    });
    conn.on('error', () => undefined);
    this.o.logger.debug('ts2021 connection', { machine_key: info.machineKey, capver: info.capabilityVersion });
    // Go's HTTP/2 server default; a client uses a handful (map poll, register, lite updates).
    const h2 = http2.createServer({ settings: { enablePush: false, maxConcurrentStreams: 250 } });
    h2.on('request', (req, res) => {
      this.o.logger.trace('control request', { machine_key: info.machineKey, method: req.method, path: (req.url ?? '').split('?')[0] });
      this.handle(req, res, info).catch((err: Error) => {
        this.o.logger.error('control request failed', { path: req.url, error: err.message });
        if (!res.headersSent) { res.writeHead(500); res.end('internal error\n'); } else res.end();
      });
    });
    h2.on('sessionError', () => conn.destroy());
    h2.on('session', (s) => {
      session = s;
      s.on('error', () => undefined);
      let open = 0;
      s.on('stream', (stream) => {
        open++;
        clearTimeout(timer);
        // An open stream keeps the connection; one whose request body never finishes must not keep it forever.
        const bodyDeadline = this.o.config.noise.first_request_timeout;
        const slow = bodyDeadline > 0 ? setTimeout(() => { if (!stream.readableEnded) stream.close(http2.constants.NGHTTP2_CANCEL); }, bodyDeadline) : undefined;
        slow?.unref();
        stream.once('end', () => clearTimeout(slow));
        stream.once('close', () => { clearTimeout(slow); if (--open === 0) arm(this.o.config.noise.idle_timeout); });
      });
    });
    h2.emit('connection', conn);
  }

  private async body(req: http2.Http2ServerRequest): Promise<Buffer> {
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const c of req) {
      size += (c as Buffer).length;
      if (size > H2_BODY_LIMIT) throw Object.assign(new Error('body too large'), { status: 413 });
      chunks.push(c as Buffer);
    }
    return Buffer.concat(chunks);
  }

  private reply(res: http2.Http2ServerResponse, status: number, text: string): void {
    res.writeHead(status, { 'content-type': 'text/plain; charset=utf-8' });
    res.end(text + '\n');
  }

  /**
   * handle serves one HTTP/2 request inside a Noise session. Every body is checked
   * against the protocol schemas (validate.ts) before any use: bad input gets a 400
   * naming the field and changes nothing. Failures are logged without their message
   * when it comes from the database driver, whose text quotes the SQL and so the
   * client's values.
   */
  private async handle(req: http2.Http2ServerRequest, res: http2.Http2ServerResponse, info: { machineKey: string }): Promise<void> {
    const path = (req.url ?? '').split('?')[0];
    if (req.method !== 'POST' || (path !== '/machine/register' && path !== '/machine/map')) {
      return this.reply(res, 501, `${req.method} ${path} is not implemented by Headway`);
    }
    let parsed: unknown;
    try {
      const raw = await this.body(req);
      parsed = JSON.parse(raw.toString('utf8') || '{}');
    } catch (err) {
      // JSON.parse quotes the input in its message: say only that it is not JSON.
      const status = (err as { status?: number }).status;
      return this.reply(res, status ?? 400, status ? `invalid request body: ${(err as Error).message}` : 'invalid request body: not valid JSON');
    }
    if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) return this.reply(res, 400, 'request body must be a JSON object');
    const version = (parsed as { Version?: unknown }).Version ?? 0;
    if (typeof version === 'number' && Number.isInteger(version) && version < MIN_CAPABILITY_VERSION) {
      return this.reply(res, 400, `unsupported client version ${version}: Headway needs Tailscale 1.80 or newer (capability version ${MIN_CAPABILITY_VERSION})`);
    }
    try {
      if (path === '/machine/register') {
        const rr = parseRegisterRequest(parsed);
        const abort = new AbortController();
        res.on('close', () => abort.abort());
        const out = await this.registrar.handle(rr, info.machineKey, abort.signal);
        if (abort.signal.aborted) return;
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify(out));
        return;
      }
      return await this.map(parseMapRequest(parsed), res, info.machineKey);
    } catch (err) {
      if (err instanceof HeadwayError && err.status < 500) {
        this.o.logger.debug('control request refused', { path, field: err.field, error: err.message });
        if (!res.headersSent) return this.reply(res, err.status, err.message);
        res.end();
        return;
      }
      this.o.logger.error('control request failed', { path, error: safeErrorText(err) });
      if (!res.headersSent) this.reply(res, 500, 'internal error');
      else res.end();
    }
  }

  private async map(mr: MapRequest, res: http2.Http2ServerResponse, machineKey: string): Promise<void> {
    const { state, metrics } = this.o;
    const found = mr.NodeKey ? state.nodeByNodeKey(mr.NodeKey) : undefined;
    if (!found || found.machineKey !== machineKey) return this.nodeNotFound(mr, res, machineKey, found);
    const node = await this.updateFromRequest(found, mr);
    const zstd = mr.Compress === 'zstd';
    this.hub.syncPrimaries();
    if (!mr.Stream) {
      if (mr.OmitPeers) { res.writeHead(200); res.end(); return; }
      res.writeHead(200, { 'content-type': 'application/octet-stream' });
      res.end(frame(this.mapper.fullMap(node, mr.Version), zstd));
      metrics.mapMessages.inc({ kind: 'full' });
      return;
    }
    res.writeHead(200, { 'content-type': 'application/octet-stream' });
    const session = new MapSession(node.id, mr.Version, zstd, (buf) => { res.write(buf); }, () => metrics.mapMessages.inc({ kind: 'keepalive' }));
    clearTimeout(this.ephemeralTimers.get(node.id));
    state.sessionOpened(node.id);
    this.hub.syncPrimaries();
    const current = state.getNode(node.id) ?? node;
    res.write(frame(this.mapper.fullMap(current, mr.Version), zstd));
    metrics.mapMessages.inc({ kind: 'full' });
    this.hub.open(session, current);
    const streams = this.streams.get(node.id) ?? this.streams.set(node.id, new Set()).get(node.id)!;
    streams.add(res);
    res.on('close', () => {
      streams.delete(res);
      if (!streams.size) this.streams.delete(node.id);
      this.hub.close(session);
      void state.sessionClosed(node.id).then(() => {
        const n = state.getNode(node.id);
        if (n?.ephemeral && !state.isOnline(n.id)) this.scheduleEphemeral(n.id);
      });
    });
  }

  /**
   * nodeNotFound answers a map request whose node key has no node here. A machine
   * with no node at all (deleted, or never registered on this database) gets a
   * map whose self node is logged out, so the device goes to NeedsLogin rather
   * than retrying a 404 forever while still Running; a streaming request is then
   * held open with keep-alives (ending it would only make the client poll again),
   * and a lite update is acknowledged without storing anything.
   * A node key of another machine, or a stale key of a machine that has a node,
   * stays a 404.
   */
  private nodeNotFound(mr: MapRequest, res: http2.Http2ServerResponse, machineKey: string, found: Node | undefined): void {
    const { state, metrics, logger } = this.o;
    // mr passed parseMapRequest: NodeKey is a lower-case nodekey:<hex>, Hostinfo an object or absent.
    const nodeKey = mr.NodeKey;
    if (found || state.nodeByMachineKey(machineKey)) return this.reply(res, 404, 'node not found');
    // A lite update (endpoints, hostinfo) is acknowledged and dropped: the client retries a failed one forever.
    if (!mr.Stream && mr.OmitPeers) { res.writeHead(200); res.end(); return; }
    const gone = this.hub.deletedNode(machineKey);
    const hostinfo = (mr.Hostinfo ?? null) as Record<string, unknown> | null;
    const hostname = String(hostinfo?.Hostname ?? '').replace(/[^A-Za-z0-9-]/g, '').slice(0, 63) || 'node';
    const self = gone
      ? { ...this.mapper.deletedSelf(gone), nodeKey, hostinfo: hostinfo ?? gone.hostinfo }
      : { id: 0, name: `${hostname}.`, userId: 0, nodeKey, machineKey, hostinfo };
    logger.info('map request from a machine with no node: answered logged out', { node: gone?.id, name: gone?.givenName });
    const zstd = mr.Compress === 'zstd';
    res.writeHead(200, { 'content-type': 'application/octet-stream' });
    const first = frame(this.mapper.loggedOutMap(self, mr.Version, { first: true }), zstd);
    metrics.mapMessages.inc({ kind: 'full' });
    if (!mr.Stream) { res.end(first); return; }
    res.write(first);
    const session = new MapSession(0, mr.Version, zstd, (buf) => { res.write(buf); }, () => metrics.mapMessages.inc({ kind: 'keepalive' }));
    session.armKeepAlive();
    res.on('close', () => session.close());
  }

  /** updateFromRequest stores what a validated map request reports and tells peers the smallest change. */
  private async updateFromRequest(node: Node, mr: MapRequest): Promise<Node> {
    const { state } = this.o;
    let current = node;
    const patch: Parameters<State['publishPatch']>[1] = {};
    const store: Partial<Node> = {};
    if (mr.DiscoKey && mr.DiscoKey !== node.discoKey) {
      store.discoKey = patch.discoKey = mr.DiscoKey;
    }
    if (mr.Endpoints && JSON.stringify(mr.Endpoints) !== JSON.stringify(node.endpoints)) {
      store.endpoints = patch.endpoints = mr.Endpoints;
    }
    let full = false;
    if (mr.Hostinfo) {
      const before = (node.hostinfo ?? {}) as { NetInfo?: { PreferredDERP?: number } };
      const derp = mr.Hostinfo.NetInfo?.PreferredDERP;
      if (derp && derp !== before.NetInfo?.PreferredDERP) patch.derpRegion = derp;
      const strip = (h: Record<string, unknown>) => JSON.stringify({ ...h, NetInfo: undefined });
      const routes = routesFromHostinfo(mr.Hostinfo);
      // A node whose stored Hostinfo was quarantined (null) takes the first one it sends again.
      full = node.hostinfo === null || strip(mr.Hostinfo) !== strip(before as Record<string, unknown>)
        || JSON.stringify(routes) !== JSON.stringify(node.availableRoutes);
      store.hostinfo = mr.Hostinfo;
      if (mr.Hostinfo.Hostname) store.hostname = mr.Hostinfo.Hostname;
      store.availableRoutes = routes;
    }
    if (full) {
      current = await state.updateNode(node.id, store);
      if (Object.keys(patch).length) state.publishPatch(node.id, patch);
    } else if (Object.keys(store).length) {
      current = await state.updateNode(node.id, store, 'silent');
      if (Object.keys(patch).length) state.publishPatch(node.id, patch);
    }
    return current;
  }

  /** applyAutoApprovals stores routes the policy's autoApprovers approve for what nodes advertise. */
  private async applyAutoApprovals(nodes: Node[]): Promise<void> {
    if (!this.view.hasPolicy) return;
    for (const n of nodes) {
      const node = this.o.state.getNode(n.id);
      if (!node) continue;
      const eff = this.view.forNode(node.id).approvedRoutes.filter((r) => node.availableRoutes.includes(r));
      const missing = eff.filter((r) => !node.approvedRoutes.includes(r));
      if (missing.length) {
        await this.o.state.approveRoutes(node.id, [...node.approvedRoutes, ...missing]).catch((err: Error) =>
          this.o.logger.warn('auto-approval failed', { node: node.id, error: err.message }));
      }
    }
  }

  private scheduleEphemeral(id: number): void {
    const timeout = this.o.config.node.ephemeral.inactivity_timeout;
    clearTimeout(this.ephemeralTimers.get(id));
    const t = setTimeout(() => {
      this.ephemeralTimers.delete(id);
      const n = this.o.state.getNode(id);
      if (n?.ephemeral && !this.o.state.isOnline(id)) {
        this.o.logger.info('deleting inactive ephemeral node', { node: id, name: n.givenName });
        void this.o.state.deleteNode(id).catch(() => undefined);
      }
    }, timeout);
    t.unref();
    this.ephemeralTimers.set(id, t);
  }

  private endStreams(nodeId: number): void {
    for (const res of [...(this.streams.get(nodeId) ?? [])]) res.end();
  }

  async close(): Promise<void> {
    this.unsubscribe?.();
    clearInterval(this.pendingGc);
    for (const t of this.ephemeralTimers.values()) clearTimeout(t);
    this.hub.stop();
    for (const set of this.streams.values()) for (const res of set) res.end();
    for (const set of this.conns.values()) for (const c of set) c.destroy();
    this.dns.close();
    this.derpMap.close();
    clearInterval(this.relayCertTimer);
    await this.derp?.close();
    await this.relayListener?.close();
    await this.stun?.close();
  }
}
