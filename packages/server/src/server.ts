import { createContainer, asValue, InjectionMode, type AwilixContainer } from 'awilix';
import { chmodSync, existsSync, unlinkSync } from 'node:fs';
import http from 'node:http';
import type https from 'node:https';
import { dirname } from 'node:path';
import type { AddressInfo, Socket } from 'node:net';
import type { HeadwayConfig } from '@headway/core';
import type { Logger } from '@headway/core';
import { loadAdapter, preparePlugins, registerPlugins, type PreparedPlugins } from '@headway/core';
import { loadOrCreateKey } from '@headway/core';
import { makeDirectory, preflight } from '@headway/core';
import { dataDirFiles, databaseSwitchWarning, lockDataDir, prepareDataDir, readDatabaseRecord, secureDataDir, warnOpenFiles, writeDatabaseRecord } from '@headway/core';
import { assertStoragePort, STORAGE, type StoragePort } from '@headway/core';
import { assertPolicySourcePort, POLICY, type PolicySourcePort } from '@headway/core';
import type { State } from '@headway/core';
import type { RouteService } from '@headway/core';
import type { PolicyService, PolicyEngine } from '@headway/core';
import { hujsonEngine } from '@headway/core';
import type { ControlServer } from '@headway/control';
import type { DerpMapSource } from '@headway/control';
import type { Registrar, SshChecks } from '@headway/control';
import { createApp } from './app.js';
import { mountSite, type BuildInfo } from './site.js';
import { readFileSync } from 'node:fs';
import { X509Certificate } from 'node:crypto';
import type { ApiDeps } from '@headway/api';
import type { DriveService } from '@headway/core';
import { bootKernel, composeKernel } from './compose.js';
import { startMemoryTrimmer, warnHeapHeadroom, type MemoryTrimmer } from './memory.js';
import { startHeapReducer } from './heap-reducer.js';
import { closeSilentConnections } from '@headway/core';
import { bindListeners, handOver, serveRequests } from './listeners.js';
import { recordAead } from '@headway/noise';
import type { Metrics } from '@headway/core';
import type { Relay } from './relay.js';
import { assertIdentityPort, IDENTITY, type IdentityPort } from '@headway/core';
import { AnswerSlot } from './acme/listen.js';
import type { CertificateManager } from './acme/manager.js';
import { acmeHealth, pemPair, startCertificates, withCertificate } from './acme/serve.js';

export interface StartOptions {
  config: HeadwayConfig;
  logger: Logger;
  /** the config file read, or null for built-in defaults (the caller logs which, once). */
  configSource?: string | null;
  engine?: PolicyEngine;
  /** build names the running build for /version (the CLI passes its own); default: this package's version, commit unknown. */
  build?: BuildInfo;
}

export interface RunningServer {
  config: HeadwayConfig;
  state: State;
  policy: PolicyService;
  drive: DriveService;
  storage: StoragePort;
  metrics: Metrics;
  control: ControlServer;
  registrar: Registrar;
  /** sshChecks holds the connections SSH `check` rules stop until someone approves them. */
  sshChecks: SshChecks;
  routes: RouteService;
  relay: Relay;
  derpMap: DerpMapSource;
  /** container is the composition root's container (server/compose.ts). */
  container: AwilixContainer;
  /** identity is the login method for interactive logins (oidc.issuer or an identity plugin), if any. */
  identity?: IdentityPort;
  controlPublicKey: Buffer;
  /** certificates keeps the Let's Encrypt certificate (tls_letsencrypt_hostname). */
  certificates?: CertificateManager;
  /** memoryTrimmer gives the C heap's free pages back after collections; absent without @headway/memtrim or glibc. */
  memoryTrimmer?: MemoryTrimmer;
  /** urls: where each listener is; grpc is grpcs://host:port (TLS) or grpc://host:port. */
  urls: { http: string; metrics?: string; socket?: string; grpc?: string };
  close(): Promise<void>;
}

/** listenOnPath opens the admin socket (TCP ports are bound before start: server/listeners.ts). */
function listenOnPath(server: http.Server, path: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const onError = (err: Error) => reject(err);
    server.once('error', onError);
    server.listen(path, () => { server.off('error', onError); resolve(); });
  });
}

function urlOf(server: http.Server, scheme: string): string {
  const a = server.address() as AddressInfo;
  const host = a.family === 'IPv6' ? `[${a.address}]` : a.address;
  return `${scheme}://${host}:${a.port}`;
}

/** trackSockets lets close() end idle keep-alive and long-poll connections instead of waiting on them. */
function trackSockets(server: http.Server): Set<Socket> {
  const sockets = new Set<Socket>();
  server.on('connection', (s: Socket) => { sockets.add(s); s.on('close', () => sockets.delete(s)); });
  return sockets;
}

/**
 * startServer boots Headway: storage adapter (migrated), policy source, state,
 * keys, then the listeners. Anything wrong stops it with one clear error.
 */
export async function startServer(opts: StartOptions): Promise<RunningServer> {
  const { config, logger } = opts;
  const { tls } = preflight(config);
  // Every port first: a start that cannot have them writes nothing (no data directory, database or key).
  const acmeSlot = config.tls_letsencrypt_hostname ? new AnswerSlot() : undefined;
  const bound = await bindListeners(config, tls, acmeSlot);
  let unlock: () => void;
  try {
    prepareDataDir(config.data_dir);
    logger.info('data directory', { path: config.data_dir });
    unlock = lockDataDir(config.data_dir);
  } catch (err) {
    await bound.close();
    throw err;
  }

  const container = createContainer({ injectionMode: InjectionMode.PROXY, strict: true });
  container.register({ config: asValue(config), logger: asValue(logger) });
  const ctx = { container, config, logger };

  let storage: StoragePort;
  let prepared: PreparedPlugins;
  try {
    // Plugins' options are checked before the database is opened: a bad one changes nothing.
    prepared = await preparePlugins(config);
    await loadAdapter('storage', config.database.type, ctx, 'database.type');
    storage = container.resolve<StoragePort>(STORAGE);
    assertStoragePort(storage, config.database.type);
  } catch (err) {
    unlock();
    await bound.close();
    throw err;
  }
  const cleanups: Array<() => Promise<void> | void> = [unlock, () => storage.close(), () => bound.close()];
  try {
    logger.info('database ready', { database: storage.describe() });
    let certificates: CertificateManager | undefined;
    if (acmeSlot) {
      certificates = await startCertificates({ config, logger, slot: acmeSlot, main: bound.main as https.Server, acmeHttp: bound.acmeHttp, cluster: storage.cluster });
      const c = certificates;
      cleanups.push(() => c.close());
    }
    await loadAdapter('policy', config.policy.mode, ctx, 'policy.mode');
    const source = container.resolve<PolicySourcePort>(POLICY);
    assertPolicySourcePort(source, config.policy.mode);

    const noiseKey = loadOrCreateKey(config.noise.private_key_path);
    if (noiseKey.created) logger.info('generated the control key', { path: config.noise.private_key_path });

    const plugins = await registerPlugins(prepared, ctx);
    for (const p of plugins.dns) if (p.close) cleanups.push(() => p.close!());
    let identity = plugins.identity;
    if (!identity && config.oidc.issuer) {
      await loadAdapter('identity', 'oidc', ctx, 'oidc.issuer');
      identity = container.resolve<IdentityPort>(IDENTITY);
      assertIdentityPort(identity, '@headway/identity-oidc');
    }
    if (identity) {
      await identity.init?.();
      const id = identity;
      if (id.close) cleanups.push(() => id.close!());
      logger.info('interactive logins go through the identity provider', { provider: identity.provider, callback: config.server_url + identity.callbackPath });
    }
    composeKernel(container, {
      engine: opts.engine ?? hujsonEngine, controlKey: noiseKey, identity,
      relayPorts: { stun: bound.stun, relayTls: bound.relayTls },
    });
    const kernel = await bootKernel(container, (state) => {
      const dbRecord = () => ({ type: config.database.type, database: storage.describe(), users: state.users.list().length, nodes: state.nodes.list().length });
      if (!storage.describe().includes(':memory:')) {
        const warning = databaseSwitchWarning(readDatabaseRecord(config.data_dir), dbRecord());
        if (warning) logger.warn(warning);
        writeDatabaseRecord(config.data_dir, dbRecord());
        cleanups.push(() => writeDatabaseRecord(config.data_dir, dbRecord()));
      }
    });
    cleanups.push(() => kernel.close());
    const { state, policyService: policy, metrics, controlServer: control, relay, apiDeps: deps, loginFlow: login } = kernel.cradle;
    warnOpenFiles(logger, secureDataDir([
      ...dataDirFiles(config.data_dir), config.noise.private_key_path, config.derp.server.private_key_path,
      ...(config.database.type === 'sqlite' && config.database.sqlite.path !== ':memory:'
        ? ['', '-wal', '-shm', '-journal'].map((x) => config.database.sqlite.path + x) : []),
    ]));

    warnHeapHeadroom(logger, state.nodes.list().length);

    certificates?.registerMetrics(metrics.registry);
    const healthDetails = certificates ? acmeHealth(certificates) : undefined;
    deps.about = aboutServer(opts.build ?? packageBuild(), config.database.type, storage.describe(), tls?.cert, certificates);
    const consoleSessions = kernel.cradle.consoleSessions ?? undefined;
    const tcpApp = createApp({ deps, logger, metrics, trusted: false, clientAddress: control.clientAddress, healthDetails, console: consoleSessions, consoleOidc: kernel.cradle.consoleOidc ?? undefined, extra: (router) => {
      login?.routes(router); control.routes(router); relay.routes(router);
      mountSite(router, { serverUrl: config.server_url, build: opts.build ?? packageBuild() });
    } });
    const main = bound.main;
    const servers: http.Server[] = [main];
    const sockets = trackSockets(main);
    control.attach(main);
    serveRequests(main, tcpApp.callback());
    cleanups.splice(cleanups.length - 1, 0, () => closeServer(main, sockets));
    const urls: RunningServer['urls'] = { http: urlOf(main, tls || certificates ? 'https' : 'http') };
    // Without cluster.advertise_addr an instance is listed at the address it really listens on (port 0 resolved).
    if (kernel.cradle.cluster && !config.cluster.advertise_addr) kernel.cradle.cluster.address = urls.http;

    if (bound.metrics) {
      const m = bound.metrics;
      serveRequests(m, async (req, res) => {
        if (req.url === '/metrics') {
          res.setHeader('content-type', metrics.registry.contentType);
          res.end(await metrics.exposition());
        } else {
          res.statusCode = 404;
          res.end('not found\n');
        }
      });
      const ms = trackSockets(m);
      // The main listener's deadline: Node's own headersTimeout is checked only every 30 s.
      closeSilentConnections(m, config.noise.handshake_timeout);
      servers.push(m);
      cleanups.push(() => closeServer(m, ms));
      urls.metrics = urlOf(m, 'http');
    }

    if (config.unix_socket) {
      const path = config.unix_socket;
      makeDirectory(dirname(path), 'unix_socket');
      if (existsSync(path)) unlinkSync(path);
      const local = http.createServer(createApp({ deps, logger, metrics, trusted: true, healthDetails, console: consoleSessions }).callback());
      const ls = trackSockets(local);
      await listenOnPath(local, path);
      chmodSync(path, parseInt(config.unix_socket_permission, 8));
      cleanups.push(async () => { await closeServer(local, ls); if (existsSync(path)) unlinkSync(path); });
      urls.socket = path;
    }

    if (bound.grpc) {
      const { startGrpcServer } = await import('@headway/api/grpc-listener');
      const grpcPort = bound.grpc;
      const startGrpc = async (grpcTls?: { cert: Buffer; key: Buffer }) => {
        const g = await startGrpcServer({ config, deps, logger, tls: grpcTls, listener: handOver(grpcPort) });
        cleanups.push(() => g.close());
        urls.grpc = g.url;
        return g;
      };
      if (!certificates) await startGrpc(tls);
      else {
        // The gRPC port shares the certificate: it starts once there is one and takes each renewal.
        let grpc: ReturnType<typeof startGrpc> | undefined;
        const now = withCertificate(certificates, logger, 'the gRPC API', (c) => (grpc = startGrpc(pemPair(c))), (c) => {
          void grpc?.then((g) => g.setTls(pemPair(c)), () => undefined);
        });
        if (now) await now;
      }
    }

    const trimmer = await startMemoryTrimmer(logger, metrics);
    if (trimmer) cleanups.push(() => trimmer.stop());
    const reducer = startHeapReducer(logger, metrics);
    cleanups.push(() => reducer.stop());
    // @headway/aead is optional too: without it Noise records are sealed in WASM (the same bytes, slower). A build
    // that failed at install is a warning, with its reason: the operator can fix it.
    if (recordAead.unavailable) {
      logger[recordAead.buildFailed ? 'warn' : 'debug']('Noise records are sealed with libsodium\'s WASM build', { reason: recordAead.unavailable });
    }

    logger.info('listening', { http: urls.http, metrics: urls.metrics ?? 'off', socket: urls.socket ?? 'off', grpc: urls.grpc ?? 'off' });
    let closed = false;
    return {
      config, state, policy, storage, metrics, control, controlPublicKey: noiseKey.publicKey, urls, container, identity, memoryTrimmer: trimmer, certificates,
      registrar: kernel.cradle.registrar, sshChecks: kernel.cradle.sshChecks, routes: kernel.cradle.routeService, relay, derpMap: kernel.cradle.derpMap, drive: kernel.cradle.driveService,
      async close() {
        if (closed) return;
        closed = true;
        for (const fn of cleanups.reverse()) {
          try { await fn(); } catch (err) { logger.warn('shutdown step failed', { error: (err as Error).message }); }
        }
        logger.info('stopped');
      },
    };
  } catch (err) {
    for (const fn of cleanups.reverse()) await Promise.resolve(fn()).catch(() => undefined);
    throw err;
  }
}

/** aboutServer answers GET /api/v1/server's facts only the running server has: build, database, served certificate. */
function aboutServer(build: BuildInfo, type: string, description: string, certPem: Buffer | undefined, acme: CertificateManager | undefined): NonNullable<ApiDeps['about']> {
  const fileExpiry = certPem ? new Date(new X509Certificate(certPem).validTo) : undefined;
  return () => {
    const tls = acme ? (() => { const h = acme.health(); return { source: 'letsencrypt' as const, notAfter: h.notAfter ?? null, status: h.status }; })()
      : fileExpiry ? { source: 'tls_cert_path' as const, notAfter: fileExpiry.toISOString(), status: fileExpiry.getTime() > Date.now() ? 'pass' as const : 'fail' as const }
        : null;
    return { version: build.version, commit: build.commit, database: { type, description }, tls };
  };
}

/** packageBuild is @headway/server's own version when the caller names no build. */
function packageBuild(): BuildInfo {
  const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version?: string };
  return { version: pkg.version ?? 'unknown', commit: 'unknown' };
}

function closeServer(server: http.Server, sockets: Set<Socket>): Promise<void> {
  return new Promise((resolve) => {
    server.close(() => resolve());
    server.closeIdleConnections?.();
    for (const s of sockets) s.destroy();
  });
}
