/**
 * bench-restart measures what a tailnet sees when its server restarts (an upgrade, a crash): with every device
 * connected, the server is stopped (SIGTERM: a graceful close; SIGKILL: no goodbye) and started again on the same
 * database and port; every device then dials again at once, as tailscaled does when its control connection drops,
 * and the time until each holds its full, correct netmap again is taken, with the server's start-up (Node, modules,
 * the stored tailnet loaded and its policy compiled), its CPU and peak resident set over the burst.
 * The devices dial once the new server listens (tailscaled retries on a back-off, so its first dials after a short
 * outage land about then); the outage itself is reported apart.
 */
import type { ChildProcess } from 'node:child_process';

/** RestartSignal is how the server is stopped: SIGTERM closes it gracefully, SIGKILL kills it. */
export type RestartSignal = 'SIGTERM' | 'SIGKILL';

/** RestartResult is one measured restart of an N-device server. */
export interface RestartResult {
  signal: RestartSignal;
  /** stopMs: from the signal until the old process exited. */
  stopMs: number;
  /** startupMs: the new process's start until it listened; startServerMs: the part in startServer. */
  startupMs: number;
  startServerMs: number;
  /** backMs: from the new server listening until the last device that came back held its full, correct netmap again. */
  backMs: number;
  /** totalMs: from the signal until the last device was back (stopMs + fork + startupMs + backMs). */
  totalMs: number;
  /** back of devices: how many held their full, correct netmap again within the budget. */
  back: number;
  devices: number;
  /** unreached: devices whose dial still failed when the budget ran out (with the last error). */
  unreached: string[];
  serverCpuMs: number;
  workersCpuMs: number;
  /** peakRss: the new server's largest resident set (every 500 ms) from its start until every device was back. */
  peakRss: number;
  retries: number;
  wrong: string[];
}

/** Requester is a benchmark child answering commands over IPC. */
export interface Requester { request<T>(cmd: { op: string; [k: string]: unknown }, timeoutMs?: number): Promise<T> }
/** ServerChild is the server's child process. */
export interface ServerChild extends Requester { proc: ChildProcess }

/** RestartDeps is what the driver lends a restart: its children and how to start the server again. */
export interface RestartDeps<S extends ServerChild> {
  server: S;
  startAgain(): Promise<{ server: S; ready: { startupMs: number; startServerMs: number } }>;
  workers: Requester[];
  /** concurrency: dials in flight per worker while the devices come back. */
  concurrency: number;
  timeoutMs: number;
  /** devices: how many devices the workers hold in all. */
  devices: number;
}

const now = (): number => performance.timeOrigin + performance.now();

/** measureRestart stops the server with `signal`, starts it again and waits for every device; returns the figures and the new server. */
export async function measureRestart<S extends ServerChild>(signal: RestartSignal, deps: RestartDeps<S>): Promise<{ result: RestartResult; server: S }> {
  const workersCpu = async (): Promise<number> =>
    (await Promise.all(deps.workers.map((c) => c.request<{ cpuMs: number }>({ op: 'stats' })))).reduce((a, w) => a + w.cpuMs, 0);
  const wcpu0 = await workersCpu();
  const t0 = now();
  const exited = new Promise<void>((resolve) => deps.server.proc.once('exit', () => resolve()));
  deps.server.proc.kill(signal);
  await exited;
  const stopMs = now() - t0;
  const { server, ready } = await deps.startAgain();
  const tReady = now();
  const cpu0 = await server.request<number>({ op: 'cpu' });
  const reconnects = await Promise.all(deps.workers.map((c) => c.request<{ retries: number; unreached: string[] }>(
    { op: 'reconnect', concurrency: deps.concurrency, budgetMs: deps.timeoutMs }, deps.timeoutMs + 60_000)));
  const conv = await Promise.all(deps.workers.map((c) => c.request<{ lastAt: number; wrong: string[]; back: number }>(
    { op: 'converge', timeoutMs: deps.timeoutMs }, deps.timeoutMs + 60_000)));
  const backAt = Math.max(tReady, ...conv.map((c) => c.lastAt));
  const cpu1 = await server.request<number>({ op: 'cpu' });
  const rss = await server.request<{ live: number; peak: number }>({ op: 'rss' });
  const wcpu1 = await workersCpu();
  const result: RestartResult = {
    signal, stopMs: Math.round(stopMs), startupMs: ready.startupMs, startServerMs: ready.startServerMs,
    backMs: Math.round(backAt - tReady), totalMs: Math.round(backAt - t0),
    back: conv.reduce((a, c) => a + c.back, 0), devices: deps.devices, unreached: reconnects.flatMap((r) => r.unreached),
    serverCpuMs: Math.round(cpu1 - cpu0), workersCpuMs: Math.round(wcpu1 - wcpu0), peakRss: rss.peak,
    retries: reconnects.reduce((a, r) => a + r.retries, 0), wrong: conv.flatMap((c) => c.wrong),
  };
  return { result, server };
}

/** parseRestarts reads --restart: a comma-separated list of term and kill, or none. */
export function parseRestarts(value: string): RestartSignal[] {
  if (value === 'none' || value === '') return [];
  return value.split(',').map((v) => {
    const s = v.trim().toLowerCase();
    if (s === 'term' || s === 'sigterm') return 'SIGTERM';
    if (s === 'kill' || s === 'sigkill') return 'SIGKILL';
    throw new Error(`--restart: "${v}" is not term, kill or none`);
  });
}
