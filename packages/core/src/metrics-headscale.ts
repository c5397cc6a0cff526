import { Counter, Gauge, Registry } from 'prom-client';

/**
 * HeadscaleAlias publishes one of Headway's metrics under the name (and labels) headscale gives the same
 * measure, so dashboards and alerts written for headscale read a Headway server. `labels` turns a source
 * series' labels into the alias's, or drops the series (undefined).
 */
export interface HeadscaleAlias {
  name: string;
  from: string;
  type: 'counter' | 'gauge';
  help: string;
  labelNames?: string[];
  labels?: (source: Partial<Record<string, string | number>>) => Record<string, string> | undefined;
}

const process = (name: string, type: 'counter' | 'gauge', help: string): HeadscaleAlias => ({ name, from: `headway_${name}`, type, help });

/** HEADSCALE_ALIASES is the one table of headscale 0.29 metric names Headway publishes, and where each comes from. */
export const HEADSCALE_ALIASES: readonly HeadscaleAlias[] = [
  { name: 'headscale_nodestore_nodes', from: 'headway_nodes', type: 'gauge', help: 'Number of nodes (headway_nodes)' },
  {
    name: 'headscale_mapresponse_sent_total', from: 'headway_map_messages_total', type: 'counter', labelNames: ['status', 'type'],
    help: 'Keep-alive map responses sent (headway_map_messages_total{kind="keepalive"})',
    labels: (l) => (l.kind === 'keepalive' ? { status: 'ok', type: 'keepalive' } : undefined),
  },
  {
    name: 'headscale_mapresponse_generated_total', from: 'headway_map_messages_total', type: 'counter', labelNames: ['response_type'],
    help: 'Map responses made, full or change (headway_map_messages_total{kind="full"|"delta"})',
    labels: (l) => (l.kind === 'full' ? { response_type: 'full' } : l.kind === 'delta' ? { response_type: 'change' } : undefined),
  },
  process('process_cpu_seconds_total', 'counter', 'Total user and system CPU time spent in seconds'),
  process('process_resident_memory_bytes', 'gauge', 'Resident memory size in bytes'),
  process('process_virtual_memory_bytes', 'gauge', 'Virtual memory size in bytes'),
  process('process_open_fds', 'gauge', 'Number of open file descriptors'),
  process('process_max_fds', 'gauge', 'Maximum number of open file descriptors'),
  process('process_start_time_seconds', 'gauge', 'Start time of the process since unix epoch in seconds'),
];

/**
 * headscaleAliases builds a registry whose metrics read, at each scrape, the current values of their sources
 * in `source`. A source the platform does not have (process memory outside Linux) publishes nothing.
 */
export function headscaleAliases(source: Registry, aliases: readonly HeadscaleAlias[] = HEADSCALE_ALIASES): Registry {
  const registry = new Registry();
  for (const alias of aliases) {
    const options = { name: alias.name, help: alias.help, labelNames: alias.labelNames ?? [], registers: [registry] };
    /** copy puts the source's current series, relabelled, into the alias (emptied first: a series may have gone). */
    const copy = async (metric: { reset(): void }, put: (labels: Record<string, string>, value: number) => void) => {
      const values = (await source.getSingleMetric(alias.from)?.get())?.values ?? [];
      metric.reset();
      for (const v of values) {
        const labels = alias.labels ? alias.labels(v.labels) : {};
        if (labels) put(labels, v.value);
      }
    };
    if (alias.type === 'counter') {
      new Counter({ ...options, async collect() { await copy(this, (labels, value) => this.inc(labels, value)); } });
    } else {
      new Gauge({ ...options, async collect() { await copy(this, (labels, value) => this.set(labels, value)); } });
    }
  }
  return registry;
}
