/**
 * bench-realistic is `npm run bench` with the realistic policy (the default; `--policy none` runs the no-policy
 * benchmark in bench.ts). Per fleet size it forks the real server (bench-policy-server.js) and K device workers
 * (bench-worker.js), joins every device of the seeded plan (@headway/testkit's tailnet-plan.ts), waits until every
 * device holds exactly the peers the policy lets it see (judged by an independent evaluator), then times a rename, a
 * tag change and a policy change reaching every affected device, with server CPU, memory and bytes per session.
 * Each change is made --rounds times (the tag and policy changes back and forth); the tables show each kind's
 * median round by p99, with the range of p99 over the rounds, since one round on a shared 2-core VM can be
 * 50% off its neighbours.
 * The driver's and workers' own CPU is printed next to the server's, so a reader can tell whether the load
 * generator was the bottleneck. Tables go to stdout, then one `BENCH_JSON {...}` line.
 *
 * The server runs with the V8 options `headway serve` sets (serverNodeFlags). Its resident set is sampled every
 * 500 ms with no collection forced (before the devices, peak while they join, steady once joined, peak over the
 * changes) and once more after forced collections; an idle `headway serve` is read first. After the changes the
 * server is restarted (--restart: SIGTERM, then SIGKILL) and every device dials again (bench-restart.ts).
 *
 * Usage: node --expose-gc packages/bench/dist/src/bench.js [--policy realistic|none] [--sizes 1000,5000]
 *        [--workers K] [--seed S] [--rounds R] [--restart term,kill|none]
 * Env: BENCH_MAX (largest default size to run, default 1000), BENCH_CONCURRENCY (joins in flight over all
 *      workers, default 20), BENCH_JOIN_BUDGET_S (default 600), BENCH_CHANGE_TIMEOUT_S (default 60),
 *      BENCH_CPU_PROF (a directory: profile the server process with --cpu-prof; BENCH_CPU_PROF_INTERVAL_US to sample
 *      more often than every 1,000 µs),
 *      BENCH_SERVER_NODE_FLAGS (more Node flags for the server alone, e.g. --trace-gc),
 *      BENCH_IDLE_S (when the idle `headway serve` is read, seconds after start: default 10,30; 0 skips it),
 *      BENCH_SETTLE_S (how long the joined tailnet is left quiet before its resident set is read as settled, default
 *      SETTLE_S),
 *      BENCH_WORKER_CPU_PROF (a directory: profile the load generator's workers), BENCH_CHANGE_PROF (a directory:
 *      one server profile per measured change, <devices>-<change>-<round>.cpuprofile, and one per worker,
 *      <devices>-<change>-<round>-worker<w>.cpuprofile, until every affected device has it; sampled every 100 µs),
 *      BENCH_HEAP_SNAPSHOT (a directory: the server's heap after the changes, <devices>.heapsnapshot, and each
 *      worker's, <devices>-worker-<w>.heapsnapshot), BENCH_WORKER_SEMI_SPACE_MB (the workers' young generation,
 *      default WORKER_SEMI_SPACE_MB; 0: V8's default).
 */
import { fork, type ChildProcess } from 'node:child_process';
import { getHeapStatistics } from 'node:v8';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { availableParallelism, cpus, totalmem } from 'node:os';
import { serverNodeFlags } from '@headway/core';
import { measureIdle, type IdleSample } from './bench-idle.js';
import { measureRestart, parseRestarts, type RestartResult, type RestartSignal } from './bench-restart.js';
import type { MemorySample } from './bench-ipc.js';
import { fileDescriptorLimit, formatTable, kib, mib, parseSizes, round2, skipReason, summarize, type LatencySummary } from './bench-stats.js';
import { planRetag, planTailnet } from '@headway/testkit';
import type { PolicyServerCommand, PolicyServerReady } from './bench-policy-server.js';
import type { Change, JoinResult, WorkerCommand, WorkerStats } from './bench-worker.js';

const DEFAULT_SIZES = [1000, 5000, 10000];
/**
 * SETTLE_S: the joined tailnet is left quiet this long before its resident set is read again: V8 gives the pages of
 * a burst's garbage back by memory-reducing collections of its own about 15 s after the allocation rate drops.
 */
const SETTLE_S = 20;
/**
 * WORKER_SEMI_SPACE_MB is each device worker's young-generation semi-space (--max-semi-space-size): larger than
 * V8's default, so fewer of a worker's short-lived parsed messages are promoted (see the worker fork below).
 */
const WORKER_SEMI_SPACE_MB = 64;

/** RealisticOptions are the knobs of the realistic benchmark. */
export interface RealisticOptions {
  policy: 'realistic' | 'none';
  sizes: number[];
  explicitSizes: boolean;
  maxSize: number;
  workers: number;
  seed: number;
  concurrency: number;
  joinBudgetSeconds: number;
  changeTimeoutSeconds: number;
  /** rounds: how many times each change is measured (see ChangeSummary). */
  rounds: number;
  /** restarts: how the server is restarted after the changes, in order (empty: not restarted). */
  restarts: RestartSignal[];
}

function envInt(env: NodeJS.ProcessEnv, name: string, fallback: number, min: number): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < min) throw new Error(`${name}: "${raw}" is not an integer >= ${min}`);
  return n;
}

const USAGE = 'usage: bench.js [--policy realistic|none] [--sizes 1000,5000,10000] [--workers K] [--seed S] [--rounds R] [--restart term,kill|none]';

/** parseRealisticOptions reads the flags (as `--flag value` or `--flag=value`) and BENCH_* variables. */
export function parseRealisticOptions(argv: readonly string[], env: NodeJS.ProcessEnv = process.env): RealisticOptions {
  const opts: RealisticOptions = {
    policy: 'realistic', sizes: DEFAULT_SIZES, explicitSizes: false, maxSize: envInt(env, 'BENCH_MAX', 1000, 2),
    workers: Math.max(1, availableParallelism()), seed: 1, concurrency: envInt(env, 'BENCH_CONCURRENCY', 20, 1),
    joinBudgetSeconds: envInt(env, 'BENCH_JOIN_BUDGET_S', 600, 1), changeTimeoutSeconds: envInt(env, 'BENCH_CHANGE_TIMEOUT_S', 60, 1),
    rounds: 3, restarts: ['SIGTERM', 'SIGKILL'],
  };
  for (let i = 0; i < argv.length; i++) {
    let arg = argv[i]!;
    let value: string | undefined;
    const eq = arg.indexOf('=');
    if (arg.startsWith('--') && eq > 0) { value = arg.slice(eq + 1); arg = arg.slice(0, eq); }
    const take = (): string => {
      value ??= argv[++i];
      if (value === undefined) throw new Error(`${arg} needs a value; ${USAGE}`);
      return value;
    };
    const int = (min: number): number => {
      const v = take(), n = Number(v);
      if (!Number.isInteger(n) || n < min) throw new Error(`${arg}: "${v}" is not an integer >= ${min}`);
      return n;
    };
    switch (arg) {
      case '--policy': {
        const v = take();
        if (v !== 'realistic' && v !== 'none') throw new Error(`--policy: "${v}" is not realistic or none`);
        opts.policy = v;
        break;
      }
      case '--sizes': opts.sizes = parseSizes(take()); opts.explicitSizes = true; break;
      case '--workers': opts.workers = int(1); break;
      case '--seed': opts.seed = int(0); break;
      case '--rounds': opts.rounds = int(1); break;
      case '--restart': opts.restarts = parseRestarts(take()); break;
      default: throw new Error(`unknown argument "${argv[i]}"; ${USAGE}`);
    }
  }
  return opts;
}

/** Child is a forked process answering `{id, ...}` requests with `{id, ok, result|error}`. */
class Child<C extends { op: string }> {
  private nextId = 1;
  private readonly pending = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
  exited = false;
  constructor(readonly name: string, readonly proc: ChildProcess) {
    proc.on('message', (raw: unknown) => {
      const m = raw as { id?: number; ok?: boolean; result?: unknown; error?: string };
      if (typeof m?.id !== 'number') return;
      const w = this.pending.get(m.id);
      if (!w) return;
      this.pending.delete(m.id);
      if (m.ok) w.resolve(m.result);
      else w.reject(new Error(`${name}: ${m.error}`));
    });
    proc.on('exit', (code, signal) => {
      this.exited = true;
      for (const w of this.pending.values()) w.reject(new Error(`${name} exited (code ${code}, signal ${signal})`));
      this.pending.clear();
    });
  }
  request<T>(cmd: C, timeoutMs = 120_000): Promise<T> {
    if (this.exited) return Promise.reject(new Error(`${this.name} has exited`));
    const id = this.nextId++;
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => { this.pending.delete(id); reject(new Error(`${this.name} did not answer ${cmd.op} within ${timeoutMs} ms`)); }, timeoutMs);
      this.pending.set(id, { resolve: (v) => { clearTimeout(timer); resolve(v as T); }, reject: (e) => { clearTimeout(timer); reject(e); } });
      this.proc.send({ ...cmd, id });
    });
  }
  async stop(op?: C): Promise<void> {
    if (this.exited) return;
    const exited = new Promise<void>((r) => this.proc.once('exit', () => r()));
    if (op) await this.request(op, process.env.BENCH_CPU_PROF ? 300_000 : 60_000).catch(() => undefined);
    if (this.proc.connected) this.proc.disconnect();
    // A profiled server writes its profile on exit: give a busy one time to get there rather than kill it.
    const timer = setTimeout(() => this.proc.kill('SIGKILL'), process.env.BENCH_CPU_PROF ? 600_000 : 15_000);
    await exited;
    clearTimeout(timer);
  }
}

/** ServerRun is where a server child keeps its database, and for a restart the port the devices know. */
interface ServerRun { dataDir: string; port?: number; restart?: boolean }

function startServer(n: number, opts: RealisticOptions, run: ServerRun): Promise<{ server: Child<PolicyServerCommand>; ready: PolicyServerReady }> {
  const profileDir = process.env.BENCH_CPU_PROF;
  // BENCH_CPU_PROF_INTERVAL_US samples more often than V8's 1 ms default: a single change's flush is ~100 ms.
  const interval = process.env.BENCH_CPU_PROF_INTERVAL_US;
  // BENCH_SERVER_NODE_FLAGS: more flags for the server process alone, space-separated (e.g. --trace-gc).
  const extra = (process.env.BENCH_SERVER_NODE_FLAGS ?? '').split(/\s+/).filter(Boolean);
  // The options `headway serve` runs the server under, unless BENCH_SERVER_NODE_FLAGS gives its own.
  const serve = serverNodeFlags({ memory: { heap_limit_mb: 0 } }, extra, getHeapStatistics().heap_size_limit / 2 ** 20);
  const execArgv = ['--expose-gc', ...serve, ...extra, ...(profileDir ? ['--cpu-prof', `--cpu-prof-dir=${profileDir}`, ...(interval ? [`--cpu-prof-interval=${interval}`] : [])] : [])];
  const proc = fork(new URL('./bench-policy-server.js', import.meta.url), [], {
    execArgv, stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    env: {
      ...process.env, BENCH_PLAN_SIZE: String(n), BENCH_PLAN_SEED: String(opts.seed), BENCH_PLAN_POLICY: opts.policy, BENCH_DATA_DIR: run.dataDir,
      ...(run.port ? { BENCH_PORT: String(run.port) } : {}), ...(run.restart ? { BENCH_RESTART: '1' } : {}),
    },
  });
  return new Promise((resolve, reject) => {
    const onMessage = (raw: unknown): void => {
      const m = raw as { type?: string; error?: string };
      if (m?.type === 'ready') { cleanup(); resolve({ server: new Child<PolicyServerCommand>('server', proc), ready: raw as PolicyServerReady }); }
      else if (m?.type === 'fatal') { cleanup(); reject(new Error(`server failed to start: ${m.error}`)); }
    };
    const onExit = (code: number | null): void => { cleanup(); reject(new Error(`server exited with code ${code} before it was ready`)); };
    const cleanup = (): void => { proc.off('message', onMessage); proc.off('exit', onExit); };
    proc.on('message', onMessage);
    proc.on('exit', onExit);
  });
}

function log(line: string): void {
  process.stdout.write(line + '\n');
}

function epochNow(): number {
  return performance.timeOrigin + performance.now();
}

function cpuMs(): number {
  const c = process.cpuUsage();
  return (c.user + c.system) / 1000;
}

/** ChangeResult is one measured change. */
export interface ChangeResult {
  kind: Change['kind'];
  /** round: which of the --rounds measurements of this kind (0-based). */
  round: number;
  affected: number;
  latency: LatencySummary;
  timeouts: number;
  /** wrong: devices not holding exactly their expected peers once every affected one was seen (0 is correct). */
  wrong: number;
  serverApplyMs: number;
  serverCpuMs: number;
  /** workersCpuMs: the load generator's CPU over the change (decoding and checking what the devices received). */
  workersCpuMs: number;
  bytesPerSession: number;
  bytesPerAffected: number;
}

/** ChangeSummary is a kind's median round by p99, with every round's p99 (in the order measured). */
export interface ChangeSummary extends ChangeResult {
  p99Rounds: number[];
}

/**
 * summarizeRounds picks, per kind in first-measured order, the round whose p99 is the median (the lower one of an
 * even count), and lists every round's p99: one figure a reader can compare across runs, and the spread that says
 * how far to trust it.
 */
export function summarizeRounds(rounds: readonly ChangeResult[]): ChangeSummary[] {
  const kinds = [...new Set(rounds.map((r) => r.kind))];
  return kinds.map((kind) => {
    const of = rounds.filter((r) => r.kind === kind);
    const sorted = [...of].sort((a, b) => a.latency.p99 - b.latency.p99);
    return { ...sorted[Math.floor((sorted.length - 1) / 2)]!, p99Rounds: of.map((r) => r.latency.p99) };
  });
}

/** RealisticResult holds the figures of one fleet size. */
export interface RealisticResult {
  devices: number;
  workers: number;
  policyRules: number;
  peers: { min: number; mean: number; max: number };
  joinMs: number;
  joinsPerSecond: number;
  joinLatency: LatencySummary;
  /** joinPhases: where joins' time went (see JoinPhases): dialing, registering, waiting for the first map. */
  joinPhases: { connect: LatencySummary; register: LatencySummary; firstMap: LatencySummary };
  /** workersLoopDelay: the largest p99 and max event-loop delay of a worker during the join (ms). */
  workersLoopDelay: { p99: number; max: number };
  joinRetries: number;
  convergenceAfterJoinMs: number;
  convergenceTotalMs: number;
  convergenceWrong: string[];
  server: {
    cpuMsJoinAndConverge: number;
    heapPerSessionBytes: number;
    rssPerSessionBytes: number;
    before: MemorySample;
    after: MemorySample;
    stats: unknown;
    /** rss: the resident set with no collection forced: before any device, peak over the join, once joined, peak over the changes. */
    rss: { beforeDevices: number; peakJoin: number; joined: number; settled: number; peakChanges: number };
  };
  restarts: RestartResult[];
  bytesPerSessionJoin: number;
  /** changes: per kind, its median round by p99 (see summarizeRounds); changeRounds: every round as measured. */
  changes: ChangeSummary[];
  changeRounds: ChangeResult[];
  driverCpuMs: number;
  workersCpuMs: number;
  /** workersJoinCpuMs: the workers' CPU over the join and convergence (the server's: server.cpuMsJoinAndConverge). */
  workersJoinCpuMs: number;
}

/** cpuRatio is the load generator's CPU as a multiple of the server's over the same phase. */
const cpuRatio = (workersMs: number, serverMs: number): string => (serverMs > 0 ? (workersMs / serverMs).toFixed(2) : '-');

async function runSize(n: number, opts: RealisticOptions): Promise<RealisticResult> {
  const plan = planTailnet(n, opts.seed);
  const driverCpu0 = cpuMs();
  const dataDir = mkdtempSync(join(tmpdir(), 'headway-bench-'));
  let { server, ready } = await startServer(n, opts, { dataDir });
  const k = Math.min(opts.workers, n);
  const workers: Array<Child<WorkerCommand>> = [];
  try {
    for (let w = 0; w < k; w++) {
      // BENCH_WORKER_CPU_PROF=<dir> profiles the load generator's workers as BENCH_CPU_PROF does the server.
      const workerProf = process.env.BENCH_WORKER_CPU_PROF;
      // A worker parses every message of thousands of devices into short-lived objects: with V8's default young
      // generation most of them would be promoted and collected again by full marks of a heap of a GB or more.
      // BENCH_WORKER_SEMI_SPACE_MB=0 keeps V8's default.
      const semi = process.env.BENCH_WORKER_SEMI_SPACE_MB ?? String(WORKER_SEMI_SPACE_MB);
      const execArgv = [...(semi !== '0' ? [`--max-semi-space-size=${semi}`] : []), ...(workerProf ? ['--cpu-prof', `--cpu-prof-dir=${workerProf}`] : [])];
      workers.push(new Child<WorkerCommand>(`worker ${w}`, fork(new URL('./bench-worker.js', import.meta.url), [], { execArgv, stdio: ['ignore', 'inherit', 'inherit', 'ipc'] })));
    }
    const slice = (w: number): [number, number] => [Math.floor((w * n) / k), Math.floor(((w + 1) * n) / k)];
    const inits = await Promise.all(workers.map((c, w) => c.request<{ nodeKeys: string[]; peerCounts: number[] }>(
      { op: 'init', url: ready.url, seed: opts.seed, size: n, from: slice(w)[0], to: slice(w)[1], keys: ready.keys, policy: opts.policy === 'realistic' }, 600_000)));
    const nodeKeys = inits.flatMap((r) => r.nodeKeys);
    const counts = opts.policy === 'realistic' ? inits.flatMap((r) => r.peerCounts) : [n - 1];
    const peers = { min: Math.min(...counts), mean: round2(counts.reduce((s, x) => s + x, 0) / counts.length), max: Math.max(...counts) };
    await Promise.all(workers.map((c) => c.request({ op: 'keys', nodeKeys })));
    log(`  [${n}] plan: ${plan.rules} rules, ${plan.users.length} users, ${plan.devices.filter((d) => d.tags.length).length} tagged, ` +
      `${plan.devices.filter((d) => d.routes.length).length} subnet routers; peers per device min ${peers.min} mean ${peers.mean} max ${peers.max} of ${n - 1}; ${k} workers`);
    if (opts.policy === 'realistic' && peers.max >= n - 1) log(`  [${n}] note: some device sees the whole tailnet`);

    const rssBefore = await server.request<{ live: number }>({ op: 'rss' });
    const serverBefore = await server.request<MemorySample>({ op: 'memory' });
    const workersBefore = await Promise.all(workers.map((c) => c.request<WorkerStats>({ op: 'stats' })));
    const perWorker = Math.max(1, Math.ceil(opts.concurrency / k));
    const joinStart = epochNow();
    // Progress every 20 s from the server's node count, so a slow size shows how its join cost grows, with the CPU
    // the server and the workers have used so far and how the server batched (a size that does not finish prints
    // no table, and these say where its time went).
    let polling = false;
    const cpuAtJoin = await server.request<number>({ op: 'cpu' });
    const progress = setInterval(() => {
      if (polling) return;
      polling = true;
      Promise.all([
        server.request<{ nodes: number; batches?: number; contextsBuilt?: number; contextsExtended?: number }>({ op: 'stats' }, 60_000),
        server.request<number>({ op: 'cpu' }, 60_000),
        Promise.all(workers.map((c) => c.request<WorkerStats>({ op: 'stats' }, 60_000))),
      ]).then(
        ([s, cpu, ws]) => log(`  [${n}] ${s.nodes}/${n} registered after ${((epochNow() - joinStart) / 1000).toFixed(0)} s ` +
          `(server CPU ${((cpu - cpuAtJoin) / 1000).toFixed(1)} s, workers ${((ws.reduce((a, w) => a + w.cpuMs, 0) - workersBefore.reduce((a, w) => a + w.cpuMs, 0)) / 1000).toFixed(1)} s, ` +
          `${s.batches ?? '?'} batches, ${s.contextsBuilt ?? '?'} policy contexts built, ${s.contextsExtended ?? '?'} extended)`),
        () => undefined,
      ).finally(() => { polling = false; });
    }, 20_000);
    const joins = await Promise.all(workers.map((c) => c.request<JoinResult>(
      { op: 'join', concurrency: perWorker, budgetMs: opts.joinBudgetSeconds * 1000 }, opts.joinBudgetSeconds * 1000 + 120_000)))
      .finally(() => clearInterval(progress));
    const joinEnd = Math.max(...joins.flatMap((j) => j.doneAt));
    const joinMs = joinEnd - joinStart;
    const joinRetries = joins.reduce((s, j) => s + j.retries, 0);
    log(`  [${n}] joined ${n} devices in ${(joinMs / 1000).toFixed(2)} s (${(n / (joinMs / 1000)).toFixed(1)} joins/s, ${opts.concurrency} in flight over ${k} workers, ${joinRetries} retried dials)`);
    const phases = joins.flatMap((j) => j.phases);
    const joinPhases = {
      connect: summarize(phases.map((p) => p.connectMs)),
      register: summarize(phases.map((p) => p.registerMs)),
      firstMap: summarize(phases.map((p) => p.firstMapMs)),
    };
    const phaseText = (x: LatencySummary): string => `mean ${x.mean.toFixed(0)}, p50 ${x.p50.toFixed(0)}, p99 ${x.p99.toFixed(0)} ms`;
    const workersLoopDelay = { p99: round2(Math.max(...joins.map((j) => j.loopDelay.p99))), max: round2(Math.max(...joins.map((j) => j.loopDelay.max))) };
    log(`  [${n}] a join's time: dial and handshake ${phaseText(joinPhases.connect)}; register ${phaseText(joinPhases.register)}; ` +
      `map request to first map ${phaseText(joinPhases.firstMap)}; the workers' event loops held up p99 ${workersLoopDelay.p99} ms, max ${workersLoopDelay.max} ms meanwhile`);

    const convergeTimeout = Math.max(60_000, n * 60);
    const conv = await Promise.all(workers.map((c) => c.request<{ lastAt: number; wrong: string[] }>({ op: 'converge', timeoutMs: convergeTimeout }, convergeTimeout + 60_000)));
    const convergedAt = Math.max(...conv.map((c) => c.lastAt));
    const convergenceWrong = conv.flatMap((c) => c.wrong);
    log(`  [${n}] converged ${((convergedAt - joinEnd) / 1000).toFixed(2)} s after the last join` +
      (convergenceWrong.length ? `; ${convergenceWrong.length} devices NEVER held exactly their expected peers, e.g. ${convergenceWrong.slice(0, 3).join('; ')}` : ': every device holds exactly the peers the policy lets it see'));
    // The memory sample (forced full collections, the last one compacting) is taken after the measured changes:
    // taken here it would shrink the heap, and the first large flush after it would spend most of its time in the
    // collector regrowing it.
    const cpuAfterJoin = await server.request<number>({ op: 'cpu' });
    const rssJoin = await server.request<{ live: number; peak: number; heapAtPeak: number; externalAtPeak: number }>({ op: 'rss' });
    await new Promise((r) => setTimeout(r, envInt(process.env, 'BENCH_SETTLE_S', SETTLE_S, 0) * 1000));
    const rssSettled = await server.request<{ live: number }>({ op: 'rss' });
    const stats = await server.request({ op: 'stats' });
    const workersAfterJoin = await Promise.all(workers.map((c) => c.request<WorkerStats>({ op: 'stats' })));
    const joinBytes = workersAfterJoin.reduce((s, w) => s + w.mapBytes, 0) - workersBefore.reduce((s, w) => s + w.mapBytes, 0);

    const changes: ChangeResult[] = [];
    const workersCpu = async (): Promise<number> => (await Promise.all(workers.map((c) => c.request<WorkerStats>({ op: 'stats' })))).reduce((a, w) => a + w.cpuMs, 0);
    const measure = async (round: number, change: Change, apply: PolicyServerCommand): Promise<void> => {
      const timeoutMs = opts.changeTimeoutSeconds * 1000;
      await Promise.all(workers.map((c) => c.request({ op: 'arm', change, timeoutMs }, 600_000)));
      const changeProf = process.env.BENCH_CHANGE_PROF;
      if (changeProf) {
        mkdirSync(changeProf, { recursive: true });
        await server.request({ op: 'profileStart', intervalUs: 100 });
        await Promise.all(workers.map((c) => c.request({ op: 'profileStart', intervalUs: 100 })));
      }
      const cpu0 = await server.request<number>({ op: 'cpu' });
      const wcpu0 = await workersCpu();
      const t0 = epochNow();
      const serverApplyMs = await server.request<number>(apply, timeoutMs + 60_000);
      const got = await Promise.all(workers.map((c) => c.request<{ seen: number[]; timeouts: number; affected: number; bytes: number }>({ op: 'collect' }, timeoutMs + 60_000)));
      const cpu1 = await server.request<number>({ op: 'cpu' });
      const wcpu1 = await workersCpu();
      if (changeProf) {
        const files = await Promise.all(workers.map((c, w) => c.request<string>({ op: 'profileStop', file: join(resolve(changeProf), `${n}-${change.kind}-${round}-worker${w}.cpuprofile`) }, 120_000)));
        log(`  [${n}] ${change.kind}: workers' profiles ${files.join(', ')}`);
      }
      // Every device, affected or not, must now hold exactly what the policy lets it see: checked by a scan of
      // every device's peers once all times are in, outside the measured window.
      const wrong = (await Promise.all(workers.map((c) => c.request<number>({ op: 'verify' }, 600_000)))).reduce((a, w) => a + w, 0);
      if (changeProf) {
        const file = await server.request<string>({ op: 'profileStop', file: join(resolve(changeProf), `${n}-${change.kind}-${round}.cpuprofile`) }, 120_000);
        log(`  [${n}] ${change.kind}: server profile ${file}`);
      }
      const affected = got.reduce((s, g) => s + g.affected, 0);
      const bytes = got.reduce((s, g) => s + g.bytes, 0);
      const r: ChangeResult = {
        kind: change.kind, round, affected, latency: summarize(got.flatMap((g) => g.seen.map((x) => x - t0))),
        timeouts: got.reduce((s, g) => s + g.timeouts, 0), wrong,
        serverApplyMs: round2(serverApplyMs), serverCpuMs: round2(cpu1 - cpu0), workersCpuMs: round2(wcpu1 - wcpu0),
        bytesPerSession: Math.round(bytes / n), bytesPerAffected: affected ? Math.round(bytes / affected) : 0,
      };
      changes.push(r);
      log(`  [${n}] ${r.kind}${opts.rounds > 1 ? ` (round ${round + 1})` : ''}: ${r.affected} devices affected, p50 ${r.latency.p50} ms, p99 ${r.latency.p99} ms, max ${r.latency.max} ms, ` +
        `${r.timeouts} timeouts, ${r.wrong} wrong afterwards, server apply ${r.serverApplyMs} ms, server CPU ${r.serverCpuMs} ms, workers' CPU ${r.workersCpuMs} ms (${cpuRatio(r.workersCpuMs, r.serverCpuMs)} x the server's), ${r.bytesPerAffected} B per affected device`);
    };
    const nodeIdOf = (i: number): Promise<number> => server.request<number>({ op: 'nodeId', nodeKey: nodeKeys[i]! });
    // Rename a user's device (device 0 belongs to a user in every plan).
    const renameId = await nodeIdOf(0);
    // Retag a device with one tag (no router) to another and, in the next round, back: peers change on both sides,
    // and its Tags for those still seeing it. The policy change goes to variant 1 and back to 0 likewise.
    const retag = planRetag(plan.devices);
    const retagId = retag ? await nodeIdOf(retag.device.index) : undefined;
    for (let round = 0; round < opts.rounds; round++) {
      const name = `renamed-${renameId}-${round}`;
      await measure(round, { kind: 'rename', index: 0, nodeId: renameId, name }, { op: 'rename', nodeId: renameId, name });
      if (retag && retagId !== undefined) {
        const tags = retag.tagsAt(round);
        await measure(round, { kind: 'tags', index: retag.device.index, nodeId: retagId, tags }, { op: 'setTags', nodeId: retagId, tags });
      }
      const variant = round % 2 === 0 ? 1 : 0;
      if (opts.policy === 'realistic') await measure(round, { kind: 'policy', variant }, { op: 'setPolicy', variant });
    }

    const rssChanges = await server.request<{ live: number; peak: number; heapAtPeak: number; externalAtPeak: number }>({ op: 'rss' });
    log(`  [${n}] server RSS (no collection forced): ${mib(rssBefore.live)} MiB before the devices, peak ${mib(rssJoin.peak)} over the join (V8 heap ${mib(rssJoin.heapAtPeak)}, external ${mib(rssJoin.externalAtPeak)} then), ` +
      `${mib(rssJoin.live)} once joined, ${mib(rssSettled.live)} after it settled, peak ${mib(rssChanges.peak)} over the changes (V8 heap ${mib(rssChanges.heapAtPeak)}, external ${mib(rssChanges.externalAtPeak)} then)`);
    const serverAfter = await server.request<MemorySample>({ op: 'memory' });
    // BENCH_HEAP_SNAPSHOT=<dir>: the server's heap with every session idle, to see what a session keeps.
    const heapDir = process.env.BENCH_HEAP_SNAPSHOT;
    if (heapDir) {
      mkdirSync(heapDir, { recursive: true });
      log(`  [${n}] heap snapshot ${await server.request<string>({ op: 'heapSnapshot', file: join(resolve(heapDir), `${n}.heapsnapshot`) }, 300_000)}`);
      // The load generator's too: what a virtual device keeps bounds the largest fleet the workers can hold.
      for (const [w, c] of workers.entries()) {
        log(`  [${n}] worker heap snapshot ${await c.request<string>({ op: 'heapSnapshot', file: join(resolve(heapDir), `${n}-worker-${w}.heapsnapshot`) }, 600_000)}`);
      }
    }
    const restarts: RestartResult[] = [];
    for (const signal of opts.restarts) {
      const port = Number(new URL(ready.url).port);
      const again = await measureRestart(signal, {
        server, workers, concurrency: perWorker * 10, timeoutMs: Math.max(120_000, n * 60), devices: n,
        startAgain: () => startServer(n, opts, { dataDir, port, restart: true }),
      });
      server = again.server;
      const r = again.result;
      restarts.push(r);
      log(`  [${n}] restart (${signal}): old server gone in ${r.stopMs} ms; new one listening ${r.startupMs} ms after its start (${r.startServerMs} ms in startServer); ` +
        `${r.back === r.devices ? 'every device' : `${r.back} of ${r.devices} devices`} back with its full netmap ${(r.backMs / 1000).toFixed(2)} s later (${(r.totalMs / 1000).toFixed(2)} s after the signal), ${r.retries} dials retried; ` +
        `server CPU ${(r.serverCpuMs / 1000).toFixed(1)} s, workers' ${(r.workersCpuMs / 1000).toFixed(1)} s, peak RSS ${mib(r.peakRss)} MiB` +
        (r.wrong.length ? `; ${r.wrong.length} devices NOT back correctly, e.g. ${r.wrong.slice(0, 3).join('; ')}` : '') +
        (r.unreached.length ? `; ${r.unreached.length} devices could not dial within the budget, e.g. ${r.unreached.slice(0, 3).join('; ')}` : ''));
    }
    const closed = await Promise.all(workers.map((c) => c.request<WorkerStats>({ op: 'close' }, 120_000)));
    return {
      devices: n, workers: k, policyRules: opts.policy === 'realistic' ? plan.rules : 0, peers,
      joinMs: round2(joinMs), joinsPerSecond: round2(n / (joinMs / 1000)), joinLatency: summarize(joins.flatMap((j) => j.latencies)), joinPhases, workersLoopDelay, joinRetries,
      convergenceAfterJoinMs: round2(convergedAt - joinEnd), convergenceTotalMs: round2(convergedAt - joinStart), convergenceWrong,
      server: {
        cpuMsJoinAndConverge: round2(cpuAfterJoin - serverBefore.cpuUserMs - serverBefore.cpuSystemMs),
        heapPerSessionBytes: Math.round((serverAfter.heapUsed - serverBefore.heapUsed) / n),
        rssPerSessionBytes: Math.round((serverAfter.rss - serverBefore.rss) / n),
        before: serverBefore, after: serverAfter, stats,
        rss: { beforeDevices: rssBefore.live, peakJoin: rssJoin.peak, joined: rssJoin.live, settled: rssSettled.live, peakChanges: rssChanges.peak },
      },
      restarts,
      bytesPerSessionJoin: Math.round(joinBytes / n), changes: summarizeRounds(changes), changeRounds: changes,
      workersJoinCpuMs: round2(workersAfterJoin.reduce((s, w) => s + w.cpuMs, 0) - workersBefore.reduce((s, w) => s + w.cpuMs, 0)),
      driverCpuMs: round2(cpuMs() - driverCpu0), workersCpuMs: round2(closed.reduce((s, w) => s + w.cpuMs, 0)),
    };
  } finally {
    await Promise.all(workers.map((c) => c.stop()));
    await server.stop({ op: 'stop' });
    rmSync(dataDir, { recursive: true, force: true });
  }
}

/** runRealistic is the realistic benchmark's main; bench.ts hands it argv unless `--policy none`. */
export async function runRealistic(argv: readonly string[]): Promise<void> {
  const opts = parseRealisticOptions(argv);
  const fdLimit = fileDescriptorLimit();
  const machine = { nproc: cpus().length, cpuModel: cpus()[0]?.model ?? 'unknown', memoryMiB: Math.round(totalmem() / 1048576), node: process.version, fdLimit: Number.isFinite(fdLimit) ? fdLimit : String(fdLimit) };
  log(`Headway benchmark (${opts.policy} policy, seed ${opts.seed}) — ${machine.nproc} CPU (${machine.cpuModel}), ${machine.memoryMiB} MiB, node ${machine.node}, ulimit -n ${fdLimit}`);
  // BENCH_IDLE_S: when the idle server is read, seconds after its start (comma-separated; 0 skips it).
  const idleAt = (process.env.BENCH_IDLE_S ?? '').split(',').filter(Boolean).map(Number);
  const idle: IdleSample[] = idleAt[0] === 0 ? [] : await measureIdle(idleAt.length ? idleAt : undefined).catch((err: unknown) => { log(`idle server: FAILED: ${(err as Error).message}`); return []; });
  if (idle.length) log(`idle \`headway serve\` (SQLite, no device): ${idle.map((x) => `${x.atSeconds} s after start RSS ${mib(x.rss)} MiB (anonymous ${mib(x.rssAnon)}, file-backed ${mib(x.rssFile)})`).join('; ')}`);
  const results: RealisticResult[] = [];
  const skipped: Array<{ devices: number; reason: string }> = [];
  const failed: Array<{ devices: number; error: string }> = [];
  for (const n of opts.sizes) {
    const reason = skipReason(n, opts, fdLimit, log);
    if (reason) {
      log(`skip N=${n}: ${reason}`);
      skipped.push({ devices: n, reason });
      continue;
    }
    log(`\n== N=${n} devices, ${opts.policy} policy ==`);
    try {
      results.push(await runSize(n, opts));
    } catch (err) {
      const error = (err as Error).message;
      log(`  [${n}] FAILED: ${error}`);
      failed.push({ devices: n, error });
    }
  }
  log('\n== Control plane, ' + opts.policy + ' policy ==');
  if (results.length) {
    log(formatTable([
      ['N', 'rules', 'peers mean', 'join s', 'joins/s', 'converge s', 'srv CPU s', 'drv+wrk CPU s', 'srv heap KiB/sess', 'srv rss KiB/sess', 'join KiB/sess'],
      ...results.map((r) => [String(r.devices), String(r.policyRules), String(r.peers.mean), (r.joinMs / 1000).toFixed(2), r.joinsPerSecond.toFixed(1),
        (r.convergenceAfterJoinMs / 1000).toFixed(2), (r.server.cpuMsJoinAndConverge / 1000).toFixed(1), ((r.driverCpuMs + r.workersCpuMs) / 1000).toFixed(1),
        kib(r.server.heapPerSessionBytes), kib(r.server.rssPerSessionBytes), kib(r.bytesPerSessionJoin)]),
    ]));
    log('');
    log(formatTable([
      ['N', 'change', 'affected', 'p50 ms', 'p99 ms', 'max ms', 'p99 of rounds ms', 'timeouts', 'wrong', 'srv apply ms', 'srv CPU ms', 'wrk CPU ms', 'wrk/srv', 'B/affected', 'B/session'],
      ...results.flatMap((r) => r.changes.map((c) => [String(r.devices), c.kind, String(c.affected), c.latency.p50.toFixed(1), c.latency.p99.toFixed(1), c.latency.max.toFixed(1),
        c.p99Rounds.map((x) => x.toFixed(0)).join(' '),
        // Timeouts and wrong devices of every round: a fault in any round is a fault.
        String(r.changeRounds.filter((x) => x.kind === c.kind).reduce((a, x) => a + x.timeouts, 0)),
        String(r.changeRounds.filter((x) => x.kind === c.kind).reduce((a, x) => a + x.wrong, 0)),
        c.serverApplyMs.toFixed(1), c.serverCpuMs.toFixed(0), c.workersCpuMs.toFixed(0), cpuRatio(c.workersCpuMs, c.serverCpuMs), String(c.bytesPerAffected), String(c.bytesPerSession)])),
    ]));
    log('');
    log('Server resident set, MiB (sampled every 500 ms, no collection forced; the last column after forced full collections and a trim), and CPU, s:');
    log(formatTable([
      ['N', 'before devices', 'peak join', 'joined', 'settled', 'peak changes', 'after forced GC', 'join: srv CPU', 'workers CPU', 'workers/srv'],
      ...results.map((r) => {
        const workersJoin = r.workersJoinCpuMs / 1000, serverJoin = r.server.cpuMsJoinAndConverge / 1000;
        return [String(r.devices), mib(r.server.rss.beforeDevices), mib(r.server.rss.peakJoin), mib(r.server.rss.joined), mib(r.server.rss.settled), mib(r.server.rss.peakChanges), mib(r.server.after.rss),
          serverJoin.toFixed(1), workersJoin.toFixed(1), (workersJoin / serverJoin).toFixed(2)];
      }),
    ]));
    if (results.some((r) => r.restarts.length)) {
      log('');
      log('Restart (every device connected; the server stopped and started again on the same database):');
      log(formatTable([
        ['N', 'signal', 'stop s', 'start-up s', 'in startServer s', 'back', 'last back s', 'signal to last back s', 'srv CPU s', 'workers CPU s', 'peak RSS MiB', 'retried dials', 'wrong', 'not dialled'],
        ...results.flatMap((r) => r.restarts.map((x) => [String(r.devices), x.signal, (x.stopMs / 1000).toFixed(2), (x.startupMs / 1000).toFixed(2), (x.startServerMs / 1000).toFixed(2),
          `${x.back}/${x.devices}`, (x.backMs / 1000).toFixed(2), (x.totalMs / 1000).toFixed(2), (x.serverCpuMs / 1000).toFixed(1), (x.workersCpuMs / 1000).toFixed(1), mib(x.peakRss), String(x.retries), String(x.wrong.length), String(x.unreached.length)])),
      ]));
    }
    for (const r of results) {
      log(`N=${r.devices}: server heap ${mib(r.server.before.heapUsed)} -> ${mib(r.server.after.heapUsed)} MiB, rss ${mib(r.server.before.rss)} -> ${mib(r.server.after.rss)} MiB; ` +
        `driver CPU ${(r.driverCpuMs / 1000).toFixed(1)} s, workers CPU ${(r.workersCpuMs / 1000).toFixed(1)} s (${r.workers} workers); server event-loop delay p99 ${round2(r.server.after.loopDelayP99Ms)} ms, max ${round2(r.server.after.loopDelayMaxMs)} ms; ` +
        `${r.joinRetries} join retries; server ${JSON.stringify(r.server.stats)}`);
    }
  } else log('(no size completed)');
  log('BENCH_JSON ' + JSON.stringify({ machine, options: opts, idle, sizes: results, skipped, failed }));
  if (failed.length || results.some((r) => r.convergenceWrong.length || r.changeRounds.some((c) => c.wrong || c.timeouts) || r.restarts.some((x) => x.wrong.length || x.unreached.length))) process.exitCode = 1;
}
