/**
 * bench-core is what both benchmark server children (bench-server.ts, bench-policy-server.ts) share: starting
 * the real server on a free port with its server_url set, and the memory/CPU sample they answer the driver with.
 */
import { readFileSync } from 'node:fs';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { createLogger, resolveConfig } from '@headway/core';
import { startServer, type RunningServer } from '@headway/server';
import type { MemorySample } from './bench-ipc.js';
import { statusBytes } from './bench-stats.js';

/**
 * startBenchServer starts the real server over SQLite in `dataDir` (log level warn, no metrics or gRPC
 * listener), with `extra` config on top. server_url must carry the real port, which is known only after a
 * first bind, so it binds once to learn a free port and starts again on it.
 */
export async function startBenchServer(dataDir: string, extra: Record<string, unknown>, port?: number): Promise<RunningServer> {
  const logger = createLogger({ level: 'warn', write: (line) => process.stderr.write(`[server] ${line}\n`) });
  const base = {
    listen_addr: '127.0.0.1:0', metrics_listen_addr: '', grpc_listen_addr: '', data_dir: dataDir,
    log: { level: 'warn' }, derp: { server: { stun_listen_addr: '127.0.0.1:0' } }, ...extra,
  };
  const resolve = (raw: Record<string, unknown>) => {
    const { config, problems } = resolveConfig(raw, { env: {}, baseDir: dataDir });
    const bad = problems.filter((p) => p.level !== 'warn');
    if (bad.length) throw new Error(`benchmark server config invalid: ${bad.map((p) => `${p.key}: ${p.message}`).join('; ')}`);
    return config;
  };
  let url = `http://127.0.0.1:${port}`;
  if (port === undefined) {
    const probe = await startServer({ config: resolve(base), logger, configSource: 'bench' });
    url = probe.urls.http;
    await probe.close();
  }
  return startServer({ config: resolve({ ...base, listen_addr: `127.0.0.1:${new URL(url).port}`, server_url: url }), logger, configSource: 'bench' });
}

/** residentBytes reads this process's resident set (VmRSS) as the kernel counts it, with no collection first. */
export function residentBytes(): number {
  return statusBytes(readFileSync('/proc/self/status', 'utf8'), 'VmRSS');
}

/** RSS_SAMPLE_MS: how often the resident set is read for its peak (a join burst's peak lasts seconds). */
export const RSS_SAMPLE_MS = 500;

/** ResidentPeak is the largest resident set seen every RSS_SAMPLE_MS since the last take(), as the server runs. */
export class ResidentPeak {
  private peak = 0;
  /**
   * heapAtPeak / externalAtPeak: V8's heap (committed) and the memory outside it that JavaScript objects hold
   * (buffers: frames queued for a socket, messages being built) when the peak was read; the rest is the C allocator's
   * own and the code.
   */
  private heapAtPeak = 0;
  private externalAtPeak = 0;
  private readonly timer = setInterval(() => this.sample(), RSS_SAMPLE_MS).unref();
  sample(): number {
    const now = residentBytes();
    if (now > this.peak) this.atPeak(now);
    return now;
  }
  /** take returns the resident set now and the peak since the previous take (with the heap then), and starts a new period. */
  take(): { live: number; peak: number; heapAtPeak: number; externalAtPeak: number } {
    const live = this.sample();
    const { peak, heapAtPeak, externalAtPeak } = this;
    this.atPeak(live);
    return { live, peak, heapAtPeak, externalAtPeak };
  }
  private atPeak(rss: number): void {
    const m = process.memoryUsage();
    this.peak = rss;
    this.heapAtPeak = m.heapTotal;
    this.externalAtPeak = m.external;
  }
  stop(): void { clearInterval(this.timer); }
}

const loopDelay = monitorEventLoopDelay({ resolution: 10 });
loopDelay.enable();

/**
 * sampleMemory collects garbage twice (weak refs and finalizers settle after the first), then once more as
 * V8's memory reducer does on its own within ~10 s of an idle process (a last-resort collection: it gives
 * back the young generation grown to 64 MiB by the join burst and compacts), then gives the C heap's free
 * pages back as the server's MemoryTrimmer does within 10 s of a collection, and reads usage and CPU, with
 * the event-loop delay since the previous sample. Without the last collection the figure per idle session
 * would be mostly that transient young generation divided by N; without the trim, the join burst's C memory.
 */
export function sampleMemory(server?: RunningServer): MemorySample {
  const rssLive = residentBytes();
  const gc = (globalThis as { gc?: (opts?: { type: string; execution: string; flavor?: string }) => void }).gc;
  if (gc) {
    gc();
    gc();
    gc({ type: 'major', execution: 'sync', flavor: 'last-resort' });
  }
  server?.memoryTrimmer?.trimNow();
  const m = process.memoryUsage();
  const cpu = process.cpuUsage();
  const out = {
    rss: m.rss, rssLive, heapUsed: m.heapUsed, heapTotal: m.heapTotal, external: m.external, arrayBuffers: m.arrayBuffers,
    cpuUserMs: cpu.user / 1000, cpuSystemMs: cpu.system / 1000,
    loopDelayP99Ms: loopDelay.percentile(99) / 1e6, loopDelayMaxMs: loopDelay.max / 1e6,
  };
  loopDelay.reset();
  // BENCH_SMAPS: print where resident memory is, by kind of mapping, to see what RSS holds beyond the heap.
  if (process.env.BENCH_SMAPS) process.stderr.write(`resident by mapping: ${residentByMapping()}\n`);
  return out;
}

/** residentByMapping sums /proc/self/smaps' Rss by mapping: the brk heap, anonymous mappings by size, files, stacks. */
function residentByMapping(): string {
  const sums = new Map<string, number>();
  let kind = '';
  for (const line of readFileSync('/proc/self/smaps', 'utf8').split('\n')) {
    const head = /^([0-9a-f]+)-([0-9a-f]+) \S+ \S+ \S+ \S+\s*(.*)$/.exec(line);
    if (head) {
      const kib = (parseInt(head[2], 16) - parseInt(head[1], 16)) / 1024;
      const name = head[3];
      kind = name.startsWith('/') ? 'files' : name ? name
        : kib === 65536 ? 'anon 64 MiB (malloc arena)' : kib === 256 ? 'anon 256 KiB (V8 page)'
        : `anon ${kib >= 1024 ? '>=1 MiB' : kib >= 128 ? '128 KiB-1 MiB' : '<128 KiB'}`;
      continue;
    }
    const rss = /^Rss:\s+(\d+) kB/.exec(line);
    if (rss) sums.set(kind, (sums.get(kind) ?? 0) + Number(rss[1]));
  }
  return [...sums].sort((a, b) => b[1] - a[1]).map(([k, v]) => `${k} ${(v / 1024).toFixed(1)} MiB`).join(', ');
}
