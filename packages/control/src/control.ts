import http from 'node:http';
import https from 'node:https';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import type Router from '@koa/router';
import { handleTs2021Upgrade, Ts2021Limits, type NoiseConn, type RefusalKind, type Ts2021ConnectionInfo } from '@headway/noise';
import { HandshakeFailureLog } from '@headway/derp';
import type { HeadwayConfig } from '@headway/core';
import type { Node } from '@headway/core';
import { HeadwayError } from '@headway/core';
import type { Logger } from '@headway/core';
import { safeErrorText } from '@headway/core';
import type { HostinfoService } from '@headway/core';
import type { State } from '@headway/core';
import type { Metrics } from '@headway/core';
import { closeSilentConnections } from '@headway/core';
import { clientAddressOf, trustedProxies, type RequestLike } from '@headway/core';
import { frame } from './frames.js';
import { H2Session, type H2Stream } from './h2.js';
import type { Mapper } from './mapper.js';
import { PAGE_HEADERS, approvedRegistrationPage, expiredRegistrationPage, registerPage, rejectedRegistrationPage } from './pages.js';
import type { Registrar } from './register.js';
import { keepAliveWait, MapSession } from './map-session.js';
import type { SessionHub } from './sessions.js';
import { HaProber } from './ha-prober.js';
import { sshCheckPage, sshCheckGonePage } from './ssh-check-pages.js';
import type { SshChecks } from './ssh-check.js';
import type { AcmeDns } from './acme-dns.js';
import { parseMapRequest, parseRegisterRequest, parseSetDNSRequest, type SetDNSRequest } from '@headway/core';
import { MIN_CAPABILITY_VERSION, type MapRequest } from '@headway/core';

const H2_BODY_LIMIT = 1024 * 1024;
/** TLS_HANDSHAKE_RECORD is the first byte a TLS client sends. */
const TLS_HANDSHAKE_RECORD = 0x16;

export interface ControlOptions {
  state: State;
  config: HeadwayConfig;
  logger: Logger;
  metrics: Metrics;
  controlKey: { privateKey: Buffer; publicKey: Buffer };
  mapper: Mapper;
  hub: SessionHub;
  registrar: Registrar;
  hostinfo: HostinfoService;
  /** sshChecks answers /machine/ssh/action (SSH `check` rules) and backs the /auth/<id> page. */
  sshChecks: SshChecks;
  /** acmeDns answers /machine/set-dns (the ACME DNS-01 records of device certificates). */
  acmeDns: AcmeDns;
  /** relay takes /derp upgrades on the main listener (the embedded relay, when enabled). */
  relay: { handleUpgrade(req: http.IncomingMessage, socket: Duplex, head: Buffer): boolean };
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

/**
 * ControlServer speaks the Tailscale control protocol and nothing else: `/key`,
 * upgrade routing (the ts2021 Noise upgrade with HTTP/2 inside; /derp goes to
 * the relay), register and map dispatch, and the register page. What a request
 * changes is done by State and the services beside it (Registrar, HostinfoService);
 * the composition root (server/compose.ts) builds and wires them.
 */
export class ControlServer {
  readonly mapper: Mapper;
  readonly hub: SessionHub;
  readonly registrar: Registrar;
  /** mismatchLog reports TLS handshakes that reach a plain-HTTP listener, rate-limited. */
  private readonly mismatchLog: HandshakeFailureLog;
  private readonly conns = new Map<string, Set<Duplex>>();
  private readonly streams = new Map<number, Set<H2Stream>>();
  /** limits guard /ts2021 against unauthenticated exhaustion (handshake rate, replays, session caps). */
  readonly limits: Ts2021Limits;
  /** sourceByMachineKey remembers where each machine's latest session came from (pending-login quotas). */
  private readonly sourceByMachineKey = new Map<string, string>();
  /** haProber pings the routers of HA subnet routes (undefined: node.routes.ha.probe_interval is 0, or clustered). */
  readonly haProber?: HaProber;
  /** clientAddress names a request's client: the TCP peer, or what a trusted proxy's headers say (trusted_proxies). */
  readonly clientAddress: (req: RequestLike) => string | undefined;

  constructor(private readonly o: ControlOptions) {
    const { state, config, logger } = o;
    this.mapper = o.mapper;
    this.hub = o.hub;
    this.hub.closeNode = (id) => this.endStreams(id);
    this.registrar = o.registrar;
    this.registrar.sourceOf = (machineKey) => this.sourceByMachineKey.get(machineKey);
    this.limits = new Ts2021Limits({
      handshakeRate: config.noise.handshake_rate,
      handshakeBurst: config.noise.handshake_burst,
      replayWindowMs: config.noise.replay_window,
      maxUnauthenticated: config.noise.max_unauthenticated_sessions,
      maxUnauthenticatedPerSource: config.noise.max_unauthenticated_sessions_per_address,
      isAuthenticated: (machineKey) => state.nodes.byMachineKey(machineKey) !== undefined,
    });
    this.mismatchLog = new HandshakeFailureLog(logger);
    this.haProber = this.makeProber();
    this.clientAddress = clientAddressOf(trustedProxies(config.trusted_proxies));
  }

  /**
   * makeProber builds the HA route prober when node.routes.ha.probe_interval is on. In a cluster each instance
   * elects primaries on its own from what all of them know alike, and a ping's answer is known only to the
   * instance that sent it, so there the route moves when its primary disconnects, as without probing.
   */
  private makeProber(): HaProber | undefined {
    const { config, logger, metrics, state } = this.o;
    const ha = config.node.routes.ha;
    if (!ha.probe_interval) return undefined;
    if (state.cluster.clustered) {
      logger.info('HA subnet router probing is off in a cluster: a route moves when its primary disconnects');
      return undefined;
    }
    const hub = this.hub;
    const base = config.server_url.replace(/\/+$/, '');
    return new HaProber({
      clock: hub.clock,
      logger,
      intervalMs: ha.probe_interval,
      timeoutMs: ha.probe_timeout,
      pingUrl: (id) => `${base}/machine/ping-response?id=${id}`,
      routers: () => hub.haRouters(),
      session: (id) => hub.currentSession(id),
      send: (target, ping) => hub.sendPing(target as MapSession, ping),
      apply: (verdicts) => hub.setHealth(verdicts),
      count: (result) => metrics.haProbes.inc({ result }),
    });
  }

  /** init starts the HA route prober; zstd needs no preparation (it comes from node:zlib). */
  async init(): Promise<void> {
    this.haProber?.start();
  }

  /**
   * attach takes over HTTP upgrades for /ts2021 and /derp on a listener, bounds how long a TCP
   * connection may go without a complete request or upgrade (noise.handshake_timeout, through
   * closeSilentConnections, as the metrics listener), and on a plain-HTTP listener reports TLS
   * handshakes that reach it (a client told to use https here: server_url says https with no TLS
   * in front, or a DERP map names this port for TLS), which otherwise fail on the client alone.
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
    closeSilentConnections(server, this.o.config.noise.handshake_timeout);
    const refusals = new RefusalLog(this.o.logger);
    server.on('upgrade', (req: http.IncomingMessage, socket: Duplex, head: Buffer) => {
      const path = (req.url ?? '').split('?')[0];
      if (path === '/ts2021') {
        handleTs2021Upgrade(req, socket, head, {
          privateKey: this.o.controlKey.privateKey,
          minCapabilityVersion: MIN_CAPABILITY_VERSION,
          limits: this.limits,
          clientAddress: this.clientAddress,
          onConnection: (conn, info) => this.serveConnection(conn, info),
          onRefused: (reason, kind) => refusals.note(reason, kind),
        });
        return;
      }
      if (path === '/derp' && this.o.relay.handleUpgrade(req, socket, head)) return;
      socket.end('HTTP/1.1 404 Not Found\r\nConnection: close\r\nContent-Length: 0\r\n\r\n');
    });
  }

  /** routes mounts the plain-HTTP control routes (/key, the register page) on the main listener's router. */
  routes(router: Router): void {
    router.get('/key', (ctx) => {
      const v = Number(ctx.query.v);
      if (!ctx.query.v || !Number.isInteger(v)) { ctx.status = 400; ctx.body = 'missing or invalid capability version (?v=N)\n'; return; }
      if (v < 39) { ctx.status = 400; ctx.body = 'client too old\n'; return; }
      ctx.body = { legacyPublicKey: `mkey:${'0'.repeat(64)}`, publicKey: `mkey:${this.o.controlKey.publicKey.toString('hex')}` };
    });
    // A client answers a PingRequest (an HA route probe) with HEAD on its URL; the unguessable id is the credential.
    router.head('/machine/ping-response', (ctx) => {
      const id = ctx.query.id;
      if (typeof id !== 'string' || !id) { ctx.status = 400; ctx.body = 'missing ping id (?id=)\n'; return; }
      if (!this.haProber?.answer(id)) { ctx.status = 404; ctx.body = 'unknown or expired ping\n'; return; }
      ctx.status = 200;
    });
    router.get('/register/:key', async (ctx) => {
      const key = String(ctx.params.key);
      const pending = /^[A-Za-z0-9_-]{1,64}$/.test(key) ? await this.o.state.pending.get(key) : undefined;
      ctx.type = 'text/html; charset=utf-8';
      ctx.set(PAGE_HEADERS);
      if (!pending) {
        const settled = this.registrar.settled(key);
        if (settled && settled !== 'rejected') {
          const node = settled.approved;
          const owner = node.tags.length ? node.tags.join(', ') : (node.userId !== null ? this.o.state.users.get(node.userId)?.name : undefined) ?? 'nobody';
          ctx.body = approvedRegistrationPage({ hostname: node.hostname, node: node.givenName, owner });
          return;
        }
        ctx.status = settled === 'rejected' ? 410 : 404;
        ctx.body = settled === 'rejected' ? rejectedRegistrationPage() : expiredRegistrationPage();
        return;
      }
      const hostname = String((pending.hostinfo as { Hostname?: string } | null)?.Hostname ?? 'a device');
      ctx.body = registerPage({ hostname, key, expiresAt: pending.expiresAt });
    });
    // An SSH check's page without an identity provider: the administrator's command (LoginFlow serves it otherwise).
    router.get('/auth/:id', (ctx) => {
      const check = this.o.sshChecks.get(String(ctx.params.id));
      ctx.type = 'text/html; charset=utf-8';
      ctx.set(PAGE_HEADERS);
      if (!check) {
        ctx.status = /^[A-Za-z0-9_-]{1,64}$/.test(String(ctx.params.id)) ? 404 : 400;
        ctx.body = sshCheckGonePage();
        return;
      }
      ctx.body = sshCheckPage(this.o.state, check, this.o.sshChecks.expiresAt(check));
    });
  }

  /**
   * serveConnection runs HTTP/2 (h2.ts) over a finished Noise handshake. A connection must send its first
   * request within noise.first_request_timeout, a request's body must end within it too, and a connection is
   * closed after noise.idle_timeout without an open stream (a map long-poll stays open), so handshaken
   * connections that never speak HTTP/2 cannot pile up.
   */
  private serveConnection(conn: NoiseConn, info: Ts2021ConnectionInfo): void {
    const set = this.conns.get(info.machineKey) ?? this.conns.set(info.machineKey, new Set()).get(info.machineKey)!;
    set.add(conn);
    this.sourceByMachineKey.set(info.machineKey, info.source);
    // A cleared timer is dropped, not kept: this closure lives as long as the connection.
    let timer: NodeJS.Timeout | undefined;
    const disarm = () => { clearTimeout(timer); timer = undefined; };
    const arm = (ms: number) => {
      disarm();
      if (ms <= 0) return;
      timer = setTimeout(() => {
        // GOAWAY first so a client learns the connection is done; destroy regardless of what it does next.
        session.close();
        setImmediate(() => conn.destroy());
      }, ms);
      timer.unref();
    };
    arm(this.o.config.noise.first_request_timeout);
    conn.on('close', () => {
      disarm();
      set.delete(conn);
      if (!set.size) { this.conns.delete(info.machineKey); this.sourceByMachineKey.delete(info.machineKey); }
    });
    conn.on('error', () => undefined);
    this.o.logger.debug('ts2021 connection', { machine_key: info.machineKey, capver: info.capabilityVersion, remote: info.address });
    let open = 0;
    const session = new H2Session(conn, {
      bodyLimit: H2_BODY_LIMIT,
      // An open stream keeps the connection; one whose request body never finishes must not keep it forever.
      bodyTimeoutMs: this.o.config.noise.first_request_timeout,
      // Go's HTTP/2 server default; a client uses a handful (map poll, register, lite updates).
      maxConcurrentStreams: 250,
      onError: (err) => this.o.logger.debug('control connection ended on an HTTP/2 error', { machine_key: info.machineKey, code: err.code, error: err.message }),
      onStream: (stream) => {
        open++;
        disarm();
        stream.onClose(() => { if (--open === 0) arm(this.o.config.noise.idle_timeout); });
        const { method } = stream;
        const path = stream.path.split('?')[0]!;
        this.o.logger.trace('control request', { machine_key: info.machineKey, method, path });
        this.handle(stream, method, path, info).catch((err: Error) => {
          this.o.logger.error('control request failed', { path, error: err.message });
          refuse(stream, 500, 'internal error');
        });
      },
    });
  }

  /**
   * handle serves one HTTP/2 request inside a Noise session. Every body is checked
   * against the protocol schemas (validate.ts) before any use: bad input gets a 400
   * naming the field and changes nothing. Failures are logged without their message
   * when it comes from the database driver, whose text quotes the SQL and so the
   * client's values.
   */
  private async handle(stream: H2Stream, method: string, path: string, info: { machineKey: string }): Promise<void> {
    if (method === 'GET' && path.startsWith('/machine/ssh/action/')) return this.sshAction(stream, info.machineKey);
    if (method !== 'POST' || (path !== '/machine/register' && path !== '/machine/map' && path !== '/machine/set-dns')) {
      return stream.reply(501, `${method} ${path} is not implemented by Headway`);
    }
    let parsed: unknown;
    try {
      const raw = await stream.body();
      parsed = JSON.parse(raw.toString('utf8') || '{}');
    } catch (err) {
      // JSON.parse quotes the input in its message: say only that it is not JSON.
      const status = (err as { status?: number }).status;
      return stream.reply(status ?? 400, status ? `invalid request body: ${(err as Error).message}` : 'invalid request body: not valid JSON');
    }
    if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) return stream.reply(400, 'request body must be a JSON object');
    const version = (parsed as { Version?: unknown }).Version ?? 0;
    if (typeof version === 'number' && Number.isInteger(version) && version < MIN_CAPABILITY_VERSION) {
      return stream.reply(400, `unsupported client version ${version}: Headway needs Tailscale 1.80 or newer (capability version ${MIN_CAPABILITY_VERSION})`);
    }
    try {
      if (path === '/machine/register') {
        const rr = parseRegisterRequest(parsed);
        const abort = new AbortController();
        stream.onClose(() => abort.abort());
        const out = await this.registrar.handle(rr, info.machineKey, abort.signal);
        if (abort.signal.aborted) return;
        stream.respond(200, 'application/json');
        stream.end(JSON.stringify(out));
        return;
      }
      if (path === '/machine/set-dns') return await this.setDns(parseSetDNSRequest(parsed), stream, info.machineKey);
      return await this.map(parseMapRequest(parsed), stream, info.machineKey);
    } catch (err) {
      if (err instanceof HeadwayError && err.status < 500) {
        this.o.logger.debug('control request refused', { path, field: err.field, error: err.message });
        return refuse(stream, err.status, err.message);
      }
      this.o.logger.error('control request failed', { path, error: safeErrorText(err) });
      refuse(stream, 500, 'internal error');
    }
  }

  /** sshAction answers a device's SSH server about a connection a `check` rule holds (SshChecks); a follow-up is held for the verdict. */
  private async sshAction(stream: H2Stream, machineKey: string): Promise<void> {
    const abort = new AbortController();
    stream.onClose(() => abort.abort());
    const answer = await this.o.sshChecks.action(stream.path, machineKey, abort.signal);
    if (!answer || abort.signal.aborted) return;
    if (answer.status !== 200) return stream.reply(answer.status, 'text' in answer ? answer.text : '');
    stream.respond(200, 'application/json; charset=utf-8');
    stream.end(JSON.stringify('action' in answer ? answer.action : {}));
  }

  /** setDns publishes a device's ACME DNS-01 record (AcmeDns); the node key must be this machine's. */
  private async setDns(req: SetDNSRequest, stream: H2Stream, machineKey: string): Promise<void> {
    const found = await this.o.state.cluster.findStoredNode(req.NodeKey);
    if (!found || found.machineKey !== machineKey) return stream.reply(404, 'node not found');
    const answer = await this.o.acmeDns.handle(found, req);
    if (answer.status !== 200) return stream.reply(answer.status, 'text' in answer ? answer.text : '');
    stream.respond(200, 'application/json');
    stream.end('{}');
  }

  private async map(mr: MapRequest, stream: H2Stream, machineKey: string): Promise<void> {
    const { state, metrics } = this.o;
    // A cluster instance that lost its database sends devices on to another instance.
    if (mr.Stream && !state.cluster.serving) return stream.reply(503, 'this instance has lost its database; try another');
    const found = mr.NodeKey ? await state.cluster.findStoredNode(mr.NodeKey) : undefined;
    if (!found || found.machineKey !== machineKey) return this.nodeNotFound(mr, stream, machineKey, found);
    const node = await this.o.hostinfo.update(found, mr);
    const zstd = mr.Compress === 'zstd';
    if (!mr.Stream) {
      if (mr.OmitPeers) { stream.end(); return; }
      this.hub.syncPrimaries();
      stream.respond(200, 'application/octet-stream');
      stream.end(this.mapper.fullMapMessage(node, mr.Version, zstd));
      metrics.mapMessages.inc({ kind: 'full' });
      return;
    }
    stream.respond(200, 'application/octet-stream');
    const session = new MapSession(node.id, mr.Version, zstd, (buf) => { stream.write(buf); }, () => metrics.mapMessages.inc({ kind: 'keepalive' }),
      keepAliveWait(), this.hub.clock);
    state.presence.sessionOpened(node.id);
    const streams = this.streams.get(node.id) ?? this.streams.set(node.id, new Set()).get(node.id)!;
    streams.add(stream);
    stream.onClose(() => {
      streams.delete(stream);
      if (!streams.size) this.streams.delete(node.id);
      this.hub.close(session);
      void state.presence.sessionClosed(node.id);
    });
    this.hub.begin(session, node, (current) => {
      stream.write(this.mapper.fullMapMessage(current, mr.Version, zstd));
      metrics.mapMessages.inc({ kind: 'full' });
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
  private nodeNotFound(mr: MapRequest, stream: H2Stream, machineKey: string, found: Node | undefined): void {
    const { state, metrics, logger } = this.o;
    // mr passed parseMapRequest: NodeKey is a lower-case nodekey:<hex>, Hostinfo an object or absent.
    const nodeKey = mr.NodeKey;
    if (found || state.nodes.byMachineKey(machineKey)) return stream.reply(404, 'node not found');
    // A lite update (endpoints, hostinfo) is acknowledged and dropped: the client retries a failed one forever.
    if (!mr.Stream && mr.OmitPeers) { stream.end(); return; }
    const gone = this.hub.deletedNode(machineKey);
    const hostinfo = (mr.Hostinfo ?? null) as Record<string, unknown> | null;
    const hostname = String(hostinfo?.Hostname ?? '').replace(/[^A-Za-z0-9-]/g, '').slice(0, 63) || 'node';
    const self = gone
      ? { ...this.mapper.deletedSelf(gone), nodeKey, hostinfo: hostinfo ?? gone.hostinfo }
      : { id: 0, name: `${hostname}.`, userId: 0, nodeKey, machineKey, hostinfo };
    logger.info('map request from a machine with no node: answered logged out', { node: gone?.id, name: gone?.givenName });
    const zstd = mr.Compress === 'zstd';
    stream.respond(200, 'application/octet-stream');
    const first = frame(this.mapper.loggedOutMap(self, mr.Version, { first: true }), zstd);
    metrics.mapMessages.inc({ kind: 'full' });
    if (!mr.Stream) { stream.end(first); return; }
    stream.write(first);
    const session = new MapSession(0, mr.Version, zstd, (buf) => { stream.write(buf); }, () => metrics.mapMessages.inc({ kind: 'keepalive' }),
      keepAliveWait(), this.hub.clock);
    session.armKeepAlive();
    stream.onClose(() => session.close());
  }

  private endStreams(nodeId: number): void {
    for (const stream of [...(this.streams.get(nodeId) ?? [])]) stream.end();
  }

  /** endAllStreams ends every map stream (a cluster instance that lost its database), leaving Noise connections open. */
  endAllStreams(): void {
    for (const set of [...this.streams.values()]) for (const stream of [...set]) stream.end();
  }

  /** close ends every map stream and Noise connection. */
  async close(): Promise<void> {
    this.haProber?.stop();
    await this.o.acmeDns.close();
    for (const set of this.streams.values()) for (const stream of set) stream.end();
    for (const set of this.conns.values()) for (const c of set) c.destroy();
  }
}

/** refuse answers a failed request with a status and a line of text, or only ends it once its response has begun (a map stream). */
function refuse(stream: H2Stream, status: number, text: string): void {
  if (stream.headersSent) stream.end();
  else stream.reply(status, text);
}
