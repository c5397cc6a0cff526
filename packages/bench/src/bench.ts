/**
 * bench is `npm run bench`: for each fleet size N it forks the real server (bench-server.js), joins N virtual
 * devices, waits for full mesh convergence, samples the server's own memory per session, times how fast a
 * rename reaches every peer, then runs the DERP relay benchmark. Human-readable tables go to stdout, followed
 * by one `BENCH_JSON {...}` line holding every figure.
 *
 * This is the no-policy run, chosen with `--policy none`; without it bench.js runs the realistic-policy benchmark
 * (bench-realistic.ts: seeded policy, device workers, rename/tag/policy change timings).
 *
 * Usage: node --expose-gc packages/bench/dist/src/bench.js --policy none [--sizes 100,1000,5000] [--instances K]
 * --instances K (K >= 2) runs K server processes as one cluster (cluster.enabled) on a scratch PostgreSQL
 *      database made through HEADWAY_TEST_POSTGRES_URL (or BENCH_POSTGRES_URL); devices are spread over the
 *      instances round robin, renames are made on the first, so rename figures include the cross-instance hop.
 * Env: BENCH_MAX (largest default size to run, default 1000), BENCH_CONCURRENCY (joins in flight, default 20:
 *      on 2 cores many more in flight queue past the 10 s ts2021 dial timeout),
 *      BENCH_JOIN_BUDGET_S (abandon a size whose joins take longer, default 600),
 *      BENCH_RENAMES (default 5), BENCH_DERP_PACKETS (default 20000; 0 skips the relay benchmark),
 *      BENCH_CPU_PROF (a directory: profile the server process with --cpu-prof), BENCH_WORKER_CPU_PROF (the same
 *      for the realistic run's load-generating workers).
 */
import { fork, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { cpus, totalmem } from 'node:os';
import { runRelayBenchmark, type RelayBenchmarkResult } from '@headway/derp';
import { testDatabaseServers } from '@headway/storage-sql/testing';
import { TestDevice } from '@headway/testkit';
import { joinDevice, runPool } from './bench-join.js';
import { isServerMessage, type MemorySample, type ServerReady, type ServerCommand } from './bench-ipc.js';
import { fileDescriptorLimit, formatTable, kib, mib, parseSizes, round2, skipReason, summarize, type LatencySummary } from './bench-stats.js';

const DEFAULT_SIZES = [100, 1000, 5000];

/** BenchOptions are the knobs read from argv and the environment. */
export interface BenchOptions {
  sizes: number[];
  /** explicitSizes: --sizes was given, so every listed size runs regardless of BENCH_MAX. */
  explicitSizes: boolean;
  maxSize: number;
  concurrency: number;
  renames: number;
  derpPackets: number;
  /** joinBudgetSeconds: a size whose joins take longer is abandoned and reported as failed with its progress. */
  joinBudgetSeconds: number;
  /** instances: server processes in one cluster on PostgreSQL (1: a single server on SQLite). */
  instances: number;
}

/** SizeResult holds every figure measured for one fleet size. */
export interface SizeResult {
  devices: number;
  concurrency: number;
  joinMs: number;
  joinsPerSecond: number;
  joinLatency: LatencySummary;
  /** joinRetries counts joins re-attempted after a dial timeout (at most JOIN_ATTEMPTS - 1 each, bench-join.ts). */
  joinRetries: number;
  /** joinProgress: elapsed seconds at every tenth of the fleet (N >= 1000 only), showing how join cost grows. */
  joinProgress: Array<{ joined: number; seconds: number }>;
  /** convergenceAfterJoinMs runs from the last join finishing until every netmap has N-1 peers. */
  convergenceAfterJoinMs: number;
  /** convergenceTotalMs runs from the first join starting until full convergence. */
  convergenceTotalMs: number;
  server: {
    before: MemorySample;
    after: MemorySample;
    heapPerSessionBytes: number;
    rssPerSessionBytes: number;
    externalPerSessionBytes: number;
    /** cpuMsJoinAndConverge is server user+system CPU spent between the two memory samples. */
    cpuMsJoinAndConverge: number;
    /** eventLoopDelay*: the server's event-loop delay during join and convergence. */
    eventLoopDelayP99Ms: number;
    eventLoopDelayMaxMs: number;
  };
  /** client: the driver process's own growth, i.e. what N virtual devices cost (not the server). */
  client: { rssPerDeviceBytes: number; heapPerDeviceBytes: number; cpuMsJoinAndConverge: number };
  rename: {
    runs: number;
    /** perRun: each rename's propagation to the N-1 other devices, then all runs pooled in `all`. */
    perRun: LatencySummary[];
    all: LatencySummary;
    /** serverApplyMs: time the server took inside nodes.rename (store + publish), per run. */
    serverApplyMs: number[];
    timeouts: number;
  };
  teardownMs: number;
}

function envInt(env: NodeJS.ProcessEnv, name: string, fallback: number, min: number): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < min) throw new Error(`${name}: "${raw}" is not an integer >= ${min}`);
  return n;
}

/** parseOptions reads `--sizes a,b,c` (or `--sizes=a,b,c`) and the BENCH_* variables. */
export function parseOptions(argv: readonly string[], env: NodeJS.ProcessEnv = process.env): BenchOptions {
  let sizes = DEFAULT_SIZES;
  let explicitSizes = false;
  let instances = 1;
  const readInstances = (value: string | undefined): number => {
    const k = Number(value);
    if (!Number.isInteger(k) || k < 1 || k > 16) throw new Error(`--instances: expected a whole number from 1 to 16, found ${JSON.stringify(value)}`);
    return k;
  };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === '--instances') {
      instances = readInstances(argv[++i]);
    } else if (arg.startsWith('--instances=')) {
      instances = readInstances(arg.slice('--instances='.length));
    } else if (arg === '--sizes') {
      const value = argv[++i];
      if (value === undefined) throw new Error('--sizes needs a value, e.g. --sizes 100,1000');
      sizes = parseSizes(value);
      explicitSizes = true;
    } else if (arg.startsWith('--sizes=')) {
      sizes = parseSizes(arg.slice('--sizes='.length));
      explicitSizes = true;
    } else {
      throw new Error(`unknown argument "${arg}"; usage: bench.js [--sizes 100,1000,5000] [--instances K]`);
    }
  }
  return {
    sizes,
    explicitSizes,
    maxSize: envInt(env, 'BENCH_MAX', 1000, 2),
    concurrency: envInt(env, 'BENCH_CONCURRENCY', 20, 1),
    renames: envInt(env, 'BENCH_RENAMES', 5, 1),
    derpPackets: envInt(env, 'BENCH_DERP_PACKETS', 20000, 0),
    joinBudgetSeconds: envInt(env, 'BENCH_JOIN_BUDGET_S', 600, 1),
    instances,
  };
}


function collectGarbage(): void {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (gc) {
    gc();
    gc();
  }
}

/** ServerProcess is the forked bench-server with a request/reply layer over IPC. */
class ServerProcess {
  private nextId = 1;
  private readonly pending = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
  private exited = false;

  private constructor(readonly child: ChildProcess, readonly ready: ServerReady) {
    child.on('message', (raw: unknown) => {
      if (!isServerMessage(raw) || raw.type !== 'reply') return;
      const waiter = this.pending.get(raw.id);
      if (!waiter) return;
      this.pending.delete(raw.id);
      if (raw.ok) waiter.resolve(raw.result);
      else waiter.reject(new Error(`server: ${raw.error}`));
    });
    child.on('exit', (code, signal) => {
      this.exited = true;
      for (const w of this.pending.values()) w.reject(new Error(`server process exited (code ${code}, signal ${signal})`));
      this.pending.clear();
    });
  }

  static start(env: NodeJS.ProcessEnv = process.env): Promise<ServerProcess> {
    const entry = new URL('./bench-server.js', import.meta.url);
    // BENCH_CPU_PROF=<dir> writes a V8 CPU profile of the server process there, to see where join time goes.
    const profileDir = process.env.BENCH_CPU_PROF;
    const execArgv = ['--expose-gc', ...(profileDir ? ['--cpu-prof', `--cpu-prof-dir=${profileDir}`] : [])];
    const child = fork(entry, [], { execArgv, env, stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    return new Promise<ServerProcess>((resolve, reject) => {
      const onMessage = (raw: unknown): void => {
        if (!isServerMessage(raw)) return;
        if (raw.type === 'ready') {
          cleanup();
          resolve(new ServerProcess(child, raw));
        } else if (raw.type === 'fatal') {
          cleanup();
          reject(new Error(`server process failed to start: ${raw.error}`));
        }
      };
      const onExit = (code: number | null): void => {
        cleanup();
        reject(new Error(`server process exited with code ${code} before it was ready`));
      };
      const cleanup = (): void => {
        child.off('message', onMessage);
        child.off('exit', onExit);
      };
      child.on('message', onMessage);
      child.on('exit', onExit);
    });
  }

  request<T>(req: ServerCommand, timeoutMs = 60_000): Promise<T> {
    if (this.exited) return Promise.reject(new Error('server process has exited'));
    const id = this.nextId++;
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new Error(`server did not answer ${req.op} within ${timeoutMs} ms`));
      }, timeoutMs);
      this.pending.set(id, {
        resolve: (v) => { clearTimeout(timer); resolve(v as T); },
        reject: (e) => { clearTimeout(timer); reject(e); },
      });
      this.child.send({ ...req, id });
    });
  }

  /** stop asks for a clean shutdown (which removes the temp dir), killing the process if it does not exit. */
  async stop(): Promise<void> {
    if (this.exited) return;
    const exited = new Promise<void>((resolve) => this.child.once('exit', () => resolve()));
    try {
      await this.request({ op: 'stop' }, 30_000);
    } catch {
      this.child.kill('SIGKILL');
    }
    const timer = setTimeout(() => this.child.kill('SIGKILL'), 10_000);
    await exited;
    clearTimeout(timer);
  }
}


function log(line: string): void {
  process.stdout.write(line + '\n');
}

/** ScratchServer is the slice of @headway/storage-sql/testing the cluster benchmark uses (loaded at run time). */
/**
 * ServerGroup is the server processes of one run: one (SQLite), or `instances` cluster
 * members on a scratch PostgreSQL database sharing one noise key; the first bootstraps
 * the user and key, and answers the driver's node lookups and renames.
 */
class ServerGroup {
  private constructor(readonly servers: ServerProcess[]) {}

  get first(): ServerProcess { return this.servers[0]!; }

  static async start(opts: BenchOptions, database?: Record<string, unknown>): Promise<ServerGroup> {
    if (opts.instances === 1) return new ServerGroup([await ServerProcess.start()]);
    const servers: ServerProcess[] = [];
    const keyDir = mkdtempSync(join(tmpdir(), 'headway-bench-key-'));
    try {
      for (let i = 0; i < opts.instances; i++) {
        servers.push(await ServerProcess.start({
          ...process.env,
          BENCH_DATABASE: JSON.stringify(database),
          BENCH_NOISE_KEY: join(keyDir, 'noise.key'),
          BENCH_BOOTSTRAP: i === 0 ? '1' : '',
        }));
      }
    } catch (err) {
      for (const s of servers) await s.stop();
      throw err;
    } finally {
      // Each server read the key at start; the file is not needed afterwards.
      setTimeout(() => rmSync(keyDir, { recursive: true, force: true }), 0);
    }
    return new ServerGroup(servers);
  }

  /** memory sums the servers' samples (loop delays: the worst). */
  async memory(): Promise<MemorySample> {
    const all = await Promise.all(this.servers.map((s) => s.request<MemorySample>({ op: 'memory' })));
    const sum = (k: keyof MemorySample) => all.reduce((n, m) => n + m[k], 0);
    return {
      rss: sum('rss'), rssLive: sum('rssLive'), heapUsed: sum('heapUsed'), heapTotal: sum('heapTotal'), external: sum('external'), arrayBuffers: sum('arrayBuffers'),
      cpuUserMs: sum('cpuUserMs'), cpuSystemMs: sum('cpuSystemMs'),
      loopDelayP99Ms: Math.max(...all.map((m) => m.loopDelayP99Ms)), loopDelayMaxMs: Math.max(...all.map((m) => m.loopDelayMaxMs)),
    };
  }

  async stop(): Promise<void> {
    for (const s of [...this.servers].reverse()) await s.stop();
  }
}

/**
 * withDatabase runs `body` once per size: on nothing for a single server, on a fresh
 * scratch PostgreSQL database for a cluster.
 */
async function withDatabase<T>(opts: BenchOptions, body: (database?: Record<string, unknown>) => Promise<T>): Promise<T> {
  if (opts.instances === 1) return body();
  const env = { ...process.env, HEADWAY_TEST_POSTGRES_URL: process.env.BENCH_POSTGRES_URL || process.env.HEADWAY_TEST_POSTGRES_URL };
  const pg = testDatabaseServers(env).find((s) => s.type === 'postgres');
  if (!pg?.admin) throw new Error('--instances needs a PostgreSQL server: set HEADWAY_TEST_POSTGRES_URL or BENCH_POSTGRES_URL (postgres://user:pass@host:port/db)');
  let out: T | undefined;
  await pg.scratch(async (c) => {
    out = await body({ type: 'postgres', postgres: { host: c.host, port: c.port, name: c.database, user: c.user, pass: c.password ?? '' } });
  });
  return out as T;
}

/** runSize measures one fleet of `n` devices against fresh server processes. */
async function runSize(n: number, opts: BenchOptions): Promise<SizeResult> {
  return withDatabase(opts, (database) => runSizeOn(n, opts, database));
}

async function runSizeOn(n: number, opts: BenchOptions, database?: Record<string, unknown>): Promise<SizeResult> {
  const group = await ServerGroup.start(opts, database);
  const server = group.first;
  const devices: TestDevice[] = [];
  try {
    const { authKey, baseDomain } = server.ready;
    const urlOf = (i: number) => group.servers[i % group.servers.length]!.ready.url;
    const suffix = baseDomain ? `.${baseDomain}.` : '.';
    collectGarbage();
    const clientBefore = process.memoryUsage();
    const clientCpuBefore = process.cpuUsage();
    const serverBefore = await group.memory();

    // Join: connect, register, start the streamed map poll.
    for (let i = 0; i < n; i++) devices.push(new TestDevice({ serverUrl: urlOf(i), hostname: `bench-${i}` }));
    const joinLatencies: number[] = [];
    let joinRetries = 0;
    let done = 0;
    const joinProgress: Array<{ joined: number; seconds: number }> = [];
    const progressEvery = n >= 1000 ? Math.max(100, Math.floor(n / 10)) : 0;
    const joinStart = performance.now();
    const joinDeadline = joinStart + opts.joinBudgetSeconds * 1000;
    await runPool(n, opts.concurrency, async (i) => {
      if (performance.now() > joinDeadline) {
        const elapsed = (performance.now() - joinStart) / 1000;
        throw new Error(`join budget of ${opts.joinBudgetSeconds} s used up: ${done}/${n} devices joined in ${elapsed.toFixed(0)} s ` +
          (joinProgress.length ? `(progress ${joinProgress.map((p) => `${p.joined}@${p.seconds}s`).join(' ')}) ` : '') + `(raise BENCH_JOIN_BUDGET_S to wait longer)`);
      }
      const t0 = performance.now();
      const joined = await joinDevice(devices[i]!, { authKey });
      devices[i] = joined.device;
      joinRetries += joined.retries;
      joinLatencies.push(performance.now() - t0);
      done++;
      if (progressEvery && done % progressEvery === 0) {
        const seconds = round2((performance.now() - joinStart) / 1000);
        joinProgress.push({ joined: done, seconds });
        log(`  [${n}] ${done}/${n} joined after ${seconds.toFixed(1)} s`);
      }
    });
    const joinEnd = performance.now();
    const joinMs = joinEnd - joinStart;
    log(`  [${n}] joined ${n} devices in ${(joinMs / 1000).toFixed(2)} s (${(n / (joinMs / 1000)).toFixed(1)} joins/s, concurrency ${opts.concurrency}, ${joinRetries} retried dials)`);

    // Convergence: every device sees every other one.
    const convergeTimeout = Math.max(60_000, n * 60);
    await Promise.all(devices.map((d) => d.waitFor((nm) => nm.peers.size === n - 1, convergeTimeout)));
    const convergedAt = performance.now();
    log(`  [${n}] converged (every netmap has ${n - 1} peers) ${((convergedAt - joinEnd) / 1000).toFixed(2)} s after the last join`);

    const clientCpu = process.cpuUsage(clientCpuBefore);
    const serverAfter = await group.memory();
    collectGarbage();
    const clientAfter = process.memoryUsage();

    // Rename propagation: time from asking the server until each other device's netmap shows the new name.
    const perRun: LatencySummary[] = [];
    const pooled: number[] = [];
    const serverApplyMs: number[] = [];
    let timeouts = 0;
    for (let run = 0; run < opts.renames; run++) {
      const target = devices[Math.floor((run * n) / opts.renames)]!;
      const nodeId = await server.request<number>({ op: 'nodeId', nodeKey: target.nodeKeyText });
      const name = `renamed-${run}-${nodeId}`;
      // With MagicDNS the peer's Name is the FQDN `<name>.<base_domain>.`.
      const expectedName = `${name}${suffix}`;
      const samples: number[] = [];
      let t0 = 0;
      const watchers = devices.filter((d) => d !== target).map((d) => {
        let seenAt = 0;
        return d.waitFor((nm) => {
          if (seenAt === 0 && t0 > 0 && nm.peers.get(nodeId)?.Name === expectedName) seenAt = performance.now();
          return seenAt > 0;
        }, 30_000).then(
          () => { samples.push(seenAt - t0); },
          () => { timeouts++; },
        );
      });
      t0 = performance.now();
      serverApplyMs.push(round2(await server.request<number>({ op: 'rename', nodeId, name })));
      await Promise.all(watchers);
      const summary = summarize(samples);
      perRun.push(summary);
      pooled.push(...samples);
      log(`  [${n}] rename ${run + 1}/${opts.renames}: ${summary.count} peers updated, p50 ${summary.p50} ms, p99 ${summary.p99} ms, max ${summary.max} ms`);
    }

    const teardownStart = performance.now();
    await runPool(devices.length, 200, (i) => devices[i]!.close());
    devices.length = 0;
    await group.stop();
    const teardownMs = performance.now() - teardownStart;

    return {
      devices: n,
      concurrency: opts.concurrency,
      joinMs: round2(joinMs),
      joinsPerSecond: round2(n / (joinMs / 1000)),
      joinLatency: summarize(joinLatencies),
      joinRetries,
      joinProgress,
      convergenceAfterJoinMs: round2(convergedAt - joinEnd),
      convergenceTotalMs: round2(convergedAt - joinStart),
      server: {
        before: serverBefore,
        after: serverAfter,
        heapPerSessionBytes: Math.round((serverAfter.heapUsed - serverBefore.heapUsed) / n),
        rssPerSessionBytes: Math.round((serverAfter.rss - serverBefore.rss) / n),
        externalPerSessionBytes: Math.round((serverAfter.external - serverBefore.external) / n),
        cpuMsJoinAndConverge: round2(serverAfter.cpuUserMs + serverAfter.cpuSystemMs - serverBefore.cpuUserMs - serverBefore.cpuSystemMs),
        eventLoopDelayP99Ms: round2(serverAfter.loopDelayP99Ms),
        eventLoopDelayMaxMs: round2(serverAfter.loopDelayMaxMs),
      },
      client: {
        rssPerDeviceBytes: Math.round((clientAfter.rss - clientBefore.rss) / n),
        heapPerDeviceBytes: Math.round((clientAfter.heapUsed - clientBefore.heapUsed) / n),
        cpuMsJoinAndConverge: round2((clientCpu.user + clientCpu.system) / 1000),
      },
      rename: { runs: opts.renames, perRun, all: summarize(pooled), serverApplyMs, timeouts },
      teardownMs: round2(teardownMs),
    };
  } finally {
    await Promise.all(devices.map((d) => d.close().catch(() => undefined)));
    await group.stop();
  }
}

async function main(): Promise<void> {
  // The realistic-policy benchmark (bench-realistic.ts) is the default; `--policy none` keeps this no-policy run.
  const policyArgs = withoutPolicyNone(process.argv.slice(2));
  if (!policyArgs) return (await import('./bench-realistic.js')).runRealistic(process.argv.slice(2));
  const opts = parseOptions(policyArgs);
  const fdLimit = fileDescriptorLimit();
  const machine = {
    nproc: cpus().length,
    cpuModel: cpus()[0]?.model ?? 'unknown',
    memoryMiB: Math.round(totalmem() / 1048576),
    node: process.version,
    platform: `${process.platform}-${process.arch}`,
    fdLimit: Number.isFinite(fdLimit) ? fdLimit : String(fdLimit),
    gcExposed: typeof (globalThis as { gc?: unknown }).gc === 'function',
  };
  log(`Headway benchmark — ${machine.nproc} CPU (${machine.cpuModel}), ${machine.memoryMiB} MiB, node ${machine.node}, ulimit -n ${fdLimit}`);
  if (!machine.gcExposed) log('note: run with node --expose-gc for stable memory figures (npm run bench does)');

  const results: SizeResult[] = [];
  const skipped: Array<{ devices: number; reason: string }> = [];
  const failed: Array<{ devices: number; error: string }> = [];
  for (const n of opts.sizes) {
    const reason = skipReason(n, opts, fdLimit, log);
    if (reason) {
      log(`skip N=${n}: ${reason}`);
      skipped.push({ devices: n, reason });
      continue;
    }
    log(`\n== N=${n} devices${opts.instances > 1 ? ` on ${opts.instances} instances (cluster on PostgreSQL)` : ''} ==`);
    try {
      results.push(await runSize(n, opts));
    } catch (err) {
      const error = (err as Error).message;
      log(`  [${n}] FAILED: ${error}`);
      failed.push({ devices: n, error });
    }
  }

  let derp: RelayBenchmarkResult | undefined;
  let derpError: string | undefined;
  if (opts.derpPackets > 0) {
    log(`\n== DERP relay: ${opts.derpPackets} packets of 1200 bytes, echoed ==`);
    try {
      derp = await runRelayBenchmark({ packets: opts.derpPackets, size: 1200 });
    } catch (err) {
      derpError = (err as Error).message;
      log(`  FAILED: ${derpError}`);
    }
  }

  log('\n== Control plane ==');
  if (results.length) {
    log(formatTable([
      ['N', 'join s', 'joins/s', 'join p99 ms', 'converge s', 'srv heap KiB/sess', 'srv rss KiB/sess', 'srv CPU s', 'driver CPU s', 'client rss KiB/dev', 'rename p50 ms', 'p99 ms', 'max ms'],
      ...results.map((r) => [
        String(r.devices),
        (r.joinMs / 1000).toFixed(2),
        r.joinsPerSecond.toFixed(1),
        r.joinLatency.p99.toFixed(0),
        (r.convergenceAfterJoinMs / 1000).toFixed(2),
        kib(r.server.heapPerSessionBytes),
        kib(r.server.rssPerSessionBytes),
        (r.server.cpuMsJoinAndConverge / 1000).toFixed(1),
        (r.client.cpuMsJoinAndConverge / 1000).toFixed(1),
        kib(r.client.rssPerDeviceBytes),
        r.rename.all.p50.toFixed(1),
        r.rename.all.p99.toFixed(1),
        r.rename.all.max.toFixed(1),
      ]),
    ]));
    for (const r of results) {
      log(`N=${r.devices}: server heap ${mib(r.server.before.heapUsed)} -> ${mib(r.server.after.heapUsed)} MiB, rss ${mib(r.server.before.rss)} -> ${mib(r.server.after.rss)} MiB; rename pooled over ${r.rename.runs} runs x ${r.devices - 1} peers (${r.rename.all.count} samples, ${r.rename.timeouts} timeouts); server-side nodes.rename ${r.rename.serverApplyMs.join('/')} ms; server event-loop delay during join p99 ${r.server.eventLoopDelayP99Ms} ms, max ${r.server.eventLoopDelayMaxMs} ms; ${r.joinRetries} join retries`);
    }
  } else {
    log('(no control-plane size completed)');
  }
  if (derp) {
    log('\n== DERP relay ==');
    log(formatTable([
      ['packet B', 'packets', 'packets/s', 'Mbit/s', 'added p50 ms', 'added p99 ms', 'rtt p50 ms', 'rtt p99 ms', 'dropped'],
      [String(derp.size), String(derp.packets), String(derp.packetsPerSecond), derp.megabitsPerSecond.toFixed(1), derp.addedLatencyP50Ms.toFixed(3), derp.addedLatencyP99Ms.toFixed(3), derp.roundTripP50Ms.toFixed(3), derp.roundTripP99Ms.toFixed(3), String(derp.droppedPackets)],
    ]));
  }
  log('BENCH_JSON ' + JSON.stringify({ machine, options: opts, sizes: results, skipped, failed, derp: derp ?? null, derpError: derpError ?? null }));
  if (failed.length || derpError) process.exitCode = 1;
}

/** withoutPolicyNone returns argv without `--policy none` when it asks for the no-policy run, else undefined. */
function withoutPolicyNone(argv: readonly string[]): string[] | undefined {
  const i = argv.findIndex((a) => a === '--policy' || a.startsWith('--policy='));
  if (i < 0) return undefined;
  const value = argv[i] === '--policy' ? argv[i + 1] : argv[i]!.slice('--policy='.length);
  if (value !== 'none') return undefined;
  return argv.filter((_, j) => j !== i && !(argv[i] === '--policy' && j === i + 1));
}

main().catch((err: unknown) => {
  process.stderr.write(`bench: ${(err as Error).message ?? String(err)}\n`);
  process.exitCode = 1;
});
