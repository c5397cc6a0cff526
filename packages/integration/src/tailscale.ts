/**
 * Harness that drives the real Tailscale client (tailscaled + tailscale CLI)
 * built by `.ci/install-tailscale.sh`, for interop tests against Headway.
 *
 * Every daemon runs in userspace-networking mode with its own temp directory
 * (state, unix socket, log file) and an environment that keeps it off the
 * outside network; see {@link tailscaledEnvironment}.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, existsSync, mkdirSync, mkdtempSync, openSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** TailscaleBinaries is one installed client version: `<home>/<version>/{tailscale,tailscaled}`. */
export interface TailscaleBinaries {
  /** version is the install directory name, e.g. "v1.102.5". */
  version: string;
  tailscale: string;
  tailscaled: string;
}

/** CommandResult is the outcome of one finished (or timed-out) CLI run. */
export interface CommandResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  timedOut: boolean;
}

/** TailscalePeerStatus is the subset of ipnstate.PeerStatus the tests look at; the rest is kept. */
export interface TailscalePeerStatus {
  ID?: string;
  PublicKey?: string;
  HostName?: string;
  DNSName?: string;
  OS?: string;
  UserID?: number;
  TailscaleIPs?: string[] | null;
  AllowedIPs?: string[] | null;
  PrimaryRoutes?: string[] | null;
  Tags?: string[] | null;
  Online?: boolean;
  ExitNode?: boolean;
  ExitNodeOption?: boolean;
  Relay?: string;
  CurAddr?: string;
  [field: string]: unknown;
}

/** TailscaleStatus is parsed `tailscale status --json` (ipnstate.Status); unknown fields are kept. */
export interface TailscaleStatus {
  Version?: string;
  BackendState: string;
  AuthURL?: string;
  TailscaleIPs?: string[] | null;
  Self?: TailscalePeerStatus;
  Peer?: Record<string, TailscalePeerStatus> | null;
  Health?: string[] | null;
  MagicDNSSuffix?: string;
  CurrentTailnet?: { Name?: string; MagicDNSSuffix?: string; MagicDNSEnabled?: boolean } | null;
  User?: Record<string, unknown> | null;
  [field: string]: unknown;
}

/** NetworkMapJson is parsed `tailscale debug netmap` (netmap.NetworkMap as JSON); unknown fields are kept. */
export interface NetworkMapJson {
  SelfNode?: Record<string, unknown>;
  Peers?: Array<Record<string, unknown>> | null;
  DERPMap?: Record<string, unknown> | null;
  PacketFilter?: unknown;
  Domain?: string;
  [field: string]: unknown;
}

/** StartOptions configures {@link TailscaleDevice.start}. */
export interface StartOptions {
  /** name labels the temp directory and error messages; letters, digits, '-' and '_' only. */
  name: string;
  /** version selects an installed client ("v1.80.3" or "1.80.3"); default: the newest installed. */
  version?: string;
  /** env adds or overrides daemon environment variables (after the network-isolation knobs). */
  env?: Record<string, string>;
  /** extraDaemonArgs are appended to the tailscaled command line. */
  extraDaemonArgs?: string[];
  /** startTimeoutMs bounds how long to wait for the LocalAPI socket to answer; default 20 s. */
  startTimeoutMs?: number;
}

/** UpOptions configures {@link TailscaleDevice.up}. */
export interface UpOptions {
  /** loginServer is the control URL, e.g. "http://127.0.0.1:8080" (HTTP on loopback: no HTTPS fallback). */
  loginServer: string;
  /** authKey logs in without interaction; without it `up` returns the interactive AuthURL. */
  authKey?: string;
  hostname: string;
  advertiseRoutes?: string[];
  advertiseExitNode?: boolean;
  acceptRoutes?: boolean;
  /** advertiseTags, e.g. ["tag:server"]. */
  advertiseTags?: string[];
  /** reset passes --reset so flags not given revert to defaults (needed for a second `up` with other flags). */
  reset?: boolean;
  extraArgs?: string[];
  /** timeoutMs bounds the whole call: authkey login until Running, or interactive until an AuthURL shows; default 30 s. */
  timeoutMs?: number;
}

/** UpResult is what `tailscale up` produced; authUrl is set for interactive logins. */
export interface UpResult {
  authUrl?: string;
  stdout: string;
  stderr: string;
  /** exited settles when an interactive `tailscale up` (still waiting after printing its AuthURL) ends, e.g. after a rejected login. */
  exited?: Promise<CommandResult>;
}

/** PingOptions configures {@link TailscaleDevice.ping}. */
export interface PingOptions {
  /** tsmp pings through WireGuard at the TSMP layer instead of disco. */
  tsmp?: boolean;
  /** icmp pings with ICMP through WireGuard. */
  icmp?: boolean;
  /** count is the maximum number of pings (`-c`); default 1. */
  count?: number;
  /** timeoutMs is the per-ping timeout; default 5 s. */
  timeoutMs?: number;
  /** untilDirect keeps pinging until a direct path is found (the CLI's default); default false. */
  untilDirect?: boolean;
}

/** PingResult is a successful `tailscale ping`; via is "DERP(<region>)" or the direct ip:port of the last pong. */
export interface PingResult {
  output: string;
  via?: string;
}

/** TapLike is the part of a tap test that {@link requireTailscale} needs (tap's `t.skip` defines a skipped subtest). */
export interface TapLike {
  skip(name: string, cb: () => void): unknown;
  fail(message: string): unknown;
  comment(...args: unknown[]): unknown;
}

const VERSION_DIR = /^v?\d+\.\d+\.\d+$/;
const SAFE_NAME = /^[A-Za-z0-9_-]{1,32}$/;
const DEFAULT_CLI_TIMEOUT_MS = 15_000;

/** repoRoot is the npm workspace root: the nearest ancestor whose package.json declares workspaces. */
export function repoRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    const pkg = join(dir, 'package.json');
    if (existsSync(pkg)) {
      try {
        const parsed: unknown = JSON.parse(readFileSync(pkg, 'utf8'));
        if (typeof parsed === 'object' && parsed !== null && 'workspaces' in parsed) return dir;
      } catch {
        // An unreadable package.json is not the root; keep walking up.
      }
    }
    const parent = dirname(dir);
    if (parent === dir) throw new Error(`repoRoot: no package.json with "workspaces" above ${fileURLToPath(import.meta.url)}`);
    dir = parent;
  }
}

/** tailscaleHome is where install-tailscale.sh puts versions: $TAILSCALE_HOME or <repo>/.ci-work/tailscale. */
export function tailscaleHome(): string {
  const fromEnv = process.env.TAILSCALE_HOME;
  return fromEnv !== undefined && fromEnv !== '' ? fromEnv : join(repoRoot(), '.ci-work', 'tailscale');
}

function versionParts(version: string): number[] {
  return version.replace(/^v/, '').split('.').map((p) => Number(p));
}

function compareVersionsDescending(a: string, b: string): number {
  const pa = versionParts(a);
  const pb = versionParts(b);
  for (let i = 0; i < 3; i++) {
    const diff = (pb[i] ?? 0) - (pa[i] ?? 0);
    if (diff !== 0) return diff;
  }
  return 0;
}

function isExecutableFile(path: string): boolean {
  try {
    const st = statSync(path);
    return st.isFile() && (st.mode & 0o111) !== 0;
  } catch {
    return false;
  }
}

/**
 * findTailscaleBinaries lists installed versions, newest first. Only complete
 * installs count (both binaries present and executable), so a half-finished
 * build directory is never picked; empty when nothing is installed.
 */
export function findTailscaleBinaries(home: string = tailscaleHome()): TailscaleBinaries[] {
  let entries: string[];
  try {
    entries = readdirSync(home);
  } catch {
    return [];
  }
  const found: TailscaleBinaries[] = [];
  for (const entry of entries) {
    if (!VERSION_DIR.test(entry)) continue;
    const tailscale = join(home, entry, 'tailscale');
    const tailscaled = join(home, entry, 'tailscaled');
    if (isExecutableFile(tailscale) && isExecutableFile(tailscaled)) found.push({ version: entry, tailscale, tailscaled });
  }
  return found.sort((a, b) => compareVersionsDescending(a.version, b.version));
}

/**
 * cleanupStack returns a list whose functions run in reverse order when the test
 * ends (devices before the server that serves them); a failing step is reported
 * as a comment and does not stop the others.
 */
export function cleanupStack(t: { teardown(fn: () => Promise<void>): void; comment(msg: string): void }): Array<() => Promise<void> | void> {
  const cleanups: Array<() => Promise<void> | void> = [];
  t.teardown(async () => {
    for (const fn of cleanups.reverse()) {
      try {
        await fn();
      } catch (err) {
        t.comment(`cleanup: ${(err as Error).message}`);
      }
    }
  });
  return cleanups;
}

/**
 * requireTailscale returns the installed clients, or an empty list after
 * skipping the test (locally) or failing it (when CI=true, where a missing
 * client means the install step broke and must not pass silently).
 */
export function requireTailscale(t: TapLike): TailscaleBinaries[] {
  const found = findTailscaleBinaries();
  if (found.length > 0) return found;
  const reason = `no Tailscale client installed under ${tailscaleHome()}; run .ci/install-tailscale.sh`;
  if (process.env.CI === 'true') {
    t.fail(reason);
  } else {
    t.comment(reason);
    t.skip(reason, () => undefined);
  }
  return [];
}

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

interface RunningCommand {
  child: ChildProcess;
  result: Promise<CommandResult>;
}

/** startCommand spawns a process collecting its output; after timeoutMs it is SIGKILLed and timedOut is set. */
function startCommand(file: string, args: string[], env: Record<string, string>, timeoutMs: number): RunningCommand {
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

function describeFailure(what: string, r: CommandResult): string {
  const how = r.timedOut ? 'timed out' : r.signal !== null ? `was killed by ${r.signal}` : `exited ${r.code}`;
  const output = (r.stderr.trim() || r.stdout.trim()).slice(-2000);
  return `${what} ${how}${output ? `: ${output}` : ''}`;
}

function parseJson<T>(what: string, text: string): T {
  try {
    return JSON.parse(text) as T;
  } catch (err) {
    throw new Error(`${what} printed invalid JSON (${(err as Error).message}): ${text.slice(0, 500)}`);
  }
}

function processExited(child: ChildProcess): boolean {
  return child.exitCode !== null || child.signalCode !== null;
}

function waitForExit(child: ChildProcess, timeoutMs: number): Promise<boolean> {
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

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

// liveDevices are devices not yet stopped; if the test process exits without
// stopping them (a crash, a forgotten teardown), the exit hook kills their
// daemons so no tailscaled outlives the test run on a shared machine.
const liveDevices = new Set<{ daemon: ChildProcess; dir: string }>();
let exitHookInstalled = false;

function killLiveDevicesAtExit(): void {
  for (const live of liveDevices) {
    killGroup(live.daemon);
    rmSync(live.dir, { recursive: true, force: true });
  }
}

/** killGroup SIGKILLs a daemon's whole process group (it and the helpers it started). */
function killGroup(daemon: ChildProcess): void {
  if (daemon.pid === undefined) return;
  try { process.kill(-daemon.pid, 'SIGKILL'); } catch { daemon.kill('SIGKILL'); }
}

// AUTH_URL_LINE finds the URL the CLI prints after "To authenticate, visit:".
const AUTH_URL_LINE = /To authenticate, visit:\s+(\S+)/;

/**
 * TailscaleDevice is one running tailscaled with its own state dir, LocalAPI
 * socket and log file, all inside {@link dir}; {@link stop} removes them.
 */
export class TailscaleDevice {
  readonly name: string;
  readonly binaries: TailscaleBinaries;
  /** dir is the device's private temp directory (state, socket, log). */
  readonly dir: string;
  readonly stateDir: string;
  readonly socketPath: string;
  /** logPath holds tailscaled's stdout+stderr; read it when a test fails. */
  readonly logPath: string;
  readonly env: Record<string, string>;
  readonly #daemon: ChildProcess;
  readonly #cliChildren = new Set<ChildProcess>();
  /** #authUrls are the login URLs up() already returned, so a stale one in `tailscale status` is not taken for a new one. */
  readonly #authUrls = new Set<string>();
  readonly #live: { daemon: ChildProcess; dir: string };
  #stopped = false;

  private constructor(name: string, binaries: TailscaleBinaries, dir: string, env: Record<string, string>, daemon: ChildProcess) {
    this.name = name;
    this.binaries = binaries;
    this.dir = dir;
    this.stateDir = join(dir, 'state');
    this.socketPath = join(dir, 'tailscaled.sock');
    this.logPath = join(dir, 'tailscaled.log');
    this.env = env;
    this.#daemon = daemon;
    this.#live = { daemon, dir };
  }

  /**
   * start launches tailscaled and resolves once its LocalAPI answers
   * `status --json`; on failure the daemon is killed, the temp dir removed,
   * and the error carries the end of the daemon log.
   */
  static async start(options: StartOptions): Promise<TailscaleDevice> {
    if (!SAFE_NAME.test(options.name)) {
      throw new Error(`TailscaleDevice.start: name ${JSON.stringify(options.name)} must be 1-32 letters, digits, '-' or '_'`);
    }
    const installed = findTailscaleBinaries();
    if (installed.length === 0) throw new Error(`TailscaleDevice.start: no Tailscale client installed under ${tailscaleHome()}`);
    let binaries = installed[0]!;
    if (options.version !== undefined) {
      const want = options.version.replace(/^v/, '');
      const match = installed.find((b) => b.version.replace(/^v/, '') === want);
      if (match === undefined) {
        throw new Error(`TailscaleDevice.start: version ${options.version} is not installed (have ${installed.map((b) => b.version).join(', ')})`);
      }
      binaries = match;
    }

    const dir = mkdtempSync(join(tmpdir(), `hw-ts-${options.name}-`));
    const env = tailscaledEnvironment(dir, options.env);
    mkdirSync(join(dir, 'logs'));
    const stateDir = join(dir, 'state');
    const socketPath = join(dir, 'tailscaled.sock');
    const logFd = openSync(join(dir, 'tailscaled.log'), 'a');
    const args = [
      '--tun=userspace-networking',
      `--statedir=${stateDir}`,
      `--socket=${socketPath}`,
      '--port=0',
      '--no-logs-no-support',
      ...(options.extraDaemonArgs ?? []),
    ];
    let daemon: ChildProcess;
    try {
      // Its own process group: the helpers it starts (`su … tailscaled serve-taildrive` for
      // Taildrive shares) outlive it otherwise; stop() kills the whole group.
      daemon = spawn(binaries.tailscaled, args, { env, stdio: ['ignore', logFd, logFd], detached: true });
    } finally {
      // The child holds its own copy of the descriptor.
      closeSync(logFd);
    }
    const device = new TailscaleDevice(options.name, binaries, dir, env, daemon);
    liveDevices.add(device.#live);
    if (!exitHookInstalled) {
      exitHookInstalled = true;
      process.once('exit', killLiveDevicesAtExit);
    }
    const spawnError = new Promise<Error>((resolve) => daemon.once('error', resolve));
    try {
      await Promise.race([
        device.#waitForLocalApi(options.startTimeoutMs ?? 20_000),
        spawnError.then((err) => {
          throw new Error(`TailscaleDevice.start(${options.name}): cannot run ${binaries.tailscaled}: ${err.message}`);
        }),
      ]);
    } catch (err) {
      await device.stop();
      throw err;
    }
    return device;
  }

  /** pid of the tailscaled process. */
  get pid(): number | undefined {
    return this.#daemon.pid;
  }

  /** exited reports whether tailscaled has terminated. */
  get exited(): boolean {
    return processExited(this.#daemon);
  }

  /** logTail returns the last maxChars of the daemon log (empty once stop() removed it). */
  logTail(maxChars = 4000): string {
    try {
      return readFileSync(this.logPath, 'utf8').slice(-maxChars);
    } catch {
      return '';
    }
  }

  async #waitForLocalApi(timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    let last = '';
    while (Date.now() < deadline) {
      if (this.#stopped) throw new Error(`tailscaled (${this.name}) was stopped during start`);
      if (this.exited) {
        throw new Error(`tailscaled (${this.name}) exited during start (code ${this.#daemon.exitCode}, signal ${this.#daemon.signalCode}):\n${this.logTail()}`);
      }
      if (existsSync(this.socketPath)) {
        const r = await this.cli(['status', '--json'], { timeoutMs: 5000 });
        if (r.code === 0) {
          try {
            JSON.parse(r.stdout);
            return;
          } catch {
            last = r.stdout;
          }
        } else {
          last = r.stderr || r.stdout;
        }
      }
      await sleep(100);
    }
    throw new Error(`tailscaled (${this.name}) LocalAPI did not answer within ${timeoutMs} ms (last: ${last.trim()}):\n${this.logTail()}`);
  }

  #cliArgs(args: string[]): string[] {
    return [`--socket=${this.socketPath}`, ...args];
  }

  #assertRunning(what: string): void {
    if (this.#stopped) throw new Error(`${what}: device ${this.name} is stopped`);
  }

  /** cli runs `tailscale --socket=<sock> <args>` and returns its result whatever the exit code. */
  async cli(args: string[], options: { timeoutMs?: number } = {}): Promise<CommandResult> {
    const running = startCommand(this.binaries.tailscale, this.#cliArgs(args), this.env, options.timeoutMs ?? DEFAULT_CLI_TIMEOUT_MS);
    this.#cliChildren.add(running.child);
    try {
      return await running.result;
    } finally {
      this.#cliChildren.delete(running.child);
    }
  }

  /** cliOk is {@link cli} that throws, with the CLI's output, unless it exits 0. */
  async cliOk(args: string[], options: { timeoutMs?: number } = {}): Promise<CommandResult> {
    this.#assertRunning(`tailscale ${args[0] ?? ''}`);
    const r = await this.cli(args, options);
    if (r.code !== 0 || r.timedOut) throw new Error(describeFailure(`tailscale ${args.join(' ')} (${this.name})`, r));
    return r;
  }

  /** version is the first line of `tailscale version`, e.g. "1.102.5". */
  async version(): Promise<string> {
    const r = await this.cliOk(['version']);
    return r.stdout.split('\n')[0]!.trim();
  }

  /** status is parsed `tailscale status --json`. */
  async status(): Promise<TailscaleStatus> {
    const r = await this.cliOk(['status', '--json']);
    const parsed = parseJson<TailscaleStatus>('tailscale status --json', r.stdout);
    if (typeof parsed !== 'object' || parsed === null || typeof parsed.BackendState !== 'string') {
      throw new Error(`tailscale status --json (${this.name}) has no BackendState: ${r.stdout.slice(0, 500)}`);
    }
    return parsed;
  }

  /** netmap is parsed `tailscale debug netmap`; null while the client has no network map (not logged in). */
  async netmap(): Promise<NetworkMapJson | null> {
    const r = await this.cli(['debug', 'netmap']);
    if (r.code !== 0 || r.timedOut) {
      // Newer clients answer an error rather than "null" when there is no netmap yet.
      if (/no netmap|netmap is nil|not found/i.test(r.stderr)) return null;
      throw new Error(describeFailure(`tailscale debug netmap (${this.name})`, r));
    }
    const parsed = parseJson<NetworkMapJson | null>('tailscale debug netmap', r.stdout);
    return parsed;
  }

  /**
   * up runs `tailscale up`. With authKey it waits for the login to finish
   * (throws on failure or timeout). Without one it resolves as soon as the
   * CLI prints the interactive AuthURL (or status reports one); that `up`
   * process keeps running until the node is authorised or stop() kills it.
   */
  /** waitNetmap polls `tailscale debug netmap` until check holds; a timeout's error shows `brief` of the last map seen. */
  async waitNetmap(check: (nm: NetworkMapJson) => boolean, opts: { timeoutMs: number; intervalMs?: number; brief?: (nm: NetworkMapJson) => unknown }): Promise<NetworkMapJson> {
    const deadline = Date.now() + opts.timeoutMs;
    let last: NetworkMapJson | null = null;
    for (;;) {
      last = await this.netmap().catch(() => null);
      if (last && check(last)) return last;
      if (Date.now() >= deadline) break;
      await new Promise((r) => setTimeout(r, opts.intervalMs ?? 100));
    }
    const brief = last && opts.brief ? opts.brief(last) : last;
    throw new Error(`netmap of ${this.name} did not reach the expected state within ${opts.timeoutMs} ms; last: ${JSON.stringify(brief)}`);
  }

  async up(options: UpOptions): Promise<UpResult> {
    this.#assertRunning('tailscale up');
    const timeoutMs = options.timeoutMs ?? 30_000;
    const args = ['up', `--login-server=${options.loginServer}`, '--accept-dns=false', `--hostname=${options.hostname}`];
    if (options.authKey !== undefined) args.push(`--authkey=${options.authKey}`, `--timeout=${Math.ceil(timeoutMs / 1000)}s`);
    if (options.advertiseRoutes !== undefined) args.push(`--advertise-routes=${options.advertiseRoutes.join(',')}`);
    if (options.advertiseExitNode === true) args.push('--advertise-exit-node');
    if (options.acceptRoutes !== undefined) args.push(`--accept-routes=${options.acceptRoutes}`);
    if (options.advertiseTags !== undefined) args.push(`--advertise-tags=${options.advertiseTags.join(',')}`);
    if (options.reset === true) args.push('--reset');
    args.push(...(options.extraArgs ?? []));

    // An AuthURL the daemon shows before this run starts belongs to an earlier attempt (one whose `tailscale up`
    // failed, e.g. rejected, before its URL was read): the status fallback below must not hand it out as this run's.
    if (options.authKey === undefined) {
      const earlier = (await this.status().catch(() => undefined))?.AuthURL;
      if (earlier) this.#authUrls.add(earlier);
    }
    // The CLI gets a little longer than its own --timeout so its error message wins the race.
    const running = startCommand(this.binaries.tailscale, this.#cliArgs(args), this.env, timeoutMs + 5000);
    this.#cliChildren.add(running.child);
    void running.result.finally(() => this.#cliChildren.delete(running.child)).catch(() => undefined);

    if (options.authKey !== undefined) {
      const r = await running.result;
      if (r.code !== 0 || r.timedOut) throw new Error(`${describeFailure(`tailscale up (${this.name})`, r)}; ${await this.#healthSummary()}`);
      return { stdout: r.stdout, stderr: r.stderr };
    }

    let finished: CommandResult | undefined;
    let spawnFailure: Error | undefined;
    running.result.then(
      (r) => {
        finished = r;
      },
      (err: Error) => {
        spawnFailure = err;
      },
    );
    const output = { stdout: '', stderr: '' };
    running.child.stdout?.on('data', (chunk: string) => {
      output.stdout += chunk;
    });
    running.child.stderr?.on('data', (chunk: string) => {
      output.stderr += chunk;
    });
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      const printed = AUTH_URL_LINE.exec(output.stderr) ?? AUTH_URL_LINE.exec(output.stdout);
      if (printed !== null) {
        this.#authUrls.add(printed[1]!);
        return { authUrl: printed[1]!, stdout: output.stdout, stderr: output.stderr, exited: running.result };
      }
      if (spawnFailure !== undefined) throw spawnFailure;
      if (finished !== undefined) {
        if (finished.code !== 0) throw new Error(describeFailure(`tailscale up (${this.name})`, finished));
        // Exited 0 without a URL: the node was already authorised.
        return { stdout: finished.stdout, stderr: finished.stderr };
      }
      // `tailscale status` shows the daemon's AuthURL, which until this run's Start() resets it is
      // still the URL of an earlier attempt (a rejected login's dead URL): only a URL this device
      // has not handed out before counts.
      const st = await this.status().catch(() => undefined);
      if (st?.AuthURL && !this.#authUrls.has(st.AuthURL)) {
        this.#authUrls.add(st.AuthURL);
        return { authUrl: st.AuthURL, stdout: output.stdout, stderr: output.stderr, exited: running.result };
      }
      await sleep(200);
    }
    running.child.kill('SIGKILL');
    const health = await this.#healthSummary();
    throw new Error(`tailscale up (${this.name}) printed no AuthURL within ${timeoutMs} ms; ${health}; output: ${(output.stderr || output.stdout).trim().slice(-2000)}`);
  }

  /** #healthSummary describes the daemon's health warnings (where login errors show up) for error messages. */
  async #healthSummary(): Promise<string> {
    try {
      const st = await this.status();
      const health = st.Health ?? [];
      return `BackendState ${st.BackendState}, health: ${health.length > 0 ? health.join(' | ') : 'none'}`;
    } catch (err) {
      return `status unavailable (${(err as Error).message})`;
    }
  }

  /** prefs is parsed `tailscale debug prefs` (ipn.Prefs: ControlURL, Hostname, AdvertiseRoutes, RouteAll, ...). */
  async prefs(): Promise<Record<string, unknown>> {
    const r = await this.cliOk(['debug', 'prefs']);
    return parseJson<Record<string, unknown>>('tailscale debug prefs', r.stdout);
  }

  /** logout runs `tailscale logout` (expires the node key on the server and forgets local state). */
  async logout(): Promise<void> {
    await this.cliOk(['logout'], { timeoutMs: 30_000 });
  }

  /** ping runs `tailscale ping` against a peer name or IP and throws when no pong arrives. */
  async ping(peer: string, options: PingOptions = {}): Promise<PingResult> {
    const count = options.count ?? 1;
    const perPingMs = options.timeoutMs ?? 5000;
    const args = ['ping', `--c=${count}`, `--timeout=${perPingMs}ms`, `--until-direct=${options.untilDirect ?? false}`];
    if (options.tsmp === true) args.push('--tsmp');
    if (options.icmp === true) args.push('--icmp');
    args.push(peer);
    const r = await this.cliOk(args, { timeoutMs: count * perPingMs + 10_000 });
    const pongs = [...r.stdout.matchAll(/^pong from .* via (\S+) in /gm)];
    const via = pongs.at(-1)?.[1];
    return via === undefined ? { output: r.stdout } : { output: r.stdout, via };
  }

  /**
   * waitFor polls status until predicate holds and returns that status; on
   * timeout it throws with the last BackendState and the end of the daemon log.
   */
  async waitFor(predicate: (status: TailscaleStatus) => boolean, timeoutMs: number, intervalMs = 250): Promise<TailscaleStatus> {
    const deadline = Date.now() + timeoutMs;
    let last: TailscaleStatus | undefined;
    let lastError: Error | undefined;
    for (;;) {
      this.#assertRunning('waitFor');
      try {
        last = await this.status();
        lastError = undefined;
        if (predicate(last)) return last;
      } catch (err) {
        lastError = err as Error;
      }
      if (Date.now() >= deadline) break;
      await sleep(intervalMs);
    }
    const lastSeen = lastError !== undefined ? `last error: ${lastError.message}` : `last BackendState ${last?.BackendState ?? 'unknown'}`;
    throw new Error(`waitFor (${this.name}) timed out after ${timeoutMs} ms, ${lastSeen}\n${this.logTail()}`);
  }

  /**
   * stop ends tailscaled (SIGTERM, then SIGKILL after graceMs), kills any CLI
   * still running and removes the temp dir unless keepDir is set. Idempotent.
   */
  async stop(options: { graceMs?: number; keepDir?: boolean } = {}): Promise<void> {
    if (!this.#stopped) {
      this.#stopped = true;
      for (const child of this.#cliChildren) child.kill('SIGKILL');
      if (!this.exited) {
        this.#daemon.kill('SIGTERM');
        if (!(await waitForExit(this.#daemon, options.graceMs ?? 5000))) {
          this.#daemon.kill('SIGKILL');
          if (!(await waitForExit(this.#daemon, 5000))) throw new Error(`tailscaled (${this.name}, pid ${this.pid}) survived SIGKILL`);
        }
      }
      // Taildrive's `serve-taildrive` helpers run as children of `su` in the daemon's group.
      killGroup(this.#daemon);
    }
    liveDevices.delete(this.#live);
    if (options.keepDir !== true) rmSync(this.dir, { recursive: true, force: true });
  }
}
