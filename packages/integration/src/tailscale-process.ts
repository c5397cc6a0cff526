/**
 * Process plumbing of the Tailscale harness: the daemon's isolated environment, running CLI
 * commands with a deadline, and the registry that kills every daemon a test process leaves behind.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import type { CommandResult } from './tailscale-types.js';

/**
 * tailscaledEnvironment is the daemon's environment: the parent's, minus any
 * TS_* settings and proxy variables that could redirect or alter it, plus
 * knobs that keep it on loopback and quiet:
 * - TS_NO_LOGS_NO_SUPPORT=true: no logtail uploads to log.tailscale.com (also passed as --no-logs-no-support).
 * - TS_LOG_TARGET=http://127.0.0.1:9: should any log upload still happen, it goes to the discard port on loopback.
 * - TS_LOGS_DIR=<dir>/logs: logpolicy's own files (log config, buffers) stay inside the device's temp dir.
 * - TS_PANIC_IF_HIT_MAIN_CONTROL=1: crash instead of ever dialing controlplane.tailscale.com (e.g. a missing --login-server).
 * - TS_DISABLE_PORTMAPPER=1, TS_DISABLE_UPNP=1: no UPnP/NAT-PMP/PCP probes to the LAN gateway during netcheck.
 * - TS_DEBUG_USE_DERP_HTTP=1: DERP over plain HTTP (on DERPNode.DERPPort) so the test server needs no TLS.
 * - TS_ASSUME_NETWORK_UP_FOR_TEST=1: keep working on hosts whose only interface is loopback (sandboxed CI).
 * - TS_DEBUG_DISABLE_PORTLIST=1: skip the periodic /proc scan of listening ports (CPU on shared runners).
 * Not controllable from the environment: captive-portal probes (which include
 * controlplane/login.tailscale.com) run during a netcheck whose STUN probes
 * fail; the control server must send the node attribute
 * "disable-captive-portal-detection" to turn them off. STUN/DERP probing only
 * targets the DERP map the control server sends.
 */
export function tailscaledEnvironment(dir: string, overrides: Record<string, string> = {}): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [key, value] of Object.entries(process.env)) {
    if (value === undefined) continue;
    if (key.startsWith('TS_')) continue;
    if (/^(https?|all|no)_proxy$/i.test(key)) continue;
    env[key] = value;
  }
  Object.assign(env, {
    HOME: dir,
    TS_NO_LOGS_NO_SUPPORT: 'true',
    TS_LOG_TARGET: 'http://127.0.0.1:9',
    TS_LOGS_DIR: join(dir, 'logs'),
    TS_PANIC_IF_HIT_MAIN_CONTROL: '1',
    TS_DISABLE_PORTMAPPER: '1',
    TS_DISABLE_UPNP: '1',
    TS_DEBUG_USE_DERP_HTTP: '1',
    TS_ASSUME_NETWORK_UP_FOR_TEST: '1',
    TS_DEBUG_DISABLE_PORTLIST: '1',
  });
  return Object.assign(env, overrides);
}

/** RunningCommand is a started CLI process and the result it will settle with. */
export interface RunningCommand {
  child: ChildProcess;
  result: Promise<CommandResult>;
}

/** startCommand spawns a process collecting its output; after timeoutMs it is SIGKILLed and timedOut is set. */
export function startCommand(file: string, args: string[], env: Record<string, string>, timeoutMs: number): RunningCommand {
  const child = spawn(file, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  let timedOut = false;
  child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
    stdout += chunk;
  });
  child.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
    stderr += chunk;
  });
  const timer = setTimeout(() => {
    timedOut = true;
    child.kill('SIGKILL');
  }, timeoutMs);
  const result = new Promise<CommandResult>((resolve, reject) => {
    child.once('error', (err) => {
      clearTimeout(timer);
      reject(new Error(`cannot run ${file}: ${err.message}`));
    });
    child.once('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr, timedOut });
    });
  });
  return { child, result };
}

/** describeFailure says how a command failed, with the end of what it printed. */
export function describeFailure(what: string, r: CommandResult): string {
  const how = r.timedOut ? 'timed out' : r.signal !== null ? `was killed by ${r.signal}` : `exited ${r.code}`;
  const output = (r.stderr.trim() || r.stdout.trim()).slice(-2000);
  return `${what} ${how}${output ? `: ${output}` : ''}`;
}

/** parseJson parses a command's JSON output, naming the command when it is not JSON. */
export function parseJson<T>(what: string, text: string): T {
  try {
    return JSON.parse(text) as T;
  } catch (err) {
    throw new Error(`${what} printed invalid JSON (${(err as Error).message}): ${text.slice(0, 500)}`);
  }
}

export function processExited(child: ChildProcess): boolean {
  return child.exitCode !== null || child.signalCode !== null;
}

/** waitForExit resolves true once the child exits, or false after timeoutMs. */
export function waitForExit(child: ChildProcess, timeoutMs: number): Promise<boolean> {
  if (processExited(child)) return Promise.resolve(true);
  return new Promise((resolve) => {
    const timer = setTimeout(() => {
      child.off('exit', onExit);
      resolve(false);
    }, timeoutMs);
    const onExit = (): void => {
      clearTimeout(timer);
      resolve(true);
    };
    child.once('exit', onExit);
  });
}

export const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** LiveDevice is what the exit hook needs to clean up after a device: its daemon and its temp dir. */
export interface LiveDevice {
  daemon: ChildProcess;
  dir: string;
}

// liveDevices are devices not yet stopped; if the test process exits without
// stopping them (a crash, a forgotten teardown), the exit hook kills their
// daemons so no tailscaled outlives the test run on a shared machine.
const liveDevices = new Set<LiveDevice>();
let exitHookInstalled = false;

function killLiveDevicesAtExit(): void {
  for (const live of liveDevices) {
    killGroup(live.daemon);
    rmSync(live.dir, { recursive: true, force: true });
  }
}

/** trackLiveDevice registers a started device with the exit hook (installed on first use). */
export function trackLiveDevice(live: LiveDevice): void {
  liveDevices.add(live);
  if (!exitHookInstalled) {
    exitHookInstalled = true;
    process.once('exit', killLiveDevicesAtExit);
  }
}

/** untrackLiveDevice forgets a device its own stop() has cleaned up. */
export function untrackLiveDevice(live: LiveDevice): void {
  liveDevices.delete(live);
}

/** killGroup SIGKILLs a daemon's whole process group (it and the helpers it started). */
export function killGroup(daemon: ChildProcess): void {
  if (daemon.pid === undefined) return;
  try { process.kill(-daemon.pid, 'SIGKILL'); } catch { daemon.kill('SIGKILL'); }
}
