/**
 * bench-server is the child-process entry of `npm run bench`: it runs the real Headway server
 * (SQLite in a temp dir, log level warn, no metrics listener) and answers the driver over IPC.
 * Forked with --expose-gc so memory samples are taken after a full collection.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { isServerRequest, type MemorySample, type ServerMessage, type ServerRequest } from './bench-ipc.js';

/** CoreConfig is the part of HeadwayConfig the benchmark reads. */
interface CoreConfig {
  dns: { base_domain: string };
}

/** CoreServer is the slice of @headway/core's RunningServer the benchmark uses; testkit has no compile-time core dependency. */
interface CoreServer {
  config: CoreConfig;
  urls: { http: string };
  state: {
    createUser(input: { name: string }): Promise<{ id: number }>;
    createPreAuthKey(input: { userId: number; reusable?: boolean }): Promise<{ secret: string }>;
    nodeByNodeKey(key: string): { id: number } | undefined;
    renameNode(id: number, name: string): Promise<unknown>;
  };
  close(): Promise<void>;
}

/** CoreModule is the slice of @headway/core's exports the benchmark calls. */
interface CoreModule {
  resolveConfig(raw: unknown, opts: { env?: NodeJS.ProcessEnv; baseDir?: string }): {
    config: CoreConfig;
    problems: Array<{ key: string; message: string; level: string }>;
  };
  startServer(opts: { config: CoreConfig; logger: unknown; configSource?: string | null }): Promise<CoreServer>;
  createLogger(opts: { level?: string; write?: (line: string) => void }): unknown;
}

// A variable specifier keeps tsc from resolving (and so depending on) @headway/core at compile time.
const CORE_MODULE = '@headway/core';

function send(msg: ServerMessage, then?: () => void): void {
  process.send?.(msg, undefined, undefined, () => then?.());
}

const loopDelay = monitorEventLoopDelay({ resolution: 10 });
loopDelay.enable();

/**
 * sampleMemory collects garbage twice (weak refs and finalizers settle after the first), then once more as
 * V8's memory reducer does on its own within ~10 s of an idle process (a last-resort collection: it gives
 * back the young generation grown to 64 MiB by the join burst and compacts), and reads usage. Without that
 * last step the figure per idle session was mostly that transient young generation divided by N.
 */
export function sampleMemory(): MemorySample {
  const gc = (globalThis as { gc?: (opts?: { type: string; execution: string; flavor?: string }) => void }).gc;
  if (gc) {
    gc();
    gc();
    gc({ type: 'major', execution: 'sync', flavor: 'last-resort' });
  }
  const m = process.memoryUsage();
  const cpu = process.cpuUsage();
  return {
    rss: m.rss,
    heapUsed: m.heapUsed,
    heapTotal: m.heapTotal,
    external: m.external,
    arrayBuffers: m.arrayBuffers,
    cpuUserMs: cpu.user / 1000,
    cpuSystemMs: cpu.system / 1000,
    ...takeLoopDelay(),
  };
}

/** takeLoopDelay reads and resets the event-loop delay histogram (nanoseconds inside). */
function takeLoopDelay(): { loopDelayP99Ms: number; loopDelayMaxMs: number } {
  const out = { loopDelayP99Ms: loopDelay.percentile(99) / 1e6, loopDelayMaxMs: loopDelay.max / 1e6 };
  loopDelay.reset();
  return out;
}

async function boot(core: CoreModule, dataDir: string): Promise<CoreServer> {
  const logger = core.createLogger({ level: 'warn', write: (line) => process.stderr.write(`[server] ${line}\n`) });
  // BENCH_DATABASE (a `database` block) and BENCH_NOISE_KEY make this one instance of a cluster (bench --instances).
  const database = process.env.BENCH_DATABASE ? JSON.parse(process.env.BENCH_DATABASE) as Record<string, unknown> : undefined;
  const base = {
    listen_addr: '127.0.0.1:0',
    metrics_listen_addr: '',
    grpc_listen_addr: '',
    data_dir: dataDir,
    log: { level: 'warn' },
    derp: { server: { stun_listen_addr: '127.0.0.1:0' } },
    ...(database ? {
      database,
      cluster: { enabled: true },
      noise: { private_key_path: process.env.BENCH_NOISE_KEY },
    } : {}),
  };
  const resolve = (raw: Record<string, unknown>): CoreConfig => {
    const { config, problems } = core.resolveConfig(raw, { env: {}, baseDir: dataDir });
    const bad = problems.filter((p) => p.level !== 'warn');
    if (bad.length) throw new Error(`benchmark server config invalid: ${bad.map((p) => `${p.key}: ${p.message}`).join('; ')}`);
    return config;
  };
  // server_url must carry the real port, which is known only after a first bind; rebind on that port.
  const probe = await core.startServer({ config: resolve(base), logger, configSource: 'bench' });
  const url = probe.urls.http;
  await probe.close();
  return core.startServer({
    config: resolve({ ...base, listen_addr: `127.0.0.1:${new URL(url).port}`, server_url: url }),
    logger,
    configSource: 'bench',
  });
}

async function main(): Promise<void> {
  if (!process.send) throw new Error('bench-server must be started with child_process.fork by bench.js');
  const core = (await import(CORE_MODULE)) as CoreModule;
  const dataDir = mkdtempSync(join(tmpdir(), 'headway-bench-'));
  const server = await boot(core, dataDir);
  // In a cluster only the first instance makes the user and key (the driver uses its key for every instance).
  let secret = '';
  if (!process.env.BENCH_DATABASE || process.env.BENCH_BOOTSTRAP) {
    const user = await server.state.createUser({ name: 'bench' });
    secret = (await server.state.createPreAuthKey({ userId: user.id, reusable: true })).secret;
  }

  let stopping = false;
  const stop = async (): Promise<void> => {
    if (stopping) return;
    stopping = true;
    await server.close();
    rmSync(dataDir, { recursive: true, force: true });
  };

  const handle = async (req: ServerRequest): Promise<unknown> => {
    switch (req.op) {
      case 'memory': {
        const sample = sampleMemory();
        // BENCH_HEAP_SNAPSHOT (a directory): write a heap snapshot at every sample, to see where session memory goes.
        if (process.env.BENCH_HEAP_SNAPSHOT) {
          const { writeHeapSnapshot, getHeapSpaceStatistics } = await import('node:v8');
          const file = writeHeapSnapshot(join(process.env.BENCH_HEAP_SNAPSHOT, `server-${Date.now()}.heapsnapshot`));
          const spaces = getHeapSpaceStatistics().map((sp) => `${sp.space_name} ${(sp.space_size / 1048576).toFixed(1)}/${(sp.space_used_size / 1048576).toFixed(1)} MiB`);
          process.stderr.write(`[server] heap snapshot ${file}; spaces (size/used): ${spaces.join(', ')}\n`);
        }
        return sample;
      }
      case 'nodeId': {
        // A device that joined through another cluster instance is known here once its announcement arrives.
        const until = Date.now() + 10_000;
        while (!server.state.nodeByNodeKey(req.nodeKey) && process.env.BENCH_DATABASE && Date.now() < until) await new Promise((r) => setTimeout(r, 20));
        const node = server.state.nodeByNodeKey(req.nodeKey);
        if (!node) throw new Error(`no node with node key ${req.nodeKey}`);
        return node.id;
      }
      case 'rename': {
        const t0 = performance.now();
        await server.state.renameNode(req.nodeId, req.name);
        return performance.now() - t0;
      }
      case 'stop':
        await stop();
        return null;
    }
  };

  process.on('message', (raw: unknown) => {
    if (!isServerRequest(raw)) {
      process.stderr.write(`[server] ignoring malformed IPC message: ${JSON.stringify(raw).slice(0, 200)}\n`);
      return;
    }
    handle(raw).then(
      (result) => {
        // Disconnect only once the reply is written, or the driver would never see it.
        send({ type: 'reply', id: raw.id, ok: true, result }, raw.op === 'stop' ? () => process.disconnect() : undefined);
      },
      (err: unknown) => send({ type: 'reply', id: raw.id, ok: false, error: (err as Error).message ?? String(err) }),
    );
  });
  // The driver dying must not leave a server (and its temp dir) behind.
  process.on('disconnect', () => {
    stop().finally(() => process.exit(0));
  });

  send({ type: 'ready', url: server.urls.http, authKey: secret, baseDomain: server.config.dns.base_domain, dataDir });
}

main().catch((err: unknown) => {
  const message = (err as Error).stack ?? String(err);
  if (process.send) send({ type: 'fatal', error: message });
  else process.stderr.write(message + '\n');
  process.exitCode = 1;
  setTimeout(() => process.exit(1), 100).unref();
});
