/**
 * The two servers `npm run bench:headscale` measures, behind one interface: Headway forked as its own process
 * (bench-headscale-server.ts) and the real headscale binary, each over a fresh SQLite database with the same
 * policy file, its embedded DERP relay on, logging at warn, and everything else at its defaults. Pre-auth keys,
 * node ids and renames go through each server's REST API (`/api/v1`, the same paths on both) with an API key each
 * server made itself (Headway's key store in its process, `headscale apikeys create`). ProcSampler reads a server
 * process's resident memory and CPU time from /proc.
 */
import { execFileSync, fork, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { getHeapStatistics } from 'node:v8';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { serverNodeFlags } from '@headway/core';
import { findHeadscale, headscaleHome, HeadscaleServer, HEADSCALE_VERSION } from '@headway/integration';
import { BENCH_DNS, GROUP_TAGS, parseStatTicks, parseStatusRss, type ServerName } from './bench-headscale-parts.js';
import type { HeadwayChildMessage } from './bench-headscale-server.js';

/** START_TIMEOUT_MS bounds Headway's start (headscale's is HeadscaleServer.start's, the same 30 s). */
const START_TIMEOUT_MS = 30_000;
/** SAMPLE_INTERVAL_MS is how often ProcSampler reads resident memory. */
export const SAMPLE_INTERVAL_MS = 500;

/** Target is one running server as the benchmark drives it. */
export interface Target {
  name: ServerName;
  /** pid of the server process itself (the one sampled). */
  pid: number;
  url: string;
  /** apiKey authorizes the REST API calls (see admin). */
  apiKey: string;
  /** logSummary: what the server logged (warnings and errors) when its log is not already on stderr, or ''. */
  logSummary(): string;
  stop(): Promise<void>;
}

/** ProcSampler samples a process's VmRSS every SAMPLE_INTERVAL_MS and keeps the peak since the last reset. */
export class ProcSampler {
  peak = 0;
  private readonly timer: NodeJS.Timeout;
  private static clockTicks: number | undefined;
  constructor(readonly pid: number) {
    this.timer = setInterval(() => { try { this.rss(); } catch { /* the process is gone: stop() follows */ } }, SAMPLE_INTERVAL_MS);
  }
  /** rss reads the current VmRSS (and counts it towards the peak). */
  rss(): number {
    const { rss } = parseStatusRss(readFileSync(`/proc/${this.pid}/status`, 'utf8'));
    this.peak = Math.max(this.peak, rss);
    return rss;
  }
  /** hwm is the kernel's peak RSS of the process (VmHWM). */
  hwm(): number {
    return parseStatusRss(readFileSync(`/proc/${this.pid}/status`, 'utf8')).hwm;
  }
  /** resetPeak starts a new peak from the current reading. */
  resetPeak(): void {
    this.peak = 0;
    this.rss();
  }
  /** cpuMs is the process's user + system CPU time so far. */
  cpuMs(): number {
    ProcSampler.clockTicks ??= clockTicks();
    return (parseStatTicks(readFileSync(`/proc/${this.pid}/stat`, 'utf8')) * 1000) / ProcSampler.clockTicks;
  }
  stop(): void {
    clearInterval(this.timer);
  }
}

/** clockTicks is the kernel's USER_HZ (the unit of /proc/<pid>/stat times): 100 on Linux unless getconf says otherwise. */
function clockTicks(): number {
  try {
    const n = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim());
    return Number.isInteger(n) && n > 0 ? n : 100;
  } catch {
    return 100;
  }
}

/** startHeadway forks bench-headscale-server.js with the policy file and waits until it is ready. */
export async function startHeadway(policyFile: string): Promise<Target> {
  const proc = fork(new URL('./bench-headscale-server.js', import.meta.url), [], {
    execArgv: serverNodeFlags({ memory: { heap_limit_mb: 0 } }, [], getHeapStatistics().heap_size_limit / 2 ** 20), stdio: ['ignore', 'inherit', 'inherit', 'ipc'], env: { ...process.env, BENCH_POLICY_FILE: policyFile },
  });
  const ready = await new Promise<{ url: string; apiKey: string }>((resolve, reject) => {
    const timer = setTimeout(() => { proc.kill('SIGKILL'); reject(new Error(`Headway did not start within ${START_TIMEOUT_MS} ms`)); }, START_TIMEOUT_MS);
    const done = (): void => { clearTimeout(timer); proc.off('message', onMessage); proc.off('exit', onExit); };
    const onMessage = (m: HeadwayChildMessage): void => {
      done();
      if (m.type === 'ready') resolve(m);
      else reject(new Error(`Headway failed to start: ${m.error}`));
    };
    const onExit = (code: number | null): void => { done(); reject(new Error(`Headway exited with code ${code} before it was ready`)); };
    proc.on('message', onMessage);
    proc.on('exit', onExit);
  });
  return {
    name: 'headway', pid: proc.pid!, url: ready.url, apiKey: ready.apiKey,
    // The child's log lines go to stderr as they come.
    logSummary: () => '',
    stop: () => stopChild(proc, () => { if (proc.connected) proc.disconnect(); }),
  };
}

/** stopChild asks a child to end (`ask`), and kills it if it has not exited 15 s later. */
async function stopChild(proc: ChildProcess, ask: () => void): Promise<void> {
  if (proc.exitCode !== null || proc.signalCode !== null) return;
  const exited = new Promise<void>((r) => proc.once('exit', () => r()));
  ask();
  const timer = setTimeout(() => proc.kill('SIGKILL'), 15_000);
  await exited;
  clearTimeout(timer);
}

/** ensureHeadscale returns the headscale binary, building it with .ci/install-headscale.sh when it is missing. */
export function ensureHeadscale(log: (line: string) => void): string {
  const found = findHeadscale();
  if (found) return found;
  const script = fileURLToPath(new URL('../../../../.ci/install-headscale.sh', import.meta.url));
  log(`no headscale ${HEADSCALE_VERSION} under ${headscaleHome()}: building it with ${script} (this takes minutes)`);
  const r = spawnSync('bash', [script], { stdio: ['ignore', 'inherit', 'inherit'] });
  const built = findHeadscale();
  if (r.status !== 0 || !built) throw new Error(`${script} failed (exit ${r.status}); headscale ${HEADSCALE_VERSION} is needed`);
  return built;
}

/** startHeadscale runs `headscale serve` on loopback with the policy file and makes an API key with its CLI. */
export async function startHeadscale(bin: string, policyFile: string): Promise<Target> {
  const dir = mkdtempSync(join(tmpdir(), 'headscale-bench-'));
  let hs: HeadscaleServer | undefined;
  const stop = async (): Promise<void> => {
    await hs?.stop();
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    hs = await HeadscaleServer.start(bin, dir, { policyFile, logLevel: 'warn', dns: BENCH_DNS });
    const apiKey = JSON.parse(await hs.cli(['apikeys', 'create', '-o', 'json'], 60_000)) as string;
    const logPath = hs.logPath;
    return {
      name: 'headscale', pid: hs.pid!, url: hs.url, apiKey,
      logSummary: () => {
        const lines = readFileSync(logPath, 'utf8').split('\n').filter(Boolean);
        return lines.length ? `${lines.length} lines logged at warn or above; the last: ${lines.slice(-3).join(' | ')}` : '';
      },
      stop,
    };
  } catch (err) {
    await stop();
    throw err;
  }
}

/** admin calls a server's REST API with its API key and returns the JSON answer; anything but 200 is an error. */
export async function admin(target: Target, method: 'GET' | 'POST', path: string, body?: unknown): Promise<unknown> {
  const res = await fetch(target.url + path, {
    method, body: body === undefined ? undefined : JSON.stringify(body),
    headers: { authorization: `Bearer ${target.apiKey}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    signal: AbortSignal.timeout(60_000),
  });
  const text = await res.text();
  if (res.status !== 200) throw new Error(`${target.name} ${method} ${path}: ${res.status} ${text.slice(0, 300)}`);
  return text ? JSON.parse(text) : undefined;
}

/** KEY_LIFETIME_MS: how long the pre-auth keys stay valid (headscale's API takes a key without an expiration as expired). */
const KEY_LIFETIME_MS = 24 * 3600_000;

/** makeKeys makes one reusable pre-auth key per group, keys[g] carrying GROUP_TAGS[g] and no user. */
export async function makeKeys(target: Target): Promise<string[]> {
  const keys: string[] = [];
  const expiration = new Date(Date.now() + KEY_LIFETIME_MS).toISOString();
  for (const tag of GROUP_TAGS) {
    const answer = await admin(target, 'POST', '/api/v1/preauthkey', { reusable: true, aclTags: [tag], expiration }) as { preAuthKey: { key: string } };
    keys.push(answer.preAuthKey.key);
  }
  return keys;
}

/** nodeIdOf is the server's id of the node with this node key (`nodekey:<hex>`), or undefined. */
export async function nodeIdOf(target: Target, nodeKey: string): Promise<number | undefined> {
  const { nodes } = (await admin(target, 'GET', '/api/v1/node')) as { nodes?: Array<{ id: string | number; nodeKey: string }> };
  const id = nodes?.find((n) => n.nodeKey === nodeKey)?.id;
  return id === undefined ? undefined : Number(id);
}

/** rename gives a node a new name through the REST API. */
export async function rename(target: Target, nodeId: number, name: string): Promise<void> {
  await admin(target, 'POST', `/api/v1/node/${nodeId}/rename/${encodeURIComponent(name)}`);
}
