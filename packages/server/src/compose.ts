import { asFunction, asValue, type AwilixContainer } from 'awilix';
import type { HeadwayConfig } from '@headway/core';
import type { Logger } from '@headway/core';
import type { ApiDeps } from '@headway/api';
import { AcmeDns, ControlServer } from '@headway/control';
import { DerpMapSource } from '@headway/control';
import { DnsConfigSource } from '@headway/control';
import { Mapper } from '@headway/control';
import { NetworkView } from '@headway/core';
import { Registrar } from '@headway/control';
import { SessionHub } from '@headway/control';
import { DnsSettingsService, PolicyService, type PolicyEngine } from '@headway/core';
import { publishesTxt, type AcmeTxtPublisher, type DnsPort } from '@headway/core';
import type { DrivePort } from '@headway/core';
import { DriveService } from '@headway/core';
import type { PolicySourcePort } from '@headway/core';
import type { StoragePort } from '@headway/core';
import { AuditLog, ConsoleSessions, NodeGc, safeErrorText } from '@headway/core';
import { adminListsOf, authenticateConsole, ConsoleOidc, isSecure } from '@headway/console';
import { HostinfoService } from '@headway/core';
import { RouteService } from '@headway/core';
import { State } from '@headway/core';
import { Metrics } from '@headway/core';
import { Relay, type RelayPorts } from './relay.js';
import { LoginFlow, SshChecks, checkPeriodIn } from '@headway/control';
import type { IdentityPort } from '@headway/core';
import { ClusterMember } from '@headway/core';
import { derpMeshKey } from '@headway/core';
import { newInstanceId } from './reach.js';

/**
 * KernelCradle names every service the composition root registers. The first
 * group is registered before composeKernel runs: config and logger by
 * startServer, `storage` and `policy` (the policy source) by their adapters,
 * `dnsAdapters` and `driveAdapters` by the plugin loader.
 */
export interface KernelCradle {
  config: HeadwayConfig;
  logger: Logger;
  storage: StoragePort;
  policySource: PolicySourcePort;
  dnsAdapters: DnsPort[];
  driveAdapters: DrivePort[];
  controlKey: { privateKey: Buffer; publicKey: Buffer };
  /** loginMethod is the identity adapter for interactive logins (oidc.issuer or an identity plugin), or null. */
  loginMethod: IdentityPort | null;
  policyEngine: PolicyEngine;

  state: State;
  policyService: PolicyService;
  driveService: DriveService;
  metrics: Metrics;
  networkView: NetworkView;
  /** dnsSettings: the nameservers, split DNS, search domains and MagicDNS in force (dns.mode). */
  dnsSettings: DnsSettingsService;
  dnsConfig: DnsConfigSource;
  derpMap: DerpMapSource;
  mapper: Mapper;
  sessionHub: SessionHub;
  registrar: Registrar;
  /** sshChecks runs SSH `check` mode: held connections, their approval, and checkPeriod. */
  sshChecks: SshChecks;
  routeService: RouteService;
  hostinfo: HostinfoService;
  nodeGc: NodeGc;
  /** auditLog records every change made through the APIs (audit.retention). */
  auditLog: AuditLog;
  /** consoleSessions signs administrators in to the admin console (null when admin.enabled is false). */
  consoleSessions: ConsoleSessions | null;
  relay: Relay;
  /** acmeDns publishes devices' ACME DNS-01 records through the DNS plugin that can (dns.certificates.enabled). */
  acmeDns: AcmeDns;
  controlServer: ControlServer;
  /** consoleOidc signs administrators in to the console through oidc (null unless oidc.issuer and an admin.allowed_* list are set). */
  consoleOidc: ConsoleOidc | null;
  /** loginFlow serves the identity provider's pages (null without a login method). */
  loginFlow: LoginFlow | null;
  /** cluster is this instance's membership of a cluster (cluster.enabled), or null. */
  cluster: ClusterMember | null;
  health: () => Promise<boolean>;
  /** instanceId names this running server on its /health answers (server/reach.ts). */
  instanceId: string;
  apiDeps: ApiDeps;
}

/**
 * acmePublisher is the one DNS plugin that publishes TXT records, when dns.certificates.enabled
 * (undefined otherwise); none, or more than one, stops the server naming the key.
 */
export function acmePublisher(config: HeadwayConfig, adapters: DnsPort[]): AcmeTxtPublisher | undefined {
  if (!config.dns.certificates.enabled) return undefined;
  const publishers = adapters.filter(publishesTxt);
  if (publishers.length === 1) return publishers[0];
  throw new Error(publishers.length
    ? `dns.certificates.enabled: ${publishers.length} dns plugins publish TXT records (setTxt/removeTxt); list exactly one`
    : 'dns.certificates.enabled: no dns plugin under plugins: publishes TXT records (setTxt/removeTxt), such as @headway/dns-rfc2136');
}

/** HEALTH_TIMEOUT_MS bounds how long /health waits for the database. */
const HEALTH_TIMEOUT_MS = 2000;

/**
 * composeKernel is the one composition root: it registers every kernel service
 * in the container as a singleton built from the others. Nothing else in the
 * server constructs these services (tests may build pieces directly); the
 * container builds each on first resolve, and bootKernel decides the order
 * they start in.
 */
export function composeKernel(container: AwilixContainer, opts: { engine: PolicyEngine; controlKey: KernelCradle['controlKey']; identity?: IdentityPort; relayPorts?: RelayPorts }): void {
  const c = (fn: (k: KernelCradle) => unknown) => asFunction(fn as (k: unknown) => unknown).singleton();
  if (!container.hasRegistration('dnsAdapters')) container.register('dnsAdapters', asValue([]));
  if (!container.hasRegistration('driveAdapters')) container.register('driveAdapters', asValue([]));
  container.register({
    controlKey: asValue(opts.controlKey),
    loginMethod: asValue(opts.identity ?? null),
    policyEngine: asValue(opts.engine),
    instanceId: asValue(newInstanceId()),
    state: c(({ storage, config, logger }) => new State(storage, config, logger)),
    policyService: c(({ policySource, state, logger, policyEngine }) => new PolicyService(policySource, state, logger, policyEngine)),
    metrics: c(({ state, config }) => new Metrics(state, { headscaleNames: config.metrics?.headscale_names ?? true })),
    driveService: c(({ driveAdapters, state, logger, policyService }) => new DriveService(driveAdapters, state, logger, () => policyService.compiled)),
    networkView: c(({ state, logger, driveService, metrics }) => {
      const view = new NetworkView(state, logger, () => driveService.grants());
      metrics.watch('headway_policy_contexts_built', 'Times the policy was resolved against the whole tailnet (once per batch of structural changes)', () => view.contextBuilds);
      metrics.watch('headway_policy_contexts_extended', 'Times the resolved policy was extended with joining or re-tagged nodes instead of resolved again', () => view.contextExtensions);
      metrics.watch('headway_policy_contexts_adopted', 'Times a new policy was installed with the resolution its check made instead of resolving it again', () => view.contextsAdopted);
      return view;
    }),
    dnsSettings: c(({ config, storage, state, logger }) => new DnsSettingsService(config.dns, storage.dnsSettings, state.bus, logger)),
    dnsConfig: c(({ config, logger, state, dnsAdapters, dnsSettings }) => {
      const source = new DnsConfigSource(
        config.dns, [config.prefixes.v4, config.prefixes.v6].filter(Boolean), logger,
        () => state.bus.publish({ type: 'dns-changed' }), dnsAdapters, () => dnsSettings.current());
      state.bus.subscribe((change) => { if (change.type === 'dns-settings-changed') source.settingsChanged(); });
      return source;
    }),
    derpMap: c(({ config, logger, state }) => new DerpMapSource(config, logger, () => state.bus.publish({ type: 'derp-changed' }))),
    mapper: c(({ state, config, networkView, dnsConfig, derpMap, metrics }) => {
      const mapper = new Mapper(state, config, networkView, dnsConfig, derpMap);
      metrics.watch('headway_full_map_peer_blocks_reused', 'Blocks of peers a full map sent as a frame compressed for an earlier full map', () => mapper.peerBlocks.hits);
      metrics.watch('headway_full_map_peer_blocks_compressed', 'Blocks of peers compressed for a full map (a frame of their own, kept for the next joiners holding the same peers)', () => mapper.peerBlocks.misses);
      return mapper;
    }),
    sessionHub: c(({ state, mapper, logger, metrics, policyService }) => new SessionHub(state, mapper, logger, metrics, () => policyService.compiled)),
    registrar: c(({ state, config, logger }) => new Registrar(state, config, logger)),
    sshChecks: c(({ state, config, logger, mapper }) => new SshChecks({
      state, config, logger: logger.child({ component: 'ssh-check' }),
      checkPeriodOf: (src, dst) => checkPeriodIn(mapper.view.forNode(dst.id).sshPolicy, src),
    })),
    routeService: c(({ state, networkView, sessionHub, logger, policyService }) => new RouteService(state, networkView, sessionHub, logger, () => policyService.compiled)),
    hostinfo: c(({ state, routeService }) => new HostinfoService(state, routeService)),
    nodeGc: c(({ state, config, logger, cluster }) => {
      const gc = new NodeGc(state, config, logger);
      if (cluster) gc.mayRun = () => cluster.runsJobs();
      return gc;
    }),
    auditLog: c(({ storage, config, logger }) => {
      const log = new AuditLog(storage.audit, logger.child({ component: 'audit' }), config.audit.retention);
      if (!log.persistent) logger.warn(`audit log: ${storage.describe()} keeps none; the latest changes are kept in memory until a restart`);
      return log;
    }),
    consoleSessions: c(({ storage, config, logger }) => {
      if (!config.admin.enabled) return null;
      const sessions = new ConsoleSessions(storage.consoleSessions, {
        linkLifetimeMs: config.admin.link_lifetime, idleMs: config.admin.session_idle_timeout, maxAgeMs: config.admin.session_max_age,
      });
      if (!sessions.persistent) logger.warn(`admin console: ${storage.describe()} keeps no sessions; sign-ins last until a restart and are not shared by other instances`);
      return sessions;
    }),
    // The policy and control services are reached lazily: the member joins before they start.
    cluster: c((k) => {
      const { config, storage, state, logger, controlKey } = k;
      if (!config.cluster?.enabled) return null;
      if (!storage.cluster) {
        throw new Error(`cluster.enabled: database.type ${config.database.type} (${storage.describe()}) cannot be shared by several instances; use postgres or mysql`);
      }
      return new ClusterMember(storage.cluster, state, config.cluster, logger.child({ cluster: 'member' }),
        `mkey:${controlKey.publicKey.toString('hex')}`, config.listen_addr, {
          reloadPolicy: () => k.policyService.reload({ remote: true }),
          reloadDns: () => k.dnsSettings.reload(),
          endStreams: () => k.controlServer.endAllStreams(),
        });
    }),
    relay: c(({ state, config, logger, derpMap, controlKey }) => new Relay(state, config, logger, derpMap,
      config.cluster?.enabled ? derpMeshKey(controlKey.privateKey) : undefined, opts.relayPorts)),
    acmeDns: c(({ config, logger, dnsAdapters, mapper }) => new AcmeDns({
      publisher: acmePublisher(config, dnsAdapters), certDomainOf: (node) => mapper.certDomain(node),
      lifetimeMs: config.dns.certificates.txt_lifetime, logger: logger.child({ component: 'acme-dns' }),
    })),
    controlServer: c(({ state, config, logger, metrics, controlKey, mapper, sessionHub, registrar, hostinfo, relay, sshChecks, acmeDns }) => new ControlServer({
      state, config, logger, metrics, controlKey, mapper, hub: sessionHub, registrar, hostinfo, relay, sshChecks, acmeDns,
    })),
    consoleOidc: c(({ loginMethod, consoleSessions, config, logger }) => {
      const lists = adminListsOf(config);
      if (lists && !(loginMethod && config.oidc.issuer)) logger.warn('admin.allowed_users, admin.allowed_groups and admin.allowed_domains take effect only with oidc.issuer set');
      if (!lists || !loginMethod || !config.oidc.issuer || !consoleSessions) return null;
      return new ConsoleOidc({ identity: loginMethod, sessions: consoleSessions, config, lists, secure: isSecure(config), logger: logger.child({ component: 'console' }) });
    }),
    loginFlow: c(({ loginMethod, state, registrar, config, logger, sshChecks, consoleOidc }) => (loginMethod
      ? new LoginFlow({ identity: loginMethod, state, registrar, config, logger, sshChecks, handoff: consoleOidc ?? undefined }) : null)),
    health: c(({ storage, cluster }) => async () => {
      if (cluster && !cluster.healthy) return false;
      try {
        await Promise.race([storage.ping(), new Promise((_, rej) => setTimeout(() => rej(new Error('timeout')), HEALTH_TIMEOUT_MS).unref())]);
        return true;
      } catch {
        return false;
      }
    }),
    apiDeps: c(({ state, policyService, config, health, registrar, routeService, driveService, loginMethod, cluster, instanceId, sshChecks, auditLog, dnsSettings, dnsConfig, consoleSessions }): ApiDeps => ({
      state, policy: policyService, config, health, drive: driveService, instanceId, audit: auditLog, dns: dnsSettings,
      dnsRecords: () => dnsConfig.records(),
      consoleAuth: consoleSessions ? (ctx) => authenticateConsole(ctx, consoleSessions, isSecure(config)) : undefined,
      oauth: state.oauth.available ? state.oauth : undefined,
      cluster: cluster ? () => cluster.status() : undefined,
      providerIdFor: loginMethod?.providerIdFor ? (subject) => ({ provider: loginMethod.provider, providerId: loginMethod.providerIdFor!(subject) }) : undefined,
      logins: registrar,
      sshChecks,
      approveRoutes: (id, routes) => routeService.approve(id, routes),
      primaryRoutes: (id) => routeService.primaryRoutes(id),
    })),
  });
}

/** Kernel is the started services, and how to stop them in reverse order. */
export interface Kernel {
  cradle: KernelCradle;
  close(): Promise<void>;
}

/**
 * bootKernel starts the composed services in dependency order: state (loaded
 * from storage), the policy, DNS, the relay (its ports bound before the DERP
 * map is built, which names them), the DERP map, the control protocol, then
 * the subscribers (map sessions first, so they see a new policy before route
 * auto-approval does). A failure stops what already started and rethrows.
 * `afterState` runs once the state is loaded (startServer's database record).
 */
export async function bootKernel(container: AwilixContainer, afterState?: (state: State) => void): Promise<Kernel> {
  const k = container.cradle as KernelCradle;
  const stops: Array<() => Promise<void> | void> = [];
  const close = async (warn?: Logger) => {
    for (const fn of stops.splice(0).reverse()) {
      try { await fn(); } catch (err) { warn?.warn('shutdown step failed', { error: (err as Error).message }); }
    }
  };
  try {
    // A cluster member follows the change feed before State loads, so nothing committed meanwhile is missed.
    const cluster = k.cluster;
    if (cluster) {
      await cluster.join();
      stops.push(() => cluster.stop());
    }
    await k.state.init();
    afterState?.(k.state);
    await k.policyService.init();
    stops.push(() => k.policyService.close());
    await k.dnsSettings.init();
    if (cluster) await cluster.start();
    await k.dnsConfig.init();
    stops.push(() => k.dnsConfig.close());
    await k.driveService.init();
    stops.push(() => k.driveService.close());
    stops.push(() => k.relay.close());
    await k.relay.start();
    if (cluster) k.relay.joinMesh(cluster);
    stops.push(() => k.derpMap.close());
    await k.derpMap.init();
    if (!Object.keys(k.derpMap.map.Regions).length) {
      k.logger.warn('the DERP map is empty: devices behind NAT cannot reach each other; enable derp.server or set derp.urls/derp.paths');
    }
    const control = k.controlServer;
    await control.init();
    stops.push(() => control.close());
    stops.push(() => k.sshChecks.close());
    k.sessionHub.start();
    stops.push(() => k.sessionHub.stop());
    k.routeService.start();
    stops.push(() => k.routeService.stop());
    k.nodeGc.start();
    stops.push(() => k.nodeGc.stop());
    k.auditLog.start(cluster ? () => cluster.runsJobs() : undefined);
    stops.push(() => k.auditLog.close());
    const consoleLog = k.logger.child({ component: 'console' });
    k.consoleSessions?.start(cluster ? () => cluster.runsJobs() : undefined, {
      pruned: (rows) => consoleLog.info('console sign-ins pruned', { rows }),
      failed: (err) => consoleLog.warn('console sign-ins: pruning failed', { error: safeErrorText(err) }),
    });
    stops.push(() => k.consoleSessions?.stop());
  } catch (err) {
    await close();
    throw err;
  }
  return { cradle: k, close: () => close(k.logger) };
}
