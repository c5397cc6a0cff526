import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { State } from './state/state.js';
import { headscaleAliases } from './metrics-headscale.js';

/** MetricsOptions: headscaleNames also publishes headscale's names for the same measures (metrics.headscale_names). */
export interface MetricsOptions { headscaleNames?: boolean }

/** Metrics lives per server instance (its own registry), so tests can run several servers. */
export class Metrics {
  readonly registry = new Registry();
  readonly httpRequests: Counter<'method' | 'route' | 'status'>;
  readonly httpDuration: Histogram<'method' | 'route'>;
  readonly mapSessions: Gauge;
  readonly mapMessages: Counter<'kind'>;
  /** mapBatches times each batch of changes sent to map sessions (SessionHub's flush), its fan-out included. */
  readonly mapBatches: Histogram;
  readonly mapBatchWindow: Gauge;
  /** mapBatchesEarly counts batches sent before their window ended: a change came after a lull, or none came (SessionHub). */
  readonly mapBatchesEarly: Counter<'reason'>;
  /** haProbes counts the HA prober's pings to subnet routers by outcome (control/ha-prober.ts). */
  readonly haProbes: Counter<'result'>;
  /** memoryTrim* measure the C heap trims after garbage collections (server/memory.ts). */
  readonly memoryTrimSeconds: Histogram;
  readonly memoryTrimmedBytes: Counter;
  readonly heapReductions: Counter;

  readonly #aliases: Registry | undefined;

  constructor(state: State, options: MetricsOptions = {}) {
    collectDefaultMetrics({ register: this.registry, prefix: 'headway_' });
    this.httpRequests = new Counter({ name: 'headway_http_requests_total', help: 'HTTP requests by route and status', labelNames: ['method', 'route', 'status'], registers: [this.registry] });
    this.httpDuration = new Histogram({ name: 'headway_http_request_duration_seconds', help: 'HTTP request duration by route', labelNames: ['method', 'route'], registers: [this.registry], buckets: [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5] });
    this.mapSessions = new Gauge({ name: 'headway_map_sessions', help: 'Open map streaming sessions', registers: [this.registry] });
    this.mapMessages = new Counter({ name: 'headway_map_messages_total', help: 'Map messages sent by kind', labelNames: ['kind'], registers: [this.registry] });
    this.mapBatches = new Histogram({
      name: 'headway_map_batch_seconds', help: 'Time to send one batch of changes to every affected map session',
      registers: [this.registry], buckets: [0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
    });
    this.mapBatchWindow = new Gauge({ name: 'headway_map_batch_window_seconds', help: 'How long changes are collected before they are sent (longer under load)', registers: [this.registry] });
    this.mapBatchesEarly = new Counter({
      name: 'headway_map_batches_early_total', help: 'Batches of changes sent before their window ended, by reason: a change after a lull (change) or a lull with no change (lull)',
      labelNames: ['reason'], registers: [this.registry],
    });
    this.haProbes = new Counter({
      name: 'headway_ha_probes_total', help: 'Pings to the routers of highly available subnet routes, by result: sent, answered, missed (no answer within node.routes.ha.probe_timeout)',
      labelNames: ['result'], registers: [this.registry],
    });
    this.memoryTrimSeconds = new Histogram({
      name: 'headway_memory_trim_seconds', help: 'Time to give the C heap\'s free pages back to the system (glibc malloc_trim)',
      registers: [this.registry], buckets: [0.0005, 0.001, 0.005, 0.01, 0.05, 0.1],
    });
    this.memoryTrimmedBytes = new Counter({ name: 'headway_memory_trimmed_bytes_total', help: 'Resident memory given back to the system by C heap trims', registers: [this.registry] });
    this.heapReductions = new Counter({ name: 'headway_heap_reductions_total', help: 'Memory-reducing collections run once the server was quiet after a burst', registers: [this.registry] });
    this.watch('headway_users', 'Users', () => state.users.list().length);
    this.watch('headway_nodes', 'Nodes', () => state.nodes.list().length);
    this.watch('headway_nodes_online', 'Nodes with a live map session', () => state.presence.onlineCount());
    this.watch('headway_preauth_keys', 'Pre-auth keys', async () => (await state.keys.listPreAuthKeys()).length);
    this.watch('headway_api_keys', 'API keys', async () => (await state.keys.listApiKeys()).length);
    this.#aliases = options.headscaleNames ? headscaleAliases(this.registry) : undefined;
  }

  /** exposition is the text a scrape gets (content type: registry.contentType): every metric, then headscale's names. */
  async exposition(): Promise<string> {
    const own = await this.registry.metrics();
    return this.#aliases ? own + (await this.#aliases.metrics()) : own;
  }

  /** watch exposes a value the server or another service owns as a gauge, read at each scrape. */
  watch(name: string, help: string, read: () => number | Promise<number>): void {
    new Gauge({ name, help, registers: [this.registry], async collect() { this.set(await read()); } });
  }
}
