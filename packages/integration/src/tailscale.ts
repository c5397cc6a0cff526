/**
 * Harness that drives the real Tailscale client (tailscaled + tailscale CLI)
 * built by `.ci/install-tailscale.sh`, for interop tests against Headway.
 *
 * Every daemon runs in userspace-networking mode with its own temp directory
 * (state, unix socket, log file) and an environment that keeps it off the
 * outside network; see {@link tailscaledEnvironment}. Finding the installs is in
 * tailscale-setup.ts, process plumbing in tailscale-process.ts, types in tailscale-types.ts.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, existsSync, mkdirSync, mkdtempSync, openSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  describeFailure,
  killGroup,
  parseJson,
  processExited,
  sleep,
  startCommand,
  tailscaledEnvironment,
  trackLiveDevice,
  untrackLiveDevice,
  waitForExit,
  type LiveDevice,
} from './tailscale-process.js';
import { findTailscaleBinaries, tailscaleHome } from './tailscale-setup.js';
import type { CommandResult, NetworkMapJson, PingOptions, PingResult, StartOptions, TailscaleBinaries, TailscaleStatus, UpOptions, UpResult } from './tailscale-types.js';

export * from './tailscale-types.js';
export { cleanupStack, findTailscaleBinaries, repoRoot, requireTailscale, tailscaleHome } from './tailscale-setup.js';
export { tailscaledEnvironment } from './tailscale-process.js';

const SAFE_NAME = /^[A-Za-z0-9_-]{1,32}$/;
const DEFAULT_CLI_TIMEOUT_MS = 15_000;

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
  readonly #live: LiveDevice;
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
    trackLiveDevice(device.#live);
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

  /**
   * up runs `tailscale up`. With authKey it waits for the login to finish
   * (throws on failure or timeout). Without one it resolves as soon as the
   * CLI prints the interactive AuthURL (or status reports one); that `up`
   * process keeps running until the node is authorised or stop() kills it.
   */
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
    untrackLiveDevice(this.#live);
    if (options.keepDir !== true) rmSync(this.dir, { recursive: true, force: true });
  }
}
