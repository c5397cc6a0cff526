/**
 * Harness that runs the real headscale (built by `.ci/install-headscale.sh`) on loopback,
 * with its own config, SQLite database, control key and unix socket in a temp directory,
 * for tests that start from a real headscale deployment (the migration test).
 */
import { spawn, type ChildProcess, execFile } from 'node:child_process';
import { closeSync, existsSync, openSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { freePort } from './ports.js';
import type { TapLike } from './tailscale.js';

/** HEADSCALE_VERSION is the release the tests run (the one .ci/install-headscale.sh builds). */
export const HEADSCALE_VERSION = 'v0.29.2';

/** headscaleBinary is `${HEADSCALE_HOME:-~/.cache/headway/headscale}/<version>/headscale`. */
export function headscaleBinary(version = HEADSCALE_VERSION): string {
  const home = process.env.HEADSCALE_HOME || join(homedir(), '.cache', 'headway', 'headscale');
  return join(home, version, 'headscale');
}

/**
 * requireHeadscale returns the binary, or undefined after skipping the test (locally) or
 * failing it (under CI=true, where a missing binary means the install step broke).
 */
export function requireHeadscale(t: TapLike, version = HEADSCALE_VERSION): string | undefined {
  const bin = headscaleBinary(version);
  try {
    if (statSync(bin).mode & 0o111) return bin;
  } catch {
    // missing: reported below
  }
  const reason = `no headscale ${version} at ${bin}; run .ci/install-headscale.sh`;
  if (process.env.CI === 'true') t.fail(reason);
  else {
    t.comment(reason);
    t.skip(reason, () => undefined);
  }
  return undefined;
}


const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** HeadscaleServer is one running `headscale serve` with everything it owns under `dir`. */
export class HeadscaleServer {
  readonly url: string;
  readonly configPath: string;
  readonly dbPath: string;
  readonly noiseKeyPath: string;
  readonly logPath: string;
  /** metricsUrl is headscale's separate metrics listener (metrics_listen_addr): /metrics and its debug pages. */
  metricsUrl = '';
  #child: ChildProcess | undefined;

  private constructor(readonly bin: string, readonly dir: string, readonly port: number) {
    this.url = `http://127.0.0.1:${port}`;
    this.configPath = join(dir, 'config.yaml');
    this.dbPath = join(dir, 'db.sqlite');
    this.noiseKeyPath = join(dir, 'noise_private.key');
    this.logPath = join(dir, 'headscale.log');
  }

  /**
   * start writes a config (SQLite, loopback listeners on free ports, the embedded DERP
   * server as the only relay so nothing reaches the internet, policy in the database unless
   * `opts.policyFile` names a file) and runs `headscale serve` until its /health answers.
   * `opts.logLevel` and `opts.dns` replace the log level and the `dns` section.
   */
  static async start(bin: string, dir: string, opts: { policyFile?: string; logLevel?: string; dns?: object } = {}): Promise<HeadscaleServer> {
    const [port, metrics, grpc, stun] = [await freePort(), await freePort(), await freePort(), await freePort('udp')];
    const hs = new HeadscaleServer(bin, dir, port);
    hs.metricsUrl = `http://127.0.0.1:${metrics}`;
    // JSON is YAML.
    writeFileSync(hs.configPath, JSON.stringify({
      server_url: hs.url,
      listen_addr: `127.0.0.1:${port}`,
      metrics_listen_addr: `127.0.0.1:${metrics}`,
      grpc_listen_addr: `127.0.0.1:${grpc}`,
      grpc_allow_insecure: false,
      noise: { private_key_path: hs.noiseKeyPath },
      prefixes: { v4: '100.64.0.0/10', v6: 'fd7a:115c:a1e0::/48', allocation: 'sequential' },
      derp: {
        server: {
          enabled: true, region_id: 999, region_code: 'headscale', region_name: 'Headscale Embedded DERP', verify_clients: true,
          stun_listen_addr: `127.0.0.1:${stun}`, private_key_path: join(dir, 'derp_server_private.key'),
          automatically_add_embedded_derp_region: true, ipv4: '127.0.0.1',
        },
        urls: [], paths: [], auto_update_enabled: false,
      },
      disable_check_updates: true,
      database: { type: 'sqlite', sqlite: { path: hs.dbPath, write_ahead_log: true } },
      log: { level: opts.logLevel ?? 'info', format: 'text' },
      policy: opts.policyFile ? { mode: 'file', path: opts.policyFile } : { mode: 'database' },
      dns: opts.dns ?? { magic_dns: false, base_domain: 'hs.test', override_local_dns: false, nameservers: { global: [] } },
      unix_socket: join(dir, 'headscale.sock'),
      unix_socket_permission: '0770',
      logtail: { enabled: false },
    }));
    const log = openSync(hs.logPath, 'a');
    try {
      hs.#child = spawn(bin, ['serve', '-c', hs.configPath], { stdio: ['ignore', log, log], env: { ...process.env, HOME: dir } });
    } finally {
      closeSync(log);
    }
    const deadline = Date.now() + 30_000;
    for (;;) {
      if (hs.#child.exitCode !== null) throw new Error(`headscale exited during start (${hs.#child.exitCode}):\n${hs.logTail()}`);
      try {
        if ((await fetch(`${hs.url}/health`)).ok && existsSync(join(dir, 'headscale.sock'))) return hs;
      } catch {
        // not listening yet
      }
      if (Date.now() > deadline) {
        await hs.stop();
        throw new Error(`headscale did not answer /health within 30 s:\n${hs.logTail()}`);
      }
      await sleep(200);
    }
  }

  logTail(chars = 3000): string {
    try { return readFileSync(this.logPath, 'utf8').slice(-chars); } catch { return ''; }
  }

  /** pid is the running `headscale serve` process's. */
  get pid(): number | undefined {
    return this.#child?.pid;
  }

  /** cli runs `headscale -c <config> <args>` and returns stdout; it throws with the output unless it exits 0 within timeoutMs. */
  cli(args: string[], timeoutMs = 30_000): Promise<string> {
    return new Promise((resolve, reject) => {
      execFile(this.bin, ['-c', this.configPath, ...args], { timeout: timeoutMs, env: { ...process.env, HOME: this.dir } }, (err, stdout, stderr) => {
        if (err) reject(new Error(`headscale ${args.join(' ')}: ${err.message}\n${stderr}${stdout}`));
        else resolve(String(stdout));
      });
    });
  }

  /** stop ends headscale (SIGTERM, SIGKILL after 10 s). Idempotent. */
  async stop(): Promise<void> {
    const child = this.#child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise<void>((r) => child.once('exit', () => r()));
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
    await exited;
    clearTimeout(timer);
  }
}
